"""The Tinkerbell CRDs: not Cluster API's (their own labels and category), kubectl's columns the same as
``capa get``'s, schemas that refuse what they can of what the models refuse, RBAC and webhook registration."""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.api.columns import COLUMNS, WIDE_COLUMNS
from capa_py.api.tinkerbell import TINKERBELL_KINDS, Workflow
from capa_py.manifests import documents
from capa_py.manifests.crds import TINKERBELL_LABELS, crd_for, crds, is_tinkerbell_kind
from capa_py.manifests.rbac import cluster_role
from capa_py.manifests.schema import ADMISSION_ONLY
from capa_py.manifests.webhooks import validating_webhook_configuration
from capa_py.webhooks import validate_path
from tests.api.tinkerbell_objects import DELETE, HARDWARE, MAC, OSIE, TEMPLATE, WORKFLOW, changed
from tests.manifests.test_crds import model_rejects, schema_errors

DHCP = ("spec", "networkInterfaces", MAC, "dhcp")


def _served(model: Any) -> dict[str, Any]:
    return crd_for(model)["spec"]["versions"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("model", TINKERBELL_KINDS, ids=lambda m: m.KIND)
def test_tinkerbell_crds_carry_no_cluster_api_label_or_category(model: Any) -> None:
    crd = crd_for(model)
    assert is_tinkerbell_kind(model)
    assert crd["metadata"]["name"] == f"{model.PLURAL}.tinkerbell.org"
    assert crd["metadata"]["labels"] == TINKERBELL_LABELS
    assert not any(key.startswith("cluster.x-k8s.io/") for key in crd["metadata"]["labels"])
    names = crd["spec"]["names"]
    assert names["categories"] == ["tinkerbell"]
    assert names.get("shortNames", []) == list(model.SHORT_NAMES)
    assert crd["spec"]["versions"][0]["name"] == "v1alpha2"
    assert ("subresources" in _served(model)) is (model is Workflow)


def test_short_names_are_tinkerbells() -> None:
    short = {m.KIND: crd_for(m)["spec"]["names"].get("shortNames") for m in TINKERBELL_KINDS}
    assert short == {"Hardware": ["hw"], "OSIE": None, "Template": ["tpl"], "Workflow": ["wf"]}


EXPECTED_COLUMNS = {
    "Hardware": [("OSIE", ".spec.osie.osieRef.name", 0), ("BMC", ".spec.bmcRef.name", 0)],
    "OSIE": [("Kernel", ".spec.kernelUrl", 0), ("Initrd", ".spec.initrdUrl", 1)],
    "Template": [],
    "Workflow": [
        ("State", ".status.state", 0),
        ("Current Action", ".status.currentAction", 0),
        ("Reason", ".status.reason", 0),
        ("Hardware", ".spec.hardwareRef.name", 0),
        ("Template", ".spec.templateRef.name", 0),
    ],
}


@pytest.mark.parametrize("model", TINKERBELL_KINDS, ids=lambda m: m.KIND)
def test_printer_columns_are_the_same_in_the_crd_and_in_capa_get(model: Any) -> None:
    columns = _served(model)["additionalPrinterColumns"]
    *fields, age = columns
    assert age == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    assert [(c["name"], c["jsonPath"], c.get("priority", 0)) for c in fields] == EXPECTED_COLUMNS[model.KIND]
    assert [header for header, _ in COLUMNS.get(model.KIND, [])] == [c["name"].upper() for c in fields]
    assert WIDE_COLUMNS.get(model.KIND, frozenset()) == {
        c["name"].upper() for c in fields if c.get("priority")
    }


def test_capa_gets_columns_read_the_fields_the_crd_columns_name() -> None:
    doc = changed(WORKFLOW, ("status",), {"state": "Failed", "currentAction": "reboot", "reason": "Timeout"})
    cells = [render(doc) for _, render in COLUMNS["Workflow"]]
    assert cells == ["Failed", "reboot", "Timeout", "node-1", "ubuntu"]
    assert [render(OSIE) for _, render in COLUMNS["OSIE"]] == [
        OSIE["spec"]["kernelUrl"],
        OSIE["spec"]["initrdUrl"],
    ]
    assert [render(HARDWARE) for _, render in COLUMNS["Hardware"]] == ["hook", "node-1-bmc"]


@pytest.mark.parametrize("doc", [HARDWARE, OSIE, TEMPLATE, WORKFLOW], ids=lambda d: d["kind"])
def test_valid_objects_pass_the_schemas(doc: dict[str, Any]) -> None:
    assert schema_errors(doc) == []
    assert not model_rejects(doc)


SCHEMA_REJECTS = [
    ("no network interface", changed(HARDWARE, ("spec", "networkInterfaces"), {})),
    ("dhcp ip not IPv4", changed(HARDWARE, (*DHCP, "ip"), "10.0.0.300")),
    ("dhcp ip missing", changed(HARDWARE, (*DHCP, "ip"), DELETE)),
    ("vlanId above 4094", changed(HARDWARE, (*DHCP, "vlanId"), 4095)),
    ("negative lease time", changed(HARDWARE, (*DHCP, "leaseTime"), -1)),
    ("device outside /dev", changed(HARDWARE, ("spec", "storageDevices"), ["sda"])),
    ("unknown hardware field", changed(HARDWARE, ("spec", "interfaces"), {})),
    ("kernel over ftp", changed(OSIE, ("spec", "kernelUrl"), "ftp://x/vmlinuz")),
    ("initrd relative", changed(OSIE, ("spec", "initrdUrl"), "initrd.img")),
    ("no action", changed(TEMPLATE, ("spec", "actions"), [])),
    ("negative action timeout", changed(TEMPLATE, ("spec", "actions", 0, "timeout"), -1)),
    ("action without image", changed(TEMPLATE, ("spec", "actions", 0, "image"), DELETE)),
    ("negative workflow timeout", changed(WORKFLOW, ("spec", "timeout"), -1)),
    ("workflow without templateRef", changed(WORKFLOW, ("spec", "templateRef"), DELETE)),
    ("workflow state not in the enum", changed(WORKFLOW, ("status",), {"state": "Exploded"})),
]


@pytest.mark.parametrize(("case", "doc"), SCHEMA_REJECTS, ids=[c for c, _ in SCHEMA_REJECTS])
def test_what_the_models_refuse_the_schemas_refuse(case: str, doc: dict[str, Any]) -> None:
    assert model_rejects(doc), f"{case}: the models accept it, so the case tests nothing"
    assert schema_errors(doc) != [], f"{case}: the CRD schema accepts what the models refuse"


ADMISSION_REJECTS = [
    (
        "MAC key not a MAC",
        "Hardware spec.networkInterfaces keys",
        changed(HARDWARE, ("spec", "networkInterfaces"), {"eth0": {"disableDhcp": True}}),
    ),
    (
        "netmask not contiguous",
        "Hardware spec.networkInterfaces[].dhcp",
        changed(HARDWARE, (*DHCP, "netmask"), "255.0.255.0"),
    ),
    (
        "gateway outside",
        "Hardware spec.networkInterfaces[].dhcp",
        changed(HARDWARE, (*DHCP, "gateway"), "10.9.9.9"),
    ),
    (
        "ipxe with both",
        "Hardware spec.ipxe",
        changed(HARDWARE, ("spec", "ipxe"), {"inline": "x", "url": "http://x"}),
    ),
    (
        "osieRef name uppercase",
        "Hardware spec.osie.osieRef, spec.bmcRef",
        changed(HARDWARE, ("spec", "osie", "osieRef", "name"), "Hook"),
    ),
    (
        "device twice",
        "Hardware spec.storageDevices",
        changed(HARDWARE, ("spec", "storageDevices"), ["/dev/sda", "/dev/sda"]),
    ),
    (
        "kernel URL without host",
        "OSIE spec.kernelUrl, spec.initrdUrl",
        changed(OSIE, ("spec", "kernelUrl"), "http://a b/"),
    ),
    (
        "duplicate action names",
        "Template spec.actions",
        changed(TEMPLATE, ("spec", "actions", 1, "name"), "stream-image"),
    ),
    (
        "volume option unknown",
        "Template spec.env, spec.volumes",
        changed(TEMPLATE, ("spec", "volumes"), ["/a:/b:x"]),
    ),
    (
        "hardwareRef uppercase",
        "Workflow spec.hardwareRef, spec.templateRef",
        changed(WORKFLOW, ("spec", "hardwareRef", "name"), "Node"),
    ),
]


@pytest.mark.parametrize(
    ("case", "subject", "doc"), ADMISSION_REJECTS, ids=[c for c, _, _ in ADMISSION_REJECTS]
)
def test_rules_only_admission_checks_are_refused_by_the_models_and_listed(
    case: str, subject: str, doc: dict[str, Any]
) -> None:
    assert model_rejects(doc), f"{case}: the models accept it"
    assert schema_errors(doc) == [], f"{case}: the schema now refuses it; move it to SCHEMA_REJECTS"
    assert subject in dict(ADMISSION_ONLY), f"{case}: not listed in ADMISSION_ONLY"


def test_the_controller_may_read_what_workflows_need_and_update_workflows() -> None:
    granted = {
        (resource, verb)
        for rule in cluster_role()["rules"]
        if rule["apiGroups"] == ["tinkerbell.org"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    read = {"get", "list", "watch"}
    expected = {(r, v) for r in ("hardware", "templates", "osies") for v in read}
    expected |= {("workflows", v) for v in (*read, "update")}
    # The TinkerbellMachine controller claims and releases Hardware and makes and deletes its machine's
    # Template and Workflow.
    expected |= {("hardware", "update"), ("templates", "create"), ("templates", "delete")}
    expected |= {("workflows", "create"), ("workflows", "delete")}
    expected |= {("workflows/status", "update"), ("workflows/finalizers", "update")}
    assert granted == expected


def test_the_webhook_configuration_validates_the_tinkerbell_kinds() -> None:
    webhooks = {w["name"]: w for w in validating_webhook_configuration()["webhooks"]}
    for model in TINKERBELL_KINDS:
        webhook = webhooks[f"validation.{model.KIND.lower()}.tinkerbell.org"]
        assert webhook["rules"] == [
            {
                "apiGroups": ["tinkerbell.org"],
                "apiVersions": ["v1alpha2"],
                "operations": ["CREATE", "UPDATE"],
                "resources": [model.PLURAL],
                "scope": "*",
            }
        ]
        assert webhook["clientConfig"]["service"]["path"] == validate_path(model)
    assert validate_path(Workflow) == "/validate-tinkerbell-org-v1alpha2-workflow"


def test_all_lists_the_tinkerbell_crds_before_the_webhooks_that_judge_them() -> None:
    kinds = [(d["kind"], d["metadata"]["name"]) for d in documents("all")]
    crd_names = [name for kind, name in kinds if kind == "CustomResourceDefinition"]
    assert [n for n in crd_names if n.endswith(".tinkerbell.org")] == [
        "hardware.tinkerbell.org",
        "osies.tinkerbell.org",
        "templates.tinkerbell.org",
        "workflows.tinkerbell.org",
    ]
    assert len(crds()) == len(crd_names)
    positions = {kind: i for i, (kind, _) in enumerate(kinds)}
    assert positions["ValidatingWebhookConfiguration"] > max(
        i for i, (kind, _) in enumerate(kinds) if kind == "CustomResourceDefinition"
    )
