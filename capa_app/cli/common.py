"""What every ``capa`` command shares: exit codes, consoles, global options, manifest loading, AWS options.

Kept apart from :mod:`capa_app.cli.main` (which builds the app and mounts the command modules) so that
command modules import it without importing each other. It imports only typer and rich when loaded: what
a helper needs (the store, the manifests, AWS) it imports when called, so registering the commands (all
``--help`` needs) loads none of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeAlias

import typer
from rich.console import Console

if TYPE_CHECKING:
    from capa_app.cli.aws_context import AWSContext
    from capa_py.api.meta import KubeObject
    from capa_py.aws.accounting import CallCounter
    from capa_py.logging import LogFormat
    from capa_py.store import SQLiteStore
    from capa_py.store.kube import KubeStore
    from capa_py.store.protocol import ObjectStore

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


OpenedStore: TypeAlias = "SQLiteStore | KubeStore"


@dataclass
class Globals:
    """The global options. The store is the SQLite file at ``state`` unless ``--kubeconfig`` or
    ``--store kube`` selects a Kubernetes API server (``kubeconfig``, else KUBECONFIG, ~/.kube/config or
    the in-cluster service account)."""

    state: Path
    log_format: LogFormat
    verbosity: int
    kubeconfig: Path | None = None
    store_kind: str = "sqlite"

    @property
    def remote(self) -> bool:
        """Whether the store is a Kubernetes API server (whose own controllers do the work)."""
        return self.kubeconfig is not None or self.store_kind == "kube"

    def store(self) -> OpenedStore:
        """The store, created on first use; a path that is not a store exits 2 naming it."""
        from capa_py.store import Unavailable, open_store

        if self.remote:
            return self._kube_store()
        try:
            return open_store(self.state)
        except Unavailable as exc:
            fail(str(exc), EXIT_INVALID)

    def existing_store(self) -> OpenedStore | None:
        """The store if one exists (never created: read-only commands use this), else ``None``."""
        from capa_py.store import Missing, Unavailable, open_store

        if self.remote:
            return self._kube_store()
        try:
            return open_store(self.state, create=False)
        except Missing:
            return None
        except Unavailable as exc:
            fail(str(exc), EXIT_INVALID)

    def _kube_store(self) -> KubeStore:
        """The API server's store: a kubeconfig that cannot be used exits 2, a server that does not
        answer exits 1."""
        from capa_py.store import Unavailable
        from capa_py.store.kube import KubeStore

        try:
            if self.kubeconfig is not None:
                store = KubeStore.from_kubeconfig(self.kubeconfig)
            else:
                store = KubeStore.from_environment()
        except Unavailable as exc:
            fail(str(exc), EXIT_INVALID)
        try:
            store.check()
        except Unavailable as exc:
            store.close()
            fail(str(exc))
        return store


def say_no_store(state: Path) -> None:
    """What read-only commands print when there is no store: it is treated as empty, not created."""
    stderr.print(f"No store at {state}: nothing is stored yet.", markup=False, highlight=False)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    stderr.print(f"error: {message}", markup=False, highlight=False)
    raise typer.Exit(code)


def globals_of(ctx: typer.Context) -> Globals:
    obj = ctx.find_root().obj
    assert isinstance(obj, Globals)
    return obj


def load_files(files: list[Path]) -> list[KubeObject]:
    from capa_py.api.loader import ManifestError, load_manifests

    try:
        return load_manifests(files)
    except ManifestError as exc:
        for problem in exc.problems:
            stderr.print(f"error: {problem}", markup=False, highlight=False)
        raise typer.Exit(EXIT_INVALID) from exc


def check_output(output: str, wide: bool = False) -> None:
    """``wide`` allows ``-o wide`` (a table with kubectl's priority-1 columns too)."""
    if output == "wide" and wide:
        return
    if output not in ("table", "json", "yaml"):
        choices = "table, wide, json or yaml" if wide else "table, json or yaml"
        raise typer.BadParameter(f"must be {choices}", param_hint="-o/--output")


FilesOption = Annotated[
    list[Path] | None,
    typer.Option("-f", "--filename", help="Manifest file (YAML or JSON, multi-document); '-' for stdin."),
]
OutputOption = Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")]


EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--aws-endpoint",
        help="AWS endpoint: 'local' for the embedded endpoint, or a URL (default: AWS, or AWS_ENDPOINT_URL).",
    ),
]
RegionOption = Annotated[str | None, typer.Option("--region", help="AWS region (default: the AWSCluster's).")]
ProfileOption = Annotated[str | None, typer.Option("--profile", help="AWS shared-config profile.")]
TraitsOption = Annotated[
    str | None,
    typer.Option("--endpoint-profile", help="Trait profile: aws, moto or localstack (default: by endpoint)."),
]
WaitOption = Annotated[bool, typer.Option("--wait/--no-wait", help="Run the controllers until done.")]
TimeoutOption = Annotated[str, typer.Option("--timeout", help="How long --wait waits (90s, 15m, 1h).")]
RunControllersOption = Annotated[
    bool,
    typer.Option(
        "--run-controllers",
        help="Against an API server (--kubeconfig, --store kube): run the controllers in this process, "
        "holding the store's lease, instead of waiting for the ones running there. Always so on SQLite.",
    ),
]


def _check_lease_environment(value: bool) -> bool:
    # Checked while the options are parsed, so a malformed duration exits 2 before the store changes.
    from capa_py.runtime.leader import LeaseTiming

    try:
        LeaseTiming.from_env()
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    return value


NoWaitForLockOption = Annotated[
    bool,
    typer.Option(
        "--no-wait-for-lock",
        help="When another process holds the store's lease, exit 1 naming it instead of waiting.",
        callback=_check_lease_environment,
    ),
]


def region_of(objects: list[KubeObject], store: ObjectStore | None = None) -> str | None:
    from capa_py.api.aws import AWSCluster

    for obj in objects:
        if isinstance(obj, AWSCluster):
            return obj.spec.region
    if store is not None:
        clusters = store.list(AWSCluster)
        if clusters:
            return clusters[0].spec.region
    return None


def aws_context(
    ctx: typer.Context, endpoint: str | None, region: str | None, profile: str | None, traits: str | None
) -> AWSContext:
    from capa_app.cli.aws_context import build_aws_context
    from capa_py.aws import local
    from capa_py.aws.errors import AWSError

    try:
        return build_aws_context(globals_of(ctx).state, endpoint, region, profile, traits)
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    except (AWSError, local.LocalEndpointError) as exc:
        fail(str(exc))


def calls_summary(calls: CallCounter) -> dict[str, Any]:
    return {
        "total": calls.total(),
        "mutating": calls.total(mutating=True),
        "byOperation": calls.by_operation(),
        "byOutcome": calls.by_outcome(),
    }


def reachable_kube_store(kubeconfig: Path, flag: str, unreachable: str | None = None) -> KubeStore:
    """The API server a kubeconfig names, checked to answer: a kubeconfig that cannot be used exits 2
    naming ``flag``; a server that does not answer exits 1 saying ``unreachable`` (by default, naming
    ``flag``)."""
    from capa_py.store import Unavailable
    from capa_py.store.kube import KubeStore

    try:
        store = KubeStore.from_kubeconfig(kubeconfig)
    except Unavailable as exc:
        fail(f"{flag}: {exc}", EXIT_INVALID)
    try:
        store.check()
    except Unavailable as exc:
        store.close()
        fail(f"{unreachable or flag + ': the server does not answer'}: {exc}")
    return store
