"""Instance refresh of a machine pool (CAPA's ``refreshPreferences``): when the pool moves its Auto Scaling
group to a new launch template version, one ``StartInstanceRefresh`` replaces the instances of the earlier
version; none starts while another runs; ``status.instanceRefresh`` and ``InstanceRefreshInProgress`` follow
it; a pool at steady state makes no refresh call at all.

moto 5.2.5 has no ``StartInstanceRefresh`` or ``DescribeInstanceRefreshes``: the test server runs with
``tests/harness/moto_autoscaling.py``, which adds a small backend for them whose refreshes stay ``Pending``
until the test moves them on (:func:`~tests.harness.moto_autoscaling.set_refresh_status`). The AWSMachinePool
controller is reconciled directly, one pass at a time, so that each pass's calls can be counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capa_py.api.conditions import get_condition
from capa_py.api.loader import ManifestError, load_manifests
from capa_py.api.machinepool import AWSMachinePool, RefreshPreferences
from capa_py.aws.accounting import call_scope
from capa_py.ctrlkit.result import Result
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import retry_on_conflict
from controllers.awsmachinepool import AWSMachinePoolController
from controllers.base import patch_status
from controllers.services import machinepool
from tests.controllers.conftest import Harness
from tests.harness.moto_autoscaling import set_refresh_status

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machinepool.yaml"
NS = "default"
GROUP = "default-pool-workers"
KEY = ObjectKey("AWSMachinePool", NS, "pool-workers")
START = "autoscaling:StartInstanceRefresh"
DESCRIBE = "autoscaling:DescribeInstanceRefreshes"


def _up(h: Harness, prefs: RefreshPreferences | None = None) -> AWSMachinePoolController:
    objects = load_manifests([EXAMPLE])
    for obj in objects:
        if isinstance(obj, AWSMachinePool):
            obj.spec.refresh_preferences = prefs
    stored = h.apply(objects)
    up = h.converge([o for o in stored if o.KIND != "Secret"], timeout=120)
    assert up.converged, up.states
    return next(c for c in h.controllers() if isinstance(c, AWSMachinePoolController))


def _pool(h: Harness) -> AWSMachinePool:
    return h.store.get(AWSMachinePool, "pool-workers", NS)


def _change_type(h: Harness, instance_type: str) -> None:
    def change(p: AWSMachinePool) -> None:
        p.spec.aws_launch_template.instance_type = instance_type

    retry_on_conflict(h.store, _pool(h), change)


def _refreshes(h: Harness) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = h.aws.autoscaling.call(
        "DescribeInstanceRefreshes", AutoScalingGroupName=GROUP
    )["InstanceRefreshes"]
    return found


def _pass(controller: AWSMachinePoolController) -> tuple[Result, dict[str, int]]:
    with call_scope() as calls:
        result = controller.reconcile(KEY)
    return result, calls.by_operation()


def _condition(h: Harness) -> tuple[bool, str | None]:
    condition = get_condition(_pool(h).status, machinepool.INSTANCE_REFRESH)
    assert condition is not None
    return condition.status == "True", condition.reason


def test_a_new_version_starts_one_refresh_which_the_pool_follows_to_its_end(harness: Harness) -> None:
    h = harness
    controller = _up(h, RefreshPreferences(instance_warmup=60, min_healthy_percentage=50))
    record = _pool(h).status.instance_refresh
    assert record is not None
    assert (record.launch_template_version, record.instance_refresh_id) == ("1", None), "launched from 1"

    _, calls = _pass(controller)
    assert (calls.get(START, 0), calls.get(DESCRIBE, 0)) == (0, 0), "steady state: no refresh call"

    _change_type(h, "t3.large")
    result, calls = _pass(controller)
    assert calls.get(START) == 1
    assert calls.get(DESCRIBE) == 1, "one look first: is a refresh for this version already there?"
    assert result.requeue_after == machinepool.REFRESH_POLL, "a running refresh is looked at again"
    (refresh,) = _refreshes(h)
    assert refresh["Status"] == "Pending"
    assert refresh["Strategy"] == "Rolling"
    assert refresh["DesiredConfiguration"]["LaunchTemplate"]["Version"] == "2"
    assert refresh["Preferences"] == {"InstanceWarmup": 60, "MinHealthyPercentage": 50}
    record = _pool(h).status.instance_refresh
    assert record is not None
    assert (record.launch_template_version, record.instance_refresh_id, record.status) == (
        "2",
        refresh["InstanceRefreshId"],
        "Pending",
    )
    assert _condition(h) == (True, "InstanceRefreshPending")

    set_refresh_status(h.server.url, "us-east-1", GROUP, refresh["InstanceRefreshId"], "InProgress")
    _, calls = _pass(controller)
    assert (calls.get(START, 0), calls.get(DESCRIBE)) == (0, 1), "followed with one describe a pass"
    assert _condition(h) == (True, "InstanceRefreshInProgress")

    set_refresh_status(h.server.url, "us-east-1", GROUP, refresh["InstanceRefreshId"], "Successful")
    result, calls = _pass(controller)
    assert calls.get(DESCRIBE) == 1
    assert not result.interrupts, "an ended refresh is not looked at again"
    assert _condition(h) == (False, "InstanceRefreshSuccessful")
    assert _pool(h).status.ready

    _, calls = _pass(controller)
    assert (calls.get(START, 0), calls.get(DESCRIBE, 0)) == (0, 0), "steady state again: no refresh call"
    assert len(_refreshes(h)) == 1


def test_no_refresh_starts_while_another_runs_on_the_group(harness: Harness) -> None:
    h = harness
    controller = _up(h)
    running = h.aws.autoscaling.call("StartInstanceRefresh", AutoScalingGroupName=GROUP)["InstanceRefreshId"]

    _change_type(h, "t3.large")
    result, calls = _pass(controller)
    assert calls.get(START, 0) == 0, "AWS would refuse it (InstanceRefreshInProgress): not even asked"
    assert result.requeue_after == machinepool.REFRESH_POLL
    assert _condition(h) == (True, "WaitingForInstanceRefresh")
    record = _pool(h).status.instance_refresh
    assert record is not None
    assert record.launch_template_version == "1", "version 2 is not refreshed to yet"

    set_refresh_status(h.server.url, "us-east-1", GROUP, running, "Successful")
    _pass(controller)
    newest = _refreshes(h)[0]
    assert newest["InstanceRefreshId"] != running
    assert newest["DesiredConfiguration"]["LaunchTemplate"]["Version"] == "2"
    assert _condition(h) == (True, "InstanceRefreshPending")


def test_a_refresh_started_but_not_recorded_is_found_not_started_twice(harness: Harness) -> None:
    h = harness
    controller = _up(h)
    before = _pool(h).status.instance_refresh
    _change_type(h, "t3.large")
    _pass(controller)
    (refresh,) = _refreshes(h)
    set_refresh_status(h.server.url, "us-east-1", GROUP, refresh["InstanceRefreshId"], "Successful")

    def lose_record(p: AWSMachinePool) -> None:  # as if the status write after the start was lost
        p.status.instance_refresh = before

    patch_status(h.store, _pool(h), lose_record)

    _, calls = _pass(controller)
    assert calls.get(START, 0) == 0, "the refresh for version 2 exists: adopted, not started again"
    record = _pool(h).status.instance_refresh
    assert record is not None
    assert (record.launch_template_version, record.instance_refresh_id) == ("2", refresh["InstanceRefreshId"])
    assert _condition(h) == (False, "InstanceRefreshSuccessful")


def test_refreshes_disabled_move_the_group_and_replace_nothing(harness: Harness) -> None:
    h = harness
    controller = _up(h, RefreshPreferences(disable=True))
    _change_type(h, "t3.large")
    _, calls = _pass(controller)
    assert (calls.get(START, 0), calls.get(DESCRIBE, 0)) == (0, 0)
    assert calls.get("autoscaling:UpdateAutoScalingGroup") == 1, "the group moves to version 2"
    assert _refreshes(h) == []
    record = _pool(h).status.instance_refresh
    assert record is not None
    assert (record.launch_template_version, record.instance_refresh_id) == ("2", None)
    assert _condition(h) == (False, "InstanceRefreshDisabled")


def test_refresh_preferences_outside_what_aws_takes_are_refused_naming_the_field(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace(
        "  minSize: 1\n",
        "  minSize: 1\n  refreshPreferences:\n    strategy: Surge\n    minHealthyPercentage: 101\n",
    )
    path = tmp_path / "pool.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as refused:
        load_manifests([path])
    assert "spec.refreshPreferences.strategy" in str(refused.value)
    assert "spec.refreshPreferences.minHealthyPercentage" in str(refused.value)
