"""``capa resources``: every AWS resource recorded for a cluster, with whether its tags are complete."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from capa_app.cli.common import (
    EndpointOption,
    ProfileOption,
    RegionOption,
    TraitsOption,
    aws_context,
    check_output,
    fail,
    globals_of,
    region_of,
    say_no_store,
    stderr,
)
from capa_app.cli.output import format_table, render_json, render_yaml


def resources(
    ctx: typer.Context,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster's resources.")] = None,
    namespace: Annotated[
        str | None, typer.Option("-n", "--namespace", help="Namespace (default: all).")
    ] = None,
    aws_endpoint: EndpointOption = None,
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_profile: TraitsOption = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Show what is recorded without asking AWS.")
    ] = False,
    output: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
) -> None:
    """List every AWS resource recorded for a cluster: kind, id, strategy class, tags complete."""
    check_output(output)
    from capa_app.inventory import verify_tags
    from capa_py.aws.errors import AWSError
    from capa_py.inventory import recorded_resources

    rows = []
    opened = globals_of(ctx).existing_store()
    if opened is None:
        say_no_store(globals_of(ctx).state)  # a listing never creates a store
    else:
        with opened as store:
            rows = recorded_resources(store, cluster=cluster, namespace=namespace)
            if not offline and rows:
                aws = aws_context(
                    ctx, aws_endpoint, region or region_of([], store), profile, endpoint_profile
                )
                try:
                    verify_tags(rows, aws.pool, aws.engine)
                except AWSError as exc:
                    fail(str(exc))
    documents = [row.as_dict() for row in rows]
    if output == "json":
        sys.stdout.write(render_json({"resources": documents}) + "\n")
        return
    if output == "yaml":
        sys.stdout.write(render_yaml({"resources": documents}))
        return
    if not rows:
        stderr.print("No recorded AWS resources.", highlight=False)
        return
    headers = ["CLUSTER", "OWNER", "ROLE", "KIND", "ID", "STRATEGY", "TAGS", "STATE"]
    sys.stdout.write(format_table(headers, [row.as_row() for row in rows]))
