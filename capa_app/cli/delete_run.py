"""What ``capa delete`` does once its flags are checked: it resolves the objects named, deletes them (or
marks them for deletion), and with ``--wait`` runs the controllers in this process or observes those
running elsewhere until the objects are gone."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from capa_app.cli.aws_support import (
    converge_here,
    label,
    observe_elsewhere,
    print_calls,
    refuse_stale_local_store,
    report_unfinished,
    stored_copies,
)
from capa_app.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    aws_context,
    fail,
    globals_of,
    load_files,
    region_of,
    stderr,
    stdout,
)
from capa_app.cli.tink_cmd import report_workflow_outcomes
from capa_py.api.aws_identity import IDENTITY_KINDS
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.api.registry import REGISTRY, UnknownKind
from capa_py.aws.deadline import Deadline, aws_deadline
from capa_py.operations import delete_objects
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore
from controllers import needs_aws

if TYPE_CHECKING:
    from capa_app.cli.aws_context import AWSContext


def _requested(
    filename: list[Path] | None, kind: str | None, name: str | None, namespace: str | None
) -> list[KubeObject]:
    """The objects the command names: a manifest's, or a bare KIND NAME reference."""
    if filename:
        return load_files(filename)
    if kind and name:
        try:
            model = REGISTRY.resolve(kind)
        except UnknownKind as exc:
            fail(str(exc), EXIT_INVALID)
        reference = model.model_construct()
        reference.metadata = ObjectMeta(
            name=name, namespace=(namespace or "default") if model.NAMESPACED else None
        )
        return [reference]
    raise typer.BadParameter("give -f FILE or KIND NAME")


def _delete(
    store: ObjectStore, objects: list[KubeObject], ignore_not_found: bool, from_files: bool
) -> list[KubeObject]:
    """Delete (or mark for deletion) each object, say what happened; the last states of those left."""
    try:
        # A manifest re-deleted after a delete that did not finish: what is gone already is done.
        results = delete_objects(store, objects, ignore_not_found, partial_ok=from_files)
    except NotFound as exc:
        fail(str(exc))
    for requested, last in results:
        if last is None:
            if from_files:
                stdout.print(f"{label(requested)} already deleted", highlight=False)
            continue
        pending = last.metadata.deletion_timestamp is not None and bool(last.metadata.finalizers)
        name = f"{requested.KIND.lower()}/{requested.metadata.name}"
        stdout.print(f"{name} {'deleting' if pending else 'deleted'}", highlight=False)
    return [last for _, last in results if last is not None]


def _converge(
    store: ObjectStore,
    targets: list[KubeObject],
    aws: AWSContext | None,
    wait_for_lock: bool,
    timeout: str,
    limit: Deadline,
) -> None:
    """The controllers run in this process, holding the store lease, until ``targets`` are gone."""
    result = converge_here(
        stderr,
        store,
        targets,
        "gone",
        command="capa delete",
        aws=aws,
        wait_for_lock=wait_for_lock,
        limit=limit,
        show=True,
    )
    report_workflow_outcomes(store, targets)
    print_calls(result.calls)
    if not result.converged:
        report_unfinished(stderr, result, f"not deleted after {timeout} (--timeout)", "deleted", limit)
        raise typer.Exit(EXIT_FAILED)


@dataclass(frozen=True)
class DeleteOptions:
    """``capa delete``'s checked flags: what it names, and how it waits."""

    filename: list[Path] | None
    kind: str | None
    name: str | None
    namespace: str | None
    ignore_not_found: bool
    endpoint: str | None
    region: str | None
    profile: str | None
    endpoint_profile: str | None
    wait: bool
    timeout: str
    wait_for_lock: bool
    in_process: bool


def delete_and_wait(ctx: typer.Context, options: DeleteOptions, seconds: float) -> None:
    """Delete what the command names and (with ``--wait``) reconcile until it is gone or ``seconds`` have
    passed."""
    filename, wait, timeout = options.filename, options.wait, options.timeout
    objects = _requested(filename, options.kind, options.name, options.namespace)
    deadline = time.monotonic() + seconds
    elsewhere = wait and globals_of(ctx).remote and not options.in_process
    # --timeout bounds the whole command: no AWS call starts after the deadline.
    with globals_of(ctx).store() as store, aws_deadline(deadline) as limit:
        aws_ctx = None
        if wait and not elsewhere and needs_aws(objects, store):
            # An object named by KIND NAME is a bare reference: its region is its stored copy's.
            known = objects if filename else stored_copies(store, objects)
            aws_ctx = aws_context(
                ctx,
                options.endpoint,
                options.region or region_of(known, store),
                options.profile,
                options.endpoint_profile,
            )
            refuse_stale_local_store(ctx, store, aws_ctx)
        # The clusters' credentials: an identity goes once what uses it is gone (with --wait).
        identities = [o for o in objects if isinstance(o, IDENTITY_KINDS)] if wait else []
        rest = [o for o in objects if not isinstance(o, IDENTITY_KINDS)] if wait else objects
        targets = _delete(store, rest, options.ignore_not_found, bool(filename))
        if not wait:
            return
        if not elsewhere:
            _converge(store, targets, aws_ctx, options.wait_for_lock, timeout, limit)
            _delete(store, identities, options.ignore_not_found, bool(filename))
            return
        result = observe_elsewhere(stderr, store, targets, "gone", limit.left(), True)
        if not result.converged:
            report_unfinished(stderr, result, f"not deleted after {timeout} (--timeout)", "deleted", limit)
            raise typer.Exit(EXIT_FAILED)
        _delete(store, identities, options.ignore_not_found, bool(filename))
        report_workflow_outcomes(store, targets)


__all__ = ["DeleteOptions", "delete_and_wait"]
