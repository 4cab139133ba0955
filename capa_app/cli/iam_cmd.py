"""``capa iam``: the least-privilege policies, and the roles, instance profiles and policies machines use.

``policy --for controller|operator|control-plane|nodes`` prints a policy document (``sts:AssumeRole`` on the
roles of the store's role identities and ``--assume-role``'s, on ``*`` with a warning when none is known;
:mod:`capa_app.iam.policy`); ``bootstrap`` makes Cluster API Provider AWS's roles, instance profiles and
managed policies by name, tagged with this store (``--dry-run`` prints the plan); ``delete`` removes what
this store made. Exit codes: 0 done; 1 AWS failed; 2 invalid input, or a same-named resource this store did
not make (never adopted).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capa_app.cli.common import (
    EXIT_INVALID,
    EndpointOption,
    ProfileOption,
    RegionOption,
    aws_context,
    calls_summary,
    fail,
    globals_of,
    stderr,
)
from capa_app.cli.output import render_json

if TYPE_CHECKING:
    from capa_app.iam.bootstrap import Step

app = typer.Typer(
    name="iam",
    help="IAM: print the least-privilege policies; make or delete the roles, instance profiles and policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_KINDS = ("controller", "operator", "control-plane", "nodes")
OutputOpt = Annotated[str, typer.Option("-o", "--output", help="text or json.")]


@app.command("policy")
def policy(
    ctx: typer.Context,
    kind: Annotated[
        str, typer.Option("--for", help="controller, operator, control-plane or nodes.")
    ] = "controller",
    assume_role: Annotated[
        list[str] | None,
        typer.Option(
            "--assume-role",
            metavar="ARN",
            help="A role the controller assumes with its own credentials (repeatable): sts:AssumeRole is "
            "granted on these and on the store's role identities' roles.",
        ),
    ] = None,
) -> None:
    """Print the least-privilege IAM policy document (JSON) for the controller, the operator running capa,
    the control-plane machines or the nodes. The controller's and operator's sts:AssumeRole is granted on
    the roles of the store's role identities (those assumed with the controller's own credentials) and
    --assume-role's; on every role, with a warning, when none is known."""
    if kind not in _KINDS:
        raise typer.BadParameter(f"must be one of {', '.join(_KINDS)}", param_hint="--for")
    given = list(assume_role or [])
    if given and kind not in ("controller", "operator"):
        raise typer.BadParameter(
            "only the controller's and operator's policies assume roles", param_hint="--assume-role"
        )
    import re

    from capa_py.api.aws_identity import ROLE_ARN_PATTERN

    for arn in given:
        if not re.match(ROLE_ARN_PATTERN, arn):
            raise typer.BadParameter(
                f"{arn!r} is not an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>)",
                param_hint="--assume-role",
            )
    from capa_app.iam.policy import policy_document

    roles: tuple[str, ...] | None = None
    if kind in ("controller", "operator"):
        roles = _known_roles(ctx, given)
    sys.stdout.write(render_json(policy_document(kind, roles)) + "\n")  # type: ignore[arg-type]


def _known_roles(ctx: typer.Context, given: list[str]) -> tuple[str, ...] | None:
    """The roles the controller assumes with its own credentials: the store's role identities' (without a
    source, or sourced from the controller's identity) and ``given``; ``None`` (with a warning) when the
    store holds no role identity and none is given."""
    from capa_app.iam.policy import assumed_roles
    from capa_py.api.aws_identity import AWSClusterRoleIdentity
    from capa_py.store.errors import StoreError

    identities: list[AWSClusterRoleIdentity] = []
    opened = globals_of(ctx).existing_store()
    if opened is not None:
        with opened as store:
            try:
                identities = list(store.list(AWSClusterRoleIdentity))
            except StoreError as exc:
                fail(f"reading the role identities: {exc}")
    if not identities and not given:
        stderr.print(
            "warning: no role identity is known (none in the store, no --assume-role): sts:AssumeRole is "
            'granted on every role ("*")',
            markup=False,
            highlight=False,
        )
        return None
    roles = tuple(sorted({*assumed_roles(identities), *given}))
    if not roles:
        stderr.print(
            "note: every role identity in the store is assumed from another identity's credentials, none "
            "with the controller's own: sts:AssumeRole is not granted",
            markup=False,
            highlight=False,
        )
    return roles


def _check_output(output: str) -> None:
    if output not in ("text", "json"):
        raise typer.BadParameter("must be text or json", param_hint="-o/--output")


def _report(steps: list[Step], done: bool, skipped: list[str], calls: Any, output: str) -> None:
    if output == "json":
        document = {
            "changes": [{"operation": s.operation, "target": s.target, "detail": s.detail} for s in steps],
            "dryRun": not done,
            "skipped": skipped,
            "awsCalls": calls_summary(calls),
        }
        sys.stdout.write(render_json(document) + "\n")
        return
    for note in skipped:
        sys.stdout.write(f"left alone: {note}\n")
    if not steps:
        sys.stdout.write("Nothing to change.\n")
        return
    sys.stdout.write(("Changed" if done else "Plan (dry run: nothing changed)") + ":\n")
    for step in steps:
        sys.stdout.write(f"  {step.describe()}\n")


@app.command("bootstrap")
def bootstrap(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
    aws_endpoint: EndpointOption = None,
    region: RegionOption = None,
    profile: ProfileOption = None,
    output: OutputOpt = "text",
) -> None:
    """Make the controllers', control plane's and nodes' roles, instance profiles and managed policies
    (Cluster API Provider AWS's names), or bring them up to date; refuses to adopt another's."""
    _check_output(output)
    from capa_app.iam.bootstrap import ForeignIAMResource, apply_steps, observe, plan_bootstrap
    from capa_py.aws.accounting import call_scope
    from capa_py.aws.errors import AWSError

    opened = globals_of(ctx).existing_store() if dry_run else globals_of(ctx).store()
    store_uid = ""
    if opened is not None:
        with opened as store:
            store_uid = store.uid
    aws = aws_context(ctx, aws_endpoint, region, profile, None).pool.for_region()
    with call_scope() as calls:
        try:
            steps = plan_bootstrap(aws, observe(aws), store_uid)
            if not dry_run:
                apply_steps(aws, steps)
        except ForeignIAMResource as exc:
            fail(str(exc), EXIT_INVALID)
        except AWSError as exc:
            fail(str(exc))
    _report(steps, not dry_run, [], calls, output)


@app.command("delete")
def delete(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
    aws_endpoint: EndpointOption = None,
    region: RegionOption = None,
    profile: ProfileOption = None,
    output: OutputOpt = "text",
) -> None:
    """Delete the roles, instance profiles and policies this store's ``capa iam bootstrap`` made (what
    another store made, or nobody tagged, is left alone)."""
    _check_output(output)
    from capa_app.iam.bootstrap import apply_steps, observe, plan_delete
    from capa_py.aws.accounting import call_scope
    from capa_py.aws.errors import AWSError

    opened = globals_of(ctx).existing_store()
    if opened is None:
        fail(f"no store at {globals_of(ctx).state}: nothing this store made can exist", EXIT_INVALID)
    with opened as store:
        store_uid = store.uid
    aws = aws_context(ctx, aws_endpoint, region, profile, None).pool.for_region()
    with call_scope() as calls:
        try:
            steps, skipped = plan_delete(aws, observe(aws), store_uid)
            if not dry_run:
                apply_steps(aws, steps)
        except AWSError as exc:
            fail(str(exc))
    _report(steps, not dry_run, skipped, calls, output)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="iam", help=app.info.help)
