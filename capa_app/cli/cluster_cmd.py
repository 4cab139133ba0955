"""``capa cluster create|upgrade|delete -f cluster.yaml (--management | --kubeconfig MGMT)``: the cluster
lifecycle workflows from the command line, with their task progress, a plan (``--plan``) and JSON output.

The cluster file is loaded and checked, the provider and the clusters resolved, and (for an upgrade) the
change checked, all before the workflow is built: invalid input exits 2 with nothing run. A failed
workflow exits 1 naming the task and the diagnostics bundle; running the same command again resumes after
the last completed task (``--no-resume`` starts over).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from capa_app.cli.common import EXIT_INVALID, fail
from capa_py.defaults import DEFAULT_IMAGE

if TYPE_CHECKING:
    from capa_app.cli.cluster_run import Operation

cluster_app = typer.Typer(
    help="Create, upgrade and delete management and workload clusters with the lifecycle workflows.",
    no_args_is_help=True,
)


FileOption = Annotated[
    Path, typer.Option("-f", "--filename", help="The cluster file (ClusterConfig + objects).")
]
ManagementOption = Annotated[
    bool,
    typer.Option("--management", help="A management cluster: made from a bootstrap cluster, then pivoted."),
]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="A workload cluster, managed by the management cluster this names."),
]
TimeoutOption = Annotated[str, typer.Option("--timeout", help="How long one task may wait for controllers.")]
EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--aws-endpoint", help="local or a URL: the AWS endpoint of the bootstrap cluster's controllers."
    ),
]
ProfileOption = Annotated[str | None, typer.Option("--profile", help="AWS profile (no endpoint given).")]
PlanOption = Annotated[
    bool, typer.Option("--plan", help="Print the workflow's tasks and hooks; run nothing.")
]
FormatOption = Annotated[str, typer.Option("--format", help="The plan as list, mermaid or dot.")]
OutputOption = Annotated[str, typer.Option("-o", "--output", help="table (progress) or json.")]
ResumeOption = Annotated[
    bool, typer.Option("--resume/--no-resume", help="Resume after the last completed task (default).")
]
ImageOption = Annotated[str, typer.Option("--image", help="The controller image the components deploy.")]


def _command(operation: Operation) -> Callable[..., None]:
    def command(
        ctx: typer.Context,
        filename: FileOption,
        is_management: ManagementOption = False,
        kubeconfig: KubeconfigOption = None,
        timeout: TimeoutOption = "30m",
        aws_endpoint: EndpointOption = None,
        profile: ProfileOption = None,
        plan: PlanOption = False,
        fmt: FormatOption = "list",
        output: OutputOption = "table",
        resume: ResumeOption = True,
        image: ImageOption = DEFAULT_IMAGE,
    ) -> None:
        if output not in ("table", "json"):
            fail("-o/--output must be table or json", EXIT_INVALID)
        if fmt not in ("list", "mermaid", "dot"):
            fail("--format must be list, mermaid or dot", EXIT_INVALID)
        from capa_app.cli.cluster_run import build, execute, show_plan

        run = build(
            ctx, operation, filename, is_management, kubeconfig, timeout, aws_endpoint, profile, image, plan
        )
        if plan:
            show_plan(run, fmt)
            return
        execute(run, resume, output)

    command.__doc__ = {
        "create": "Create a cluster: a management cluster (--management) from a bootstrap cluster, or a "
        "workload cluster on the management cluster --kubeconfig names.",
        "upgrade": "Upgrade a cluster to its file: components, networking, then its machines rolled one at "
        "a time.",
        "delete": "Delete a cluster and de-provision its infrastructure.",
    }[operation]
    return command


for _operation in ("create", "upgrade", "delete"):
    cluster_app.command(name=_operation)(_command(_operation))


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
