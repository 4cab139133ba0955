"""``capa apply`` and ``capa get`` with infrastructure templates: a template applied, listed by short name
and read back as written; a re-apply changing its spec exits 2 naming the field and stores nothing; one
relabelling the template object is configured."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.api.test_api_templates import machine_template
from tests.cli.cli_support import Cli


def _write(path: Path, document: dict[str, object]) -> str:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return str(path)


def test_a_template_round_trips_and_its_spec_cannot_be_reapplied_changed(cli: Cli, tmp_path: Path) -> None:
    document = machine_template()
    created = cli("apply", "-f", _write(tmp_path / "t.yaml", document), "--no-wait")
    assert created.exit_code == 0, created
    assert "awsmachinetemplate/workers created" in created.stdout

    listed = cli("get", "awsmt")
    assert listed.exit_code == 0, listed
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["NAME", "workers"]
    assert listed.stdout.splitlines()[0].split() == ["NAME", "AGE"]

    read = cli("get", "awsmachinetemplates", "workers", "-o", "yaml")
    assert read.exit_code == 0, read
    assert yaml.safe_load(read.stdout)["spec"] == document["spec"]

    document["spec"]["template"]["spec"]["instanceType"] = "t3.large"
    refused = cli("apply", "-f", _write(tmp_path / "t.yaml", document), "--no-wait")
    assert refused.exit_code == 2, refused
    assert (
        "AWSMachineTemplate default/workers: spec.template.spec.instanceType: immutable: "
        "AWSMachineTemplate.spec cannot change after create (was t3.medium, now t3.large)"
    ) in refused.stderr, refused
    again = cli("get", "awsmachinetemplates", "workers", "-o", "yaml")
    assert yaml.safe_load(again.stdout)["spec"]["template"]["spec"]["instanceType"] == "t3.medium"

    relabelled = machine_template()
    relabelled["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "demo"}
    configured = cli("apply", "-f", _write(tmp_path / "t.yaml", relabelled), "--no-wait")
    assert configured.exit_code == 0, configured
    assert "awsmachinetemplate/workers configured" in configured.stdout
