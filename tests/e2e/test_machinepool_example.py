"""The machine pool example through the real CLI: ``capa apply`` of examples/aws-cluster-machinepool.yaml on
the test's moto server, ``capa resources`` listing the pool's template and group, a scale by applying the
MachinePool with more replicas, ``capa delete --wait``, and ``capa audit`` finding nothing left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.e2e.e2e_support import Capa

pytestmark = pytest.mark.slow(minutes=2)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machinepool.yaml"
GROUP = "default-pool-workers"


def _autoscaling(endpoint: str) -> Any:
    return boto3.client(
        "autoscaling",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _groups(endpoint: str) -> dict[str, dict[str, Any]]:
    groups = _autoscaling(endpoint).describe_auto_scaling_groups()["AutoScalingGroups"]
    return {g["AutoScalingGroupName"]: g for g in groups}


def test_the_machine_pool_example_applies_scales_deletes_and_audits_clean(
    capa: Capa, endpoint: str, tmp_path: Path
) -> None:
    applied = capa.ok("apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json").json()
    assert applied["converged"] is True, applied
    group = _groups(endpoint)[GROUP]
    assert (group["DesiredCapacity"], len(group["Instances"])) == (2, 2)
    [pool] = capa.get("machinepools")
    assert (pool["status"]["phase"], pool["status"]["replicas"]) == ("Running", 2)
    assert len(pool["spec"]["providerIDList"]) == 2

    rows = capa.ok("resources", "-o", "json").json()["resources"]
    kinds = {row["kind"]: row for row in rows if row["owner"] == "awsmachinepool/pool-workers"}
    assert set(kinds) == {"launch-template", "autoscaling-group"}
    assert all(row["state"] not in ("missing", "recorded") for row in kinds.values()), kinds
    assert all(row["tagsComplete"] is True for row in kinds.values()), kinds

    scaled = tmp_path / "scaled.yaml"
    scaled.write_text(EXAMPLE.read_text().replace("  replicas: 2\n", "  replicas: 3\n"))
    assert "replicas: 3" in scaled.read_text()
    again = capa.ok("apply", "-f", str(scaled), "--timeout", "2m", "-o", "json").json()
    assert again["converged"] is True, again
    group = _groups(endpoint)[GROUP]
    assert (group["DesiredCapacity"], len(group["Instances"])) == (3, 3)

    deleted = capa.run("delete", "-f", str(scaled), "--wait", "--timeout", "2m")
    assert deleted.returncode == 0, f"delete --wait failed:\n{deleted}"
    assert GROUP not in _groups(endpoint)

    audit = capa.ok("audit", "-o", "json", "--aws-endpoint", endpoint).json()
    leaks = [r for r in audit["rows"] if r["classification"] != "managed"]
    assert leaks == [], leaks
