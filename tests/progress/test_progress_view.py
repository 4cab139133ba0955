"""The live progress view of ``capa apply``: one row per object with its state and conditions."""

from __future__ import annotations

import io

from rich.console import Console

from capa_app.cli.progress import ProgressView, render
from capa_py.api.aws import AWSCluster, AWSClusterSpec
from capa_py.api.conditions import set_condition
from capa_py.api.meta import ObjectMeta


def _cluster(ready: bool) -> AWSCluster:
    obj = AWSCluster(
        metadata=ObjectMeta(name="demo", namespace="default"), spec=AWSClusterSpec(region="us-east-1")
    )
    set_condition(obj.status, "VpcReady", True)
    set_condition(obj.status, "NatGatewaysReady", False, "Waiting", "NAT gateways are pending", "Info")
    set_condition(
        obj.status,
        "Ready",
        ready,
        None if ready else "Waiting",
        None if ready else "NAT gateways are pending",
    )
    obj.status.ready = ready
    return obj


def test_rows_show_state_conditions_and_what_the_object_waits_on() -> None:
    target = _cluster(False)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(render([target], [target], ["pending"]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "awscluster/demo" in text
    assert "pending" in text
    assert "VpcReady ✓" in text
    assert "NatGatewaysReady ✗" in text
    assert "Waiting: NAT gateways are pending" in text


def test_the_view_stays_silent_when_not_on_a_terminal() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False)
    with ProgressView(console, [_cluster(True)], enabled=True) as view:
        view.update([_cluster(True)])
    assert buffer.getvalue() == ""


def test_the_view_redraws_when_an_object_changes_and_only_then() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    pending, ready = _cluster(False), _cluster(True)
    with ProgressView(console, [pending], enabled=True) as view:
        drawn: list[object] = []
        assert view._live is not None
        original = view._live.update

        def update(renderable: object, **kwargs: object) -> None:
            drawn.append(renderable)
            original(renderable, **kwargs)  # type: ignore[arg-type]

        view._live.update = update  # type: ignore[method-assign]
        view.update([pending])
        view.update([pending])
        assert len(drawn) == 1, "the same object was drawn again"
        view.update([ready])
        assert len(drawn) == 2, "a changed object was not drawn"
    assert "ready" in buffer.getvalue()
