"""Multi-account identities: an AWSCluster's ``identityRef`` decides whose credentials every AWS call of
its controllers (the AWSCluster's and its AWSMachines') uses.

moto's STS serves the roles: ``AssumeRole`` into ``arn:aws:iam::222222222222:role/...`` returns
credentials of account 222222222222 whether or not the role exists (moto takes the account from the role
ARN), and moto's server puts every request signed with those credentials into that account's backends
(it maps the access key back to the account that issued it), so a VPC created with them is invisible to
the default account 123456789012 and the other way round. The tests look at each account through
credentials of their own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from structlog.testing import capture_logs

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_identity import (
    AWSClusterControllerIdentity,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
    AWSIdentityReference,
)
from capa_py.api.cluster import Cluster
from capa_py.api.core import Namespace, Secret
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.aws.credentials import RoleRequest, assume_role
from capa_py.aws.session import register_client_hook
from capa_py.manifests.rbac import NAMESPACE
from capa_py.operations import apply_objects
from controllers.identity import (
    PRINCIPAL_CREDENTIAL_RETRIEVED,
    PRINCIPAL_USAGE_ALLOWED,
    RETRIEVAL_FAILED,
    SOURCE_USAGE_UNAUTHORIZED,
    USAGE_UNAUTHORIZED,
    Identities,
    IdentityRefused,
    IdentityUnavailable,
)
from tests.controllers.conftest import Harness

SECOND = "222222222222"
THIRD = "333333333333"
ROLE = f"arn:aws:iam::{SECOND}:role/capa-py-workload"
EVERY_NAMESPACE: dict[str, Any] = {}


class AssumeRoleRecorder:
    """Every AssumeRole request a client makes: its parameters and the access key that signed it."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], str]] = []

    def hook(self, client: Any, service: str) -> None:
        if service == "sts":
            client.meta.events.register("provide-client-params.sts.AssumeRole", self._params)
            client.meta.events.register("before-send.sts.AssumeRole", self._signer)

    def _params(self, params: dict[str, Any], **_: Any) -> None:
        self.calls.append((dict(params), ""))

    def _signer(self, request: Any, **_: Any) -> None:
        header = request.headers.get("Authorization", b"")
        text = header.decode() if isinstance(header, bytes) else str(header)
        match = re.search(r"Credential=([^/]+)/", text)
        params, _ = self.calls[-1]
        self.calls[-1] = (params, match.group(1) if match else "")


@pytest.fixture
def assume_calls() -> Iterator[AssumeRoleRecorder]:
    recorder = AssumeRoleRecorder()
    unregister = register_client_hook(recorder.hook)
    yield recorder
    unregister()


def account_client(harness: Harness, account: str, service: str = "ec2") -> Any:
    """A client of ``account`` (the default account's with the emulator's keys, another's through a role)."""
    endpoint = {"endpoint_url": harness.server.url, "region_name": "us-east-1"}
    base = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    if account == "123456789012":
        return boto3.client(service, **endpoint, **base)  # type: ignore[call-overload]
    issued = boto3.client("sts", **endpoint, **base).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/inspector", RoleSessionName="inspector"
    )["Credentials"]
    return boto3.client(  # type: ignore[call-overload]
        service,
        **endpoint,
        aws_access_key_id=issued["AccessKeyId"],
        aws_secret_access_key=issued["SecretAccessKey"],
        aws_session_token=issued["SessionToken"],
    )


def cluster_vpcs(harness: Harness, account: str) -> list[str]:
    vpcs = account_client(harness, account).describe_vpcs(
        Filters=[{"Name": "tag-key", "Values": ["sigs.k8s.io/cluster-api-provider-aws/cluster/demo"]}]
    )["Vpcs"]
    return [v["VpcId"] for v in vpcs]


def role_identity(
    name: str = "workload",
    role_arn: str = ROLE,
    allowed: dict[str, Any] | None = EVERY_NAMESPACE,
    **spec: Any,
) -> AWSClusterRoleIdentity:
    body: dict[str, Any] = {"roleARN": role_arn, **spec}
    if allowed is not None:
        body["allowedNamespaces"] = allowed
    return AWSClusterRoleIdentity.model_validate({"metadata": {"name": name}, "spec": body})


def with_identity(objects: list[KubeObject], kind: str, name: str) -> list[KubeObject]:
    for obj in objects:
        if isinstance(obj, AWSCluster):
            obj.spec.identity_ref = AWSIdentityReference(kind=kind, name=name)  # type: ignore[arg-type]
    return objects


def targets(stored: list[KubeObject]) -> list[KubeObject]:
    return [o for o in stored if isinstance(o, (Cluster, AWSCluster, AWSMachine))]


def conditions(harness: Harness) -> dict[str, Any]:
    return {c.type: c for c in harness.store.get(AWSCluster, "demo", "default").status.conditions}


# -- allowedNamespaces --------------------------------------------------------------------------------
def cluster_in(namespace: str, kind: str = "AWSClusterRoleIdentity", name: str = "workload") -> AWSCluster:
    return AWSCluster.model_validate(
        {
            "metadata": {"name": "demo", "namespace": namespace},
            "spec": {"region": "us-east-1", "identityRef": {"kind": kind, "name": name}},
        }
    )


@pytest.mark.parametrize(
    ("allowed", "namespace", "permitted"),
    [
        (None, "default", False),  # absent: no namespace
        ({}, "default", True),  # {}: every namespace
        ({}, "team-b", True),
        ({"list": ["team-a"]}, "team-a", True),
        ({"list": ["team-a"]}, "team-b", False),
        ({"selector": {"matchLabels": {"tenant": "a"}}}, "team-a", True),
        ({"selector": {"matchLabels": {"tenant": "a"}}}, "team-b", False),
        ({"selector": {"matchExpressions": [{"key": "tenant", "operator": "Exists"}]}}, "team-b", True),
        ({"list": ["team-b"], "selector": {"matchLabels": {"tenant": "a"}}}, "team-b", True),
        ({"selector": {}}, "team-b", True),  # an empty selector alone is {}: every namespace
        (
            {"selector": {"matchLabels": {"kubernetes.io/metadata.name": "elsewhere"}}},
            "elsewhere",
            True,
        ),  # a namespace the store does not hold still carries its name label
    ],
)
def test_allowed_namespaces_follow_cluster_api_provider_aws(
    harness: Harness, allowed: dict[str, Any] | None, namespace: str, permitted: bool
) -> None:
    apply_objects(
        harness.store,
        [
            Namespace(metadata=ObjectMeta(name="team-a", labels={"tenant": "a"})),
            Namespace(metadata=ObjectMeta(name="team-b", labels={"tenant": "b"})),
            AWSClusterControllerIdentity.model_validate(
                {
                    "metadata": {"name": "default"},
                    "spec": {} if allowed is None else {"allowedNamespaces": allowed},
                }
            ),
        ],
    )
    identities = Identities(harness.store, harness.pool)
    cluster = cluster_in(namespace, "AWSClusterControllerIdentity", "default")
    if permitted:
        assert identities.pool_for(cluster) is harness.pool, (
            "the controller identity uses the controller's pool"
        )
    else:
        with pytest.raises(IdentityRefused) as refused:
            identities.pool_for(cluster)
        assert refused.value.reason == USAGE_UNAUTHORIZED
        assert namespace in str(refused.value)


def test_an_empty_allowed_namespaces_list_is_refused_naming_the_field() -> None:
    identity = role_identity(allowed={"list": []})
    issues = identity.semantic_issues()
    assert [i.path for i in issues] == ["spec.allowedNamespaces.list"]


def test_allowed_namespaces_survive_the_wire_as_given() -> None:
    """``{}`` (every namespace) must not be dropped as an empty map would be: absent means none."""
    for allowed in (EVERY_NAMESPACE, None):
        wire = role_identity(allowed=allowed).to_dict()
        again = AWSClusterRoleIdentity.from_dict(wire)
        assert (again.spec.allowed_namespaces is None) == (allowed is None), wire


def test_a_controller_identity_must_be_named_default() -> None:
    with pytest.raises(ValueError, match="default"):
        AWSClusterControllerIdentity.check_name("other")


# -- a role identity ----------------------------------------------------------------------------------
def test_a_role_identity_builds_and_deletes_the_cluster_in_the_roles_account_only(
    harness: Harness, example: Callable[[], list[KubeObject]], assume_calls: AssumeRoleRecorder
) -> None:
    objects = with_identity(example(), "AWSClusterRoleIdentity", "workload")
    stored = harness.apply([role_identity(externalID="tenant-42", sessionName="demo-session"), *objects])

    result = harness.converge(targets(stored))

    assert result.converged, result.states
    vpc_id = harness.store.get(AWSCluster, "demo", "default").status.network.vpc_id
    assert cluster_vpcs(harness, SECOND) == [vpc_id]
    assert cluster_vpcs(harness, "123456789012") == [], "nothing is built with the controller's credentials"
    instances = account_client(harness, SECOND).describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    machine_ids = {m.status.instance_id for m in harness.store.list(AWSMachine, "default")}
    assert {i["InstanceId"] for r in instances for i in r["Instances"]} == machine_ids
    found = conditions(harness)
    assert found[PRINCIPAL_USAGE_ALLOWED].status == "True"
    assert found[PRINCIPAL_CREDENTIAL_RETRIEVED].status == "True"
    # One AssumeRole for the whole converge (both controllers share the identity's pool), with the
    # external id and session name of the identity.
    assert [params for params, _ in assume_calls.calls] == [
        {
            "RoleArn": ROLE,
            "RoleSessionName": "demo-session",
            "DurationSeconds": 900,
            "ExternalId": "tenant-42",
        }
    ]

    harness.store.delete(Cluster, "demo", "default")
    gone = harness.converge(targets(stored), goal="gone")

    assert gone.converged, gone.states
    assert cluster_vpcs(harness, SECOND) == []
    second = account_client(harness, SECOND)
    live = second.describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]}]
    )["Reservations"]
    assert live == [], f"instances left in {SECOND}: {live}"
    nat = second.describe_nat_gateways(Filter=[{"Name": "state", "Values": ["pending", "available"]}])
    assert nat["NatGateways"] == []
    groups = [g for g in second.describe_security_groups()["SecurityGroups"] if g["GroupName"] != "default"]
    assert groups == []


def test_a_chain_of_roles_assumes_each_with_the_previous_ones_credentials(
    harness: Harness, assume_calls: AssumeRoleRecorder
) -> None:
    hop = role_identity("hop", ROLE, externalID="hop-external")
    target = role_identity(
        "target",
        f"arn:aws:iam::{THIRD}:role/capa-py-target",
        sourceIdentityRef={"kind": "AWSClusterRoleIdentity", "name": "hop"},
        policyARNs=["arn:aws:iam::aws:policy/AmazonEC2FullAccess"],
    )
    apply_objects(harness.store, [hop, target])
    identities = Identities(harness.store, harness.pool)

    pool = identities.pool_for(cluster_in("default", name="target"))

    caller = pool.for_region("us-east-1").client("sts").call("GetCallerIdentity")
    assert caller["Account"] == THIRD
    (first, first_key), (second, second_key) = assume_calls.calls
    assert first["RoleArn"] == ROLE
    assert first["ExternalId"] == "hop-external"
    assert first_key == "testing", "the first hop signs with the controller's credentials"
    assert second["RoleArn"].startswith(f"arn:aws:iam::{THIRD}:")
    assert second["PolicyArns"] == [{"arn": "arn:aws:iam::aws:policy/AmazonEC2FullAccess"}]
    assert second_key.startswith("ASIA"), "the second signs with the first's credentials"
    assert "ExternalId" not in second
    assert second["RoleSessionName"] == "capa-py-target"


def test_a_source_identity_that_refuses_the_namespace_refuses_the_chain(harness: Harness) -> None:
    apply_objects(
        harness.store,
        [
            role_identity("hop", ROLE, allowed={"list": ["elsewhere"]}),
            role_identity("target", sourceIdentityRef={"kind": "AWSClusterRoleIdentity", "name": "hop"}),
        ],
    )
    with pytest.raises(IdentityRefused) as refused:
        Identities(harness.store, harness.pool).pool_for(cluster_in("default", name="target"))
    assert refused.value.reason == SOURCE_USAGE_UNAUTHORIZED


def test_the_pool_is_kept_while_the_identity_is_unchanged_and_rebuilt_when_it_changes(
    harness: Harness, assume_calls: AssumeRoleRecorder
) -> None:
    apply_objects(harness.store, [role_identity()])
    identities = Identities(harness.store, harness.pool)
    cluster = cluster_in("default")

    first = identities.pool_for(cluster)
    assert identities.pool_for(cluster) is first
    assert len(assume_calls.calls) == 1

    identity = harness.store.get(AWSClusterRoleIdentity, "workload")
    identity.spec.external_id = "rotated"
    harness.store.update(identity)
    second = identities.pool_for(cluster)

    assert second is not first
    assert [p.get("ExternalId") for p, _ in assume_calls.calls] == [None, "rotated"]


def test_assumed_credentials_are_renewed_before_they_expire(
    harness: Harness, assume_calls: AssumeRoleRecorder
) -> None:
    now = [datetime.now(UTC)]
    sts = harness.pool.for_region("us-east-1").client("sts")
    credentials = assume_role(
        functools.partial(sts.call, "AssumeRole"),
        RoleRequest(ROLE, "renewal", duration_seconds=900),
        time_fetcher=lambda: now[0],
    )
    first = credentials.get_frozen_credentials().access_key
    assert len(assume_calls.calls) == 1, "fresh credentials are not renewed"

    # moto honours DurationSeconds (15 minutes): in their last five botocore renews them.
    now[0] += timedelta(minutes=11)
    renewed = credentials.get_frozen_credentials().access_key

    assert len(assume_calls.calls) == 2
    assert renewed != first


# -- refusals and failures ------------------------------------------------------------------------------
def test_a_refused_namespace_creates_nothing_and_says_so_with_capas_reason(
    harness: Harness, example: Callable[[], list[KubeObject]], assume_calls: AssumeRoleRecorder
) -> None:
    objects = with_identity(example(), "AWSClusterRoleIdentity", "workload")
    stored = harness.apply([role_identity(allowed={"list": ["team-a"]}), *objects])

    result = harness.converge(targets(stored), timeout=10)

    assert not result.converged
    refused = conditions(harness)[PRINCIPAL_USAGE_ALLOWED]
    assert (refused.status, refused.reason) == ("False", USAGE_UNAUTHORIZED)
    assert "'default'" in (refused.message or "")
    awscluster = harness.store.get(AWSCluster, "demo", "default")
    assert not awscluster.status.ready
    assert awscluster.status.resources == {}
    assert assume_calls.calls == [], "the role is never assumed for a namespace it refuses"
    assert cluster_vpcs(harness, SECOND) == []
    assert cluster_vpcs(harness, "123456789012") == []


def test_a_static_identity_whose_secret_is_missing_gets_a_clear_condition(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    static = AWSClusterStaticIdentity.model_validate(
        {"metadata": {"name": "keys"}, "spec": {"secretRef": "workload-keys", "allowedNamespaces": {}}}
    )
    objects = with_identity(example(), "AWSClusterStaticIdentity", "keys")
    stored = harness.apply([static, *objects])

    result = harness.converge(targets(stored), timeout=10)

    assert not result.converged
    missing = conditions(harness)[PRINCIPAL_CREDENTIAL_RETRIEVED]
    assert (missing.status, missing.reason) == ("False", RETRIEVAL_FAILED)
    assert f"Secret {NAMESPACE}/workload-keys does not exist" in (missing.message or "")
    assert "spec.secretRef" in (missing.message or "")
    assert cluster_vpcs(harness, "123456789012") == []


def test_a_missing_identity_is_unavailable_naming_it(harness: Harness) -> None:
    with pytest.raises(IdentityUnavailable, match="AWSClusterRoleIdentity nowhere does not exist"):
        Identities(harness.store, harness.pool).pool_for(cluster_in("default", name="nowhere"))


def test_a_static_identity_signs_with_its_secret_and_no_credential_is_ever_logged(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    # A temporary key of the second account (with its session token), as a user would paste one.
    issued = boto3.client(
        "sts",
        endpoint_url=harness.server.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).assume_role(RoleArn=f"arn:aws:iam::{SECOND}:role/static-key", RoleSessionName="static")["Credentials"]
    secret = Secret(
        metadata=ObjectMeta(name="workload-keys", namespace=NAMESPACE),
        string_data={
            "AccessKeyID": issued["AccessKeyId"],
            "SecretAccessKey": issued["SecretAccessKey"],
            "SessionToken": issued["SessionToken"],
        },
    )
    static = AWSClusterStaticIdentity.model_validate(
        {"metadata": {"name": "keys"}, "spec": {"secretRef": "workload-keys", "allowedNamespaces": {}}}
    )
    objects = with_identity(example(), "AWSClusterStaticIdentity", "keys")
    hop = role_identity(
        "via-keys",
        f"arn:aws:iam::{THIRD}:role/x",
        sourceIdentityRef={"kind": "AWSClusterStaticIdentity", "name": "keys"},
    )

    with capture_logs() as logs:
        stored = harness.apply([secret, static, hop, *objects])
        result = harness.converge(targets(stored))
        chained = Identities(harness.store, harness.pool).pool_for(cluster_in("default", name="via-keys"))
        frozen = chained.credentials.get_frozen_credentials()  # type: ignore[union-attr]

    assert result.converged, result.states
    assert len(cluster_vpcs(harness, SECOND)) == 1
    assert cluster_vpcs(harness, "123456789012") == []
    text = repr(logs)
    for value in (
        issued["SecretAccessKey"],
        issued["SessionToken"],
        issued["AccessKeyId"],
        frozen.secret_key,
        frozen.token,
        frozen.access_key,
    ):
        assert value not in text, "a credential reached the logs"
    assert any(entry.get("event") == "assumed role" for entry in logs), "the role's assumption is logged"
