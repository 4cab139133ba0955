"""capa-py in a real management cluster, as a user runs it there with the controller on a workstation.

One control plane of its own (etcd, kube-apiserver, kube-controller-manager from ``tests.peers``), with
the ``OwnerReferencesPermissionEnforcement`` admission plugin on (as hardened clusters run it: setting an
owner reference that blocks the owner's deletion then needs ``update`` on the owner's ``finalizers``), and
a moto server as AWS. Nothing runs pods here (there is no kubelet) and cert-manager is not installed, so:

* the components file is ``capa manifests all --webhook-url https://127.0.0.1:PORT --webhook-ca-file
  CA``, applied with ``kubectl apply -f``: the CRDs, the RBAC, the Deployment (stored; its pods would serve
  no webhook) and a ValidatingWebhookConfiguration calling the workstation's controller at that URL,
  trusting that CA — no cert-manager document;
* ``capa controller --leader-elect --webhook-cert-dir DIR`` runs as a local process, authenticated as the
  ServiceAccount the RBAC binds (a TokenRequest token, as ``kubectl create token`` gets one), and serves
  the webhooks with a certificate that CA signed.

The example is applied with kubectl, reconciled to ready and deleted with kubectl; the API server's audit
log then shows every request the controller made, which is compared with the ClusterRole.
"""

from __future__ import annotations

import contextlib
import json
import signal
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.manifests.rbac import (
    IDENTITY_ACCESS,
    MACHINE_POOL_ACCESS,
    MACHINE_SET_ACCESS,
    NAMESPACE,
    OUTSIDE_THE_RECORDING,
    READ_FROM_THE_CACHE,
    SERVICE_ACCOUNT,
    TINKERBELL_ACCESS,
    cluster_role,
)
from capa_py.store.errors import Unavailable
from capa_py.store.kube import KubeStore
from controllers.base import ensure_owner
from tests.e2e.e2e_support import (
    EXAMPLE,
    MotoInspector,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
)
from tests.e2e.test_controller_mode import Background
from tests.peers.cluster import PeerCluster, free_port, running
from tests.peers.fixtures import require_go
from tests.realkube.realkube_support import (
    CONTROLLER_USER,
    Kubectl,
    Request,
    WebhookCertificates,
    audited_requests,
    install,
    kubectl_binary,
    start_controller,
    wait_until,
)

ENFORCE_OWNER_REFERENCES = "--enable-admission-plugins=OwnerReferencesPermissionEnforcement"
LEASE_SECONDS = 6


@dataclass
class Management:
    cluster: PeerCluster
    kubectl: Kubectl
    workdir: Path
    controller: Background
    applied: list[str]
    reapplied: list[str]
    components: Path
    notes: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def management(tmp_path_factory: pytest.TempPathFactory, aws: str) -> Iterator[Management]:
    require_go()
    kubectl_binary()
    workdir = tmp_path_factory.mktemp("management")
    with running(directory=workdir / "cluster", extra_apiserver_args=(ENFORCE_OWNER_REFERENCES,)) as cluster:
        kubectl = Kubectl(cluster.admin_kubeconfig, workdir / "kubectl-home")
        certificates = WebhookCertificates.create(workdir / "webhook-certs")
        webhooks = f"127.0.0.1:{free_port()}"
        components = [
            "all", "--webhook-url", f"https://{webhooks}", "--webhook-ca-file", str(certificates.ca_file),
        ]  # fmt: skip
        applied = install(kubectl, workdir, components)
        reapplied = install(kubectl, workdir, components)
        account = cluster.service_account_kubeconfig(workdir / "sa.kubeconfig", NAMESPACE, SERVICE_ACCOUNT)
        lease = ("--leader-elect", "--leader-elect-lease-duration", f"{LEASE_SECONDS}s")
        controller = start_controller(
            "controller", account, aws, workdir, *lease,
            "--webhook-cert-dir", str(certificates.directory), "--webhook-bind-address", webhooks,
        )  # fmt: skip
        standby: Background | None = None
        try:
            controller.wait_for_line(r"controllers running:", timeout=60)
            # The Deployment's second replica: it waits on the Lease, watching it.
            standby = start_controller("standby", account, aws, workdir, *lease)
            standby.wait_for_line(r"waiting for the store lease", timeout=60)
            yield Management(
                cluster, kubectl, workdir, controller, applied, reapplied, workdir / "manifests-0.yaml"
            )
            assert controller.stop(signal.SIGTERM) == 0, controller.report()
            assert standby.stop(signal.SIGTERM) == 0, standby.report()
        finally:
            controller.stop(signal.SIGKILL, timeout=10)
            if standby is not None:
                standby.stop(signal.SIGKILL, timeout=10)


def test_the_components_file_applies_with_kubectl_without_cert_manager(management: Management) -> None:
    documents = [d for d in yaml.safe_load_all(management.components.read_text()) if d]
    kinds = {d["kind"] for d in documents}
    assert not kinds & {"Issuer", "Certificate"}, "nothing for cert-manager when the webhooks are external"
    assert len(management.applied) == len(documents), management.applied
    assert all(line.endswith(" created") for line in management.applied), management.applied
    assert all(line.endswith(" unchanged") for line in management.reapplied), management.reapplied
    stored = management.kubectl.json("get", "deployment,clusterrole,validatingwebhookconfiguration", "-A")
    by_kind = {item["kind"]: item for item in stored["items"] if "capa" in item["metadata"]["name"]}
    assert by_kind["ClusterRole"]["rules"] == cluster_role()["rules"]
    [container] = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert not [a for a in container["args"] if "webhook" in a], "the pods serve no webhook here"
    webhooks = by_kind["ValidatingWebhookConfiguration"]["webhooks"]
    assert webhooks
    assert all(w["clientConfig"]["url"].startswith("https://127.0.0.1:") for w in webhooks)


def invalid_awscluster(name: str) -> dict[str, Any]:
    """Valid for the CRD's schema; the webhook refuses it: the subnet lies outside the VPC."""
    return {
        "apiVersion": AWSCluster.API_VERSION,
        "kind": "AWSCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "region": "us-east-1",
            "network": {
                "vpc": {"cidrBlock": "10.0.0.0/16"},
                "subnets": [{"availabilityZone": "us-east-1a", "cidrBlock": "10.9.0.0/20"}],
            },
        },
    }


def test_the_api_server_calls_the_webhook_over_tls_and_refuses_an_invalid_awscluster(
    management: Management,
) -> None:
    path = management.workdir / "invalid.yaml"
    path.write_text(yaml.safe_dump(invalid_awscluster("refused")))
    refused = management.kubectl.run("apply", "-f", str(path), check=False)
    assert refused.returncode != 0, refused.stdout
    # kubectl shows a 422's causes; the message is admission's (a CRD schema cannot compare two CIDRs).
    assert "spec.network.subnets[0].cidrBlock" in refused.stderr, refused.stderr
    assert "outside the VPC block 10.0.0.0/16" in refused.stderr, refused.stderr
    with pytest.raises(urllib.error.HTTPError) as denied:
        management.cluster.request(
            "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/default/awsclusters",
            "POST",
            invalid_awscluster("refused"),
        )
    status = json.loads(denied.value.read())
    denied.value.close()
    assert status["code"] == 422, status
    assert status["message"].startswith(
        'admission webhook "validation.awscluster.infrastructure.cluster.x-k8s.io" denied the request'
    ), status
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.network.subnets[0].cidrBlock"]
    gone = management.kubectl.run("get", "awscluster", "refused", check=False)
    assert gone.returncode != 0, "a refused object must not be stored"
    assert "NotFound" in gone.stderr, gone.stderr


@dataclass
class Lifecycle:
    expected: dict[str, int]
    baseline: dict[str, int]
    problems_when_ready: list[str]
    blocking_owners: set[tuple[str, str, str]]
    left_in_aws: dict[str, int]
    left_in_cluster: list[str]
    repeated_event: dict[str, Any]
    requests: list[Request]


STRAY_MACHINE = {
    "apiVersion": AWSMachine.API_VERSION,
    "kind": "AWSMachine",
    "metadata": {
        "name": "demo-stray",
        "namespace": "default",
        "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
    },
    "spec": {"instanceType": "t3.large", "ami": {"id": "ami-785db401"}},
}
"""An AWSMachine of the cluster that no Machine claims: the controller leaves it alone, and the AWSCluster's
delete waits for it (saying so in a DeletionBlocked event every 5 s) until it is deleted by hand."""


@pytest.fixture(scope="module")
def lifecycle(management: Management, inspector: MotoInspector) -> Lifecycle:
    """The example applied with kubectl and reconciled to ready; then deleted the Cluster API way (the
    Cluster alone: the controllers delete its Machines, their AWSMachines, then its AWSCluster), with a
    stray AWSMachine holding up the AWSCluster's delete until its DeletionBlocked event has repeated (a
    repeat is counted on the stored Event), then the rest of the example."""
    kubectl = management.kubectl
    baseline = inspector.inventory().counts("total")
    kubectl.run("apply", "-f", str(EXAMPLE))
    kubectl.run(
        "wait", "--for=condition=Ready", "awscluster/demo", "cluster/demo", "--timeout=180s", timeout=200
    )
    wait_until(
        lambda: all(m.get("status", {}).get("ready") for m in kubectl.json("get", "awsmachines")["items"]),
        "every AWSMachine ready",
    )
    objects = kubectl.json("get", "awsclusters,awsmachines")["items"]
    expected = expected_counts()
    problems = problems_with_cluster(inspector.inventory(), expected, baseline, recorded_ids(objects))
    blocking = {
        (ref["apiVersion"].rpartition("/")[0], PLURALS[ref["kind"]] + "/finalizers", "update")
        for o in kubectl.json("get", "clusters,machines,awsclusters,awsmachines")["items"]
        for ref in o["metadata"].get("ownerReferences", [])
        if ref.get("blockOwnerDeletion")
    }

    stray = management.workdir / "stray.yaml"
    stray.write_text(yaml.safe_dump(STRAY_MACHINE))
    kubectl.run("apply", "-f", str(stray))
    kubectl.run("delete", "cluster", "demo", "--wait=false")

    def repeated() -> dict[str, Any] | None:
        events = kubectl.json("get", "events", "--field-selector", "reason=DeletionBlocked")["items"]
        return next((e for e in events if (e.get("count") or 0) >= 2), None)

    event = wait_until(repeated, "a repeated DeletionBlocked event", timeout=60)
    kubectl.run("delete", "-f", str(stray))
    kubectl.run("wait", "--for=delete", "cluster/demo", "--timeout=180s", timeout=200)
    kubectl.run("delete", "-f", str(EXAMPLE), "--ignore-not-found")
    left = kubectl.json("get", "clusters,machines,awsclusters,awsmachines", "-A")["items"]
    return Lifecycle(
        expected=expected,
        baseline=baseline,
        problems_when_ready=problems,
        blocking_owners=blocking,
        left_in_aws=inspector.inventory().counts("tagged"),
        left_in_cluster=[f"{o['kind']} {o['metadata']['name']}" for o in left],
        repeated_event=event,
        requests=audited_requests(management.cluster, CONTROLLER_USER),
    )


PLURALS = {model.KIND: model.PLURAL for model in (Cluster, Machine, AWSCluster, AWSMachine)}


def test_the_controller_as_its_service_account_reconciles_the_example_and_deletes_it_cleanly(
    lifecycle: Lifecycle,
) -> None:
    assert not lifecycle.problems_when_ready, "\n".join(lifecycle.problems_when_ready)
    assert lifecycle.left_in_cluster == [], "the delete is over once the finalizers are removed"
    assert not any(lifecycle.left_in_aws.values()), f"left in AWS after the delete: {lifecycle.left_in_aws}"


def _pairs(access: Any) -> set[tuple[str, str, str]]:
    return {
        (model.API_VERSION.rpartition("/")[0], model.PLURAL + (f"/{sub}" if sub else ""), verb)
        for model, sub, verbs, *_ in access
        for verb in verbs
    }


def _granted() -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in cluster_role()["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_every_request_the_controller_made_was_allowed_and_every_rule_was_used(
    lifecycle: Lifecycle,
) -> None:
    """Compares the API server's audit log (the ServiceAccount's requests) with the ClusterRole. Failed
    before: the role granted ``list``/``watch`` on CRDs, ``get`` on Secrets and ``update`` on
    ``awsclusters/finalizers`` and ``awsmachines/finalizers``, which the controller never uses."""
    requests = lifecycle.requests
    assert requests, "the audit log holds no request of the controller's ServiceAccount"
    refused = [r for r in requests if r.code in (401, 403)]
    assert not refused, f"requests the RBAC refused: {refused}"
    used = {(r.group, r.resource, r.verb) for r in requests if r.resource}
    granted = _granted()
    assert used - granted == set(), f"requests outside the ClusterRole: {sorted(used - granted)}"
    unused = granted - used
    # Reads of the kinds the controller writes come from its watch cache; it asks the API server for one
    # only after a write of that kind conflicted (409), to start the retry from the current version.
    written = {(g, r) for g, r, v in granted if v == "update" and "/" not in r}
    after_conflicts_only = set()
    for group, resource, verb in sorted(unused):
        if verb == "get" and (group, resource) in written:
            conflicted = [
                r
                for r in requests
                if r.code == 409 and (r.group, r.resource.split("/")[0]) == (group, resource)
            ]
            assert not conflicted, f"a write of {resource} conflicted, yet no get followed: {conflicted}"
            after_conflicts_only.add((group, resource, verb))
    # Owner references that block deletion: the admission plugin checks update on the owner's finalizers
    # within the write that sets them (no request of its own in the log).
    assert lifecycle.blocking_owners == {
        ("cluster.x-k8s.io", "clusters/finalizers", "update"),
        ("cluster.x-k8s.io", "machines/finalizers", "update"),
    }
    assert lifecycle.blocking_owners <= granted
    tinkerbell = _pairs(TINKERBELL_ACCESS)  # the example makes no Tinkerbell object
    machine_sets = _pairs(MACHINE_SET_ACCESS)  # nor a MachineDeployment (recorded by tests/machinesets)
    identities = _pairs(IDENTITY_ACCESS)  # nor names an identity
    pools = _pairs(MACHINE_POOL_ACCESS)  # nor a MachinePool (recorded by tests/manifests/test_rbac.py)
    elsewhere = tinkerbell | machine_sets | identities | pools
    never = unused - after_conflicts_only - lifecycle.blocking_owners - elsewhere
    assert never == set(), f"granted, never used: {sorted(never)}"
    assert _pairs(OUTSIDE_THE_RECORDING) <= used, "what the in-process recording cannot see, seen here"
    for model, verb, _why in READ_FROM_THE_CACHE:
        assert (model.API_VERSION.rpartition("/")[0], model.PLURAL, verb) not in used | granted
    assert {("", "events", "create"), ("", "events", "get"), ("", "events", "update")} <= used
    assert lifecycle.repeated_event["source"]["component"] == "capa-py-controller"
    assert {r.verb for r in requests if r.resource == "leases"} == {"get", "create", "update", "watch"}
    deletes = {r for g, r, v in used if v == "delete"}
    assert deletes == {"machines", "awsclusters", "awsmachines"}, "the cascade is the controller's"


def _owner_check_role(without_finalizers: bool) -> dict[str, Any]:
    role = cluster_role()
    name = "capa-owner-check-" + ("without" if without_finalizers else "with") + "-finalizers"
    role["metadata"] = {"name": name}
    if without_finalizers:
        rules = []
        for rule in role["rules"]:
            resources = [r for r in rule["resources"] if not r.endswith("/finalizers")]
            if resources:
                rules.append({**rule, "resources": resources})
        role["rules"] = rules
    return role


def _account_with(management: Management, role: dict[str, Any]) -> Path:
    cluster = management.cluster
    name = role["metadata"]["name"]
    cluster.request("/apis/rbac.authorization.k8s.io/v1/clusterroles", "POST", role)
    cluster.request(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "POST",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        },
    )
    return cluster.service_account_kubeconfig(management.workdir / f"{name}.kubeconfig", NAMESPACE, name)


def test_owner_references_blocking_deletion_need_the_finalizers_rules(management: Management) -> None:
    """The core controller makes a Cluster the controlling owner of its AWSCluster (``blockOwnerDeletion``):
    where owner references are enforced, that write needs ``update`` on the owner's finalizers
    (``clusters/finalizers``) — refused without the finalizers rules, allowed with the ClusterRole's."""
    cluster = management.cluster
    namespace = "owner-check"
    with contextlib.suppress(urllib.error.HTTPError):
        cluster.request(
            "/api/v1/namespaces",
            "POST",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
    paused = {"cluster.x-k8s.io/paused": "true"}  # nothing reconciles them: the test writes alone
    base = f"/apis/cluster.x-k8s.io/v1beta1/namespaces/{namespace}/clusters"
    owner = {"apiVersion": Cluster.API_VERSION, "kind": "Cluster", "metadata": {"name": "owner"}}
    cluster.request(base, "POST", {**owner, "spec": {"paused": True}})
    infra = {
        "apiVersion": AWSCluster.API_VERSION,
        "kind": "AWSCluster",
        "metadata": {"name": "owner", "namespace": namespace, "annotations": paused},
        "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
    }
    cluster.request(
        f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/awsclusters", "POST", infra
    )
    refused = _account_with(management, _owner_check_role(without_finalizers=True))
    allowed = _account_with(management, _owner_check_role(without_finalizers=False))

    def attempt(kubeconfig: Path) -> str:
        """``allowed``, or why the write was refused."""
        try:
            with KubeStore.from_kubeconfig(kubeconfig) as store:
                owner = store.get(Cluster, "owner", namespace)
                ensure_owner(store, store.get(AWSCluster, "owner", namespace), owner)
        except Unavailable as exc:
            return str(exc)
        return "allowed"

    # A new binding takes effect within moments: until then every request is refused, finalizers or not.
    def settled(kubeconfig: Path) -> str | None:
        outcome = attempt(kubeconfig)
        return outcome if outcome == "allowed" or "finalizers" in outcome else None

    refusal = wait_until(lambda: settled(refused), "the role without the finalizers rules", timeout=30)
    assert "403" in refusal, refusal
    assert "cannot set blockOwnerDeletion" in refusal, refusal
    wait_until(lambda: attempt(allowed) == "allowed", "the write as the ClusterRole allows it", timeout=30)
    stored = cluster.request(
        f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/awsclusters/owner"
    )
    [reference] = stored["metadata"]["ownerReferences"]
    assert (reference["kind"], reference["blockOwnerDeletion"]) == ("Cluster", True)
