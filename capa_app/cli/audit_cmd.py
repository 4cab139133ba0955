"""``capa audit``: find the AWS resources clusters leaked, say why each is one, and remove orphans safely.

A thin layer over :mod:`capa_app.audit`: options in, a table or JSON out. ``--delete`` is a dry run that
prints the plan unless ``--yes`` is given or the deletion is confirmed by typing ``yes`` on a terminal.

The default scope is this store's: the clusters it has objects for, and whatever carries its
``capa-py.io/store`` tag. Resources of those clusters that another store (or no capa-py store) tagged are
listed as ``foreign`` and are not leaks: they never change the exit code and are deleted only with
``--cluster NAME --include-foreign``.

Exit codes, for CI pipelines: 0 no leaks; 3 leaks found (after ``--delete --yes``: some could not be
deleted, each with its reason); 1 the audit failed (AWS, the store, or a delete that failed); 2 invalid
input.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capa_app.cli.common import (
    EndpointOption,
    ProfileOption,
    TraitsOption,
    aws_context,
    calls_summary,
    fail,
    globals_of,
    region_of,
)
from capa_app.cli.durations import parse_duration
from capa_app.cli.output import format_table, render_json

if TYPE_CHECKING:
    from capa_app.audit import AuditOptions, AuditReport, AuditRow, DeletionPlan, DeletionReport
    from capa_py.aws.session import ClientPool
    from capa_py.store.protocol import ObjectStore

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_LEAKS = 3


def _resources(count: int) -> str:
    return f"{count} resource{'' if count == 1 else 's'}"


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _rows_table(rows: list[AuditRow], regions: int) -> str:
    headers = ["KIND", "ID", "CLUSTER", "CLASS", "AGE", "WHY"]
    if regions > 1:
        headers.insert(0, "REGION")
    table = []
    for row in rows:
        cells = [
            row.kind,
            row.id,
            row.cluster or "-",
            str(row.classification),
            _age(row.age_seconds),
            row.reason,
        ]
        table.append([row.region, *cells] if regions > 1 else cells)
    return format_table(headers, table)


def _print_report(report: AuditReport, show_managed: bool) -> None:
    from capa_app.audit import AuditClass

    shown = [r for r in report.rows if show_managed or r.classification != AuditClass.MANAGED]
    if shown:
        sys.stdout.write(_rows_table(shown, len(report.regions)))
    counts = {k: n for k, n in report.summary().items() if n}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items()) or "nothing"
    scope = (
        f"this store's clusters (store {report.store_uid})"
        if report.clusters is None
        else "cluster " + ", ".join(report.clusters)
    )
    _say(f"Audited {scope} in {', '.join(report.regions)} ({report.discovery}): {summary}.")
    hidden = counts.get(str(AuditClass.MANAGED), 0)
    if hidden and not show_managed:
        _say(f"({hidden} managed resources not listed: --show-managed lists them)")
    leaks = len(report.leaks)
    _say(f"{leaks} leak{'s' if leaks != 1 else ''} found." if leaks else "No leaks found.")


def _print_plan(plan: DeletionPlan) -> None:
    if plan.steps:
        _say(f"Deletion plan ({_resources(len(plan.steps))}, in this order):")
        rows = [
            [
                str(s.order),
                s.phase,
                s.row.kind,
                s.row.id,
                s.row.cluster or "-",
                f"with {s.with_parent}" if s.with_parent else str(s.row.classification),
            ]
            for s in plan.steps
        ]
        sys.stdout.write(format_table(["#", "PHASE", "KIND", "ID", "CLUSTER", "NOTE"], rows))
    if plan.skipped:
        _say(f"Not deleted ({len(plan.skipped)}):")
        rows = [[s.row.kind, s.row.id, s.row.cluster or "-", s.reason] for s in plan.skipped]
        sys.stdout.write(format_table(["KIND", "ID", "CLUSTER", "WHY"], rows))


def _print_deletion(deletion: DeletionReport) -> None:
    rows = [[r.kind, r.id, r.cluster or "-", str(r.outcome), r.detail] for r in deletion.results]
    if rows:
        sys.stdout.write(format_table(["KIND", "ID", "CLUSTER", "RESULT", "DETAIL"], rows))
    removed = sum(1 for r in deletion.results if r.removed)
    left = len(deletion.results) - removed - len(deletion.failed)
    _say(f"{removed} removed, {len(deletion.failed)} failed, {left} left alone.")


def _duration(text: str) -> float:
    """``parse_duration`` plus days (``7d``, ``1d12h``): orphans are counted in days."""
    match = re.fullmatch(r"\s*(\d+)d(.*)", text)
    if match is None:
        return parse_duration(text)
    rest = match.group(2).strip()
    return int(match.group(1)) * 86400.0 + (parse_duration(rest) if rest else 0.0)


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _confirmed(plan: DeletionPlan) -> bool:
    if not plan.steps or not _interactive():
        return False
    answer = typer.prompt(f"Delete {_resources(len(plan.steps))}? Type 'yes' to confirm", default="no")
    return str(answer).strip().lower() == "yes"


def _options(
    cluster: str | None,
    all_clusters: bool,
    regions: list[str] | None,
    discovery: str,
    older_than: str | None,
    identity: str | None = None,
) -> AuditOptions:
    from capa_app.audit import AuditOptions, DiscoveryMode
    from capa_py.api.aws import known_regions

    if cluster and all_clusters:
        raise typer.BadParameter("give --cluster NAME or --all-clusters, not both", param_hint="--cluster")
    try:
        mode = DiscoveryMode(discovery)
    except ValueError:
        raise typer.BadParameter("must be tagging-api or describe", param_hint="--discovery") from None
    for region in regions or []:
        if region not in known_regions():
            raise typer.BadParameter(f"unknown AWS region {region!r}", param_hint="--region")
    seconds = None
    if older_than is not None:
        try:
            seconds = _duration(older_than)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--older-than") from exc
    return AuditOptions(
        clusters=frozenset({cluster}) if cluster else None,
        regions=tuple(regions or ()),
        discovery=mode,
        older_than=seconds,
        identity=_identity(identity),
    )


_IDENTITY_KINDS = ("AWSClusterControllerIdentity", "AWSClusterStaticIdentity", "AWSClusterRoleIdentity")


def _identity(text: str | None) -> str | None:
    """``Kind/name`` as given (the controller identity is the controller's own account: None)."""
    if text is None:
        return None
    kind, _, name = text.partition("/")
    if kind not in _IDENTITY_KINDS or not name:
        raise typer.BadParameter(
            f"{text!r}: give KIND/NAME, KIND one of {', '.join(_IDENTITY_KINDS)}", param_hint="--identity"
        )
    return None if kind == "AWSClusterControllerIdentity" else text


def audit(
    ctx: typer.Context,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster's resources.")] = None,
    all_clusters: Annotated[
        bool, typer.Option("--all-clusters", help="This store's clusters (the default).")
    ] = False,
    region: Annotated[
        list[str] | None,
        typer.Option("--region", help="Region to audit (repeatable; default: every AWSCluster's)."),
    ] = None,
    discovery: Annotated[
        str,
        typer.Option("--discovery", help="tagging-api (Resource Groups Tagging API) or describe."),
    ] = "tagging-api",
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Only resources older than this (90s, 15m, 2h, 7d)."),
    ] = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete the orphans (a dry run without --yes).")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --delete: delete without asking.")] = False,
    include_foreign: Annotated[
        bool,
        typer.Option(
            "--include-foreign",
            help="With --cluster and --delete: delete the cluster's resources another store (or no "
            "capa-py store) tagged, too.",
        ),
    ] = False,
    show_managed: Annotated[
        bool, typer.Option("--show-managed", help="List managed resources too (table output).")
    ] = False,
    identity: Annotated[
        str | None,
        typer.Option(
            "--identity",
            help="Audit the account an identity reaches (KIND/NAME, e.g. AWSClusterRoleIdentity/tenant-a), "
            "judged by the records of the clusters using it.",
        ),
    ] = None,
    aws_endpoint: EndpointOption = None,
    profile: ProfileOption = None,
    endpoint_profile: TraitsOption = None,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json.")] = "table",
) -> None:
    """Find leaked AWS resources: orphans, untagged leftovers in managed VPCs, drift; --delete removes
    orphans."""
    from capa_app.audit import delete_leaks, plan_deletion, run_audit
    from capa_py.aws.accounting import call_scope
    from capa_py.aws.errors import AWSError
    from capa_py.store.errors import StoreError

    if output not in ("table", "json"):
        raise typer.BadParameter("must be table or json", param_hint="-o/--output")
    options = _options(cluster, all_clusters, region, discovery, older_than, identity)
    if include_foreign and not cluster:
        raise typer.BadParameter(
            "--include-foreign deletes other stores' resources: name the cluster with --cluster NAME",
            param_hint="--include-foreign",
        )
    opened = globals_of(ctx).existing_store()
    if opened is None:
        # Never created by an audit: with no store, every tagged resource would look orphaned.
        fail(
            f"no store at {globals_of(ctx).state}: the audit judges resources by the clusters a store "
            "manages (pass --state with the store that made them)",
            EXIT_INVALID,
        )
    with opened as store:
        default_region = options.regions[0] if options.regions else region_of([], store)
        aws = aws_context(ctx, aws_endpoint, default_region, profile, endpoint_profile)
        with call_scope() as calls:
            try:
                pool = _identity_pool(store, aws.pool, options.identity)
                report = run_audit(store, pool, options)
                plan = plan_deletion(report, include_foreign=include_foreign) if delete else None
                confirmed = yes or (output == "table" and plan is not None and _announce(report, plan))
                deletion = None
                if plan is not None and confirmed:
                    deletion = delete_leaks(report, store, pool, plan=plan)
            except (AWSError, StoreError) as exc:
                fail(str(exc))
    document: dict[str, Any] = {
        **report.as_json(),
        "summary": report.summary(),
        "leaks": len(report.leaks),
    }
    if plan is not None:
        document["plan"] = plan.as_json()
        document["dryRun"] = deletion is None
    if deletion is not None:
        document["deletion"] = deletion.as_json()
    document["awsCalls"] = calls_summary(calls)
    if output == "json":
        sys.stdout.write(render_json(document) + "\n")
    elif plan is None:
        _print_report(report, show_managed)
    elif deletion is None:
        if not _interactive():
            _print_report(report, show_managed)
            _print_plan(plan)
        _say("Dry run: nothing was deleted (pass --yes to delete).")
    else:
        _print_deletion(deletion)
    raise typer.Exit(_exit_code(report, deletion))


def _identity_pool(store: ObjectStore, pool: ClientPool, identity: str | None) -> ClientPool:
    """The pool reaching the identity's account (the controller's own without one)."""
    if identity is None:
        return pool
    from capa_py.api.aws_identity import AWSIdentityReference
    from controllers.identity import Identities, IdentityError

    kind, _, name = identity.partition("/")
    try:
        return Identities(store, pool).pool_for_identity(
            AWSIdentityReference.model_validate({"kind": kind, "name": name})
        )
    except IdentityError as exc:
        fail(f"--identity {identity}: {exc}", EXIT_INVALID)


def register(app: typer.Typer) -> None:
    app.command()(audit)


def _announce(report: AuditReport, plan: DeletionPlan) -> bool:
    """On a terminal, show what would be deleted and ask; elsewhere, decline (a dry run)."""
    if not _interactive():
        return False
    _print_report(report, show_managed=False)
    _print_plan(plan)
    return _confirmed(plan)


def _exit_code(report: AuditReport, deletion: DeletionReport | None) -> int:
    if deletion is not None:
        if deletion.failed:
            for result in deletion.failed:
                sys.stderr.write(f"error: {result.kind} {result.id}: {result.detail}\n")
            return EXIT_FAILED
        return EXIT_OK if deletion.all_removed else EXIT_LEAKS
    return EXIT_LEAKS if report.leaks else EXIT_OK


__all__ = ["EXIT_LEAKS", "register"]
