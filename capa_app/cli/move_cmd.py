"""``capa move``: move clusters and their graphs from this store to another (a pivot), as ``clusterctl
move`` does. The library call is :func:`capa_py.move.move`; this module only opens the stores and prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from capa_app.cli.common import EXIT_INVALID, fail, globals_of, reachable_kube_store, stdout

if TYPE_CHECKING:
    from capa_py.move import MoveResult
    from capa_py.store.protocol import ObjectStore


def _open_target(to_kubeconfig: Path | None, to_state: Path | None, source_state: Path | None) -> ObjectStore:
    """The target store; a target that cannot be used exits 2 (bad flag) or 1 (unreachable) before the
    move writes anything."""
    from capa_py.store import Unavailable, open_store

    if (to_kubeconfig is None) == (to_state is None):
        fail("exactly one of --to-kubeconfig and --to-state is required", EXIT_INVALID)
    if to_state is not None:
        if source_state is not None and to_state.resolve() == source_state.resolve():
            fail(f"--to-state: {to_state} is the source store", EXIT_INVALID)
        try:
            return open_store(to_state)
        except Unavailable as exc:
            fail(f"--to-state: {exc}", EXIT_INVALID)
    assert to_kubeconfig is not None
    return reachable_kube_store(
        to_kubeconfig, "--to-kubeconfig", "the target is unreachable, nothing was moved"
    )


def _say(line: str) -> None:
    stdout.print(line, markup=False, highlight=False)


def _print(result: MoveResult) -> None:
    global_uids = {o.uid for o in result.global_objects}
    copied = len(result.global_objects)
    if result.dry_run:
        for obj in result.objects:
            _say(f"{obj.ref()} (global: copied, kept on the source)" if obj.uid in global_uids else obj.ref())
        for missing in result.missing:
            _say(f"{missing} (referenced, not on the source: not moved)")
        also = f", {copied} global objects would be copied" if copied else ""
        _say(f"{len(result.objects) - copied} objects would move{also} (dry run)")
        return
    for kind, count in result.per_kind().items():
        _say(f"{kind}: {count}")
    for missing in result.missing:
        _say(f"{missing} (referenced, not on the source: not moved)")
    _say(f"moved {len(result.objects) - copied} objects of {len(result.clusters)} clusters")
    if copied:
        already = sum(result.kept.values())
        _say(f"{copied} global objects (identities) kept on the source, {already} already on the target")


def move_command(
    ctx: typer.Context,
    to_kubeconfig: Annotated[
        Path | None,
        typer.Option("--to-kubeconfig", help="Move to the Kubernetes API server this kubeconfig names."),
    ] = None,
    to_state: Annotated[
        Path | None, typer.Option("--to-state", help="Move to another embedded SQLite store.")
    ] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="The namespace whose clusters move.")
    ] = "default",
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Move only this cluster (of --namespace).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the objects that would move; change nothing.")
    ] = False,
) -> None:
    """Move clusters with everything that belongs to them to another store: pause them here, create
    them there (uids remapped, status kept), delete them here, unpause them there. AWS is not touched.
    Re-run an interrupted move to complete it."""
    from capa_py.move import MoveError, UnknownCluster, move, require_cluster
    from capa_py.store.errors import StoreError

    options = globals_of(ctx)
    if cluster is not None and to_state is not None and not to_state.exists():
        # A target store that does not exist yet holds no interrupted move: an unknown cluster is refused
        # before the target is created.
        source = options.store()
        try:
            require_cluster(source, None, namespace, cluster)
        except UnknownCluster as exc:
            fail(f"--cluster: {exc}", EXIT_INVALID)
        finally:
            source.close()
    target = _open_target(to_kubeconfig, to_state, None if options.remote else options.state)
    source = options.store()
    try:
        result = move(source, target, namespace=namespace, cluster=cluster, dry_run=dry_run)
    except UnknownCluster as exc:
        fail(f"--cluster: {exc}", EXIT_INVALID)
    except MoveError as exc:
        fail(str(exc))
    except StoreError as exc:
        fail(f"the move stopped (run it again to complete it): {exc}")
    finally:
        source.close()
        target.close()
    _print(result)


def register(app: typer.Typer) -> None:
    app.command(name="move")(move_command)
