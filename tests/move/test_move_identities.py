"""A move copies the identities its clusters use (``identityRef``, each role identity's
``sourceIdentityRef`` in turn, a static identity's Secret from the controller's namespace) to the target as
global objects, as ``clusterctl move`` treats Cluster API Provider AWS's identities: created there when
absent, left alone when there already, never deleted from the source (another cluster may use them). The
target's controllers then act with the same identity: on moto, a cluster in a role's account is adopted with
no mutating AWS call."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_identity import (
    AWSClusterControllerIdentity,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
    AWSIdentityReference,
)
from capa_py.api.cluster import Cluster
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.manifests.rbac import NAMESPACE
from capa_py.move import MOVED_FROM_UID, MoveError, move
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from controllers.run import converge
from tests.cli.cli_support import Cli
from tests.controllers.conftest import Harness
from tests.move.scenario import populate

ROLE = "arn:aws:iam::222222222222:role/capa-py-workload"
KEY = {"AccessKeyID": "AKIAEXAMPLEBASEKEY01", "SecretAccessKey": "base-secret-not-shown"}


def _static(name: str = "base", secret: str = "base-key") -> AWSClusterStaticIdentity:
    return AWSClusterStaticIdentity.model_validate(
        {"metadata": {"name": name}, "spec": {"secretRef": secret, "allowedNamespaces": {}}}
    )


def _key_secret(name: str = "base-key", values: dict[str, str] = KEY) -> Secret:
    return Secret.model_validate(
        {"metadata": {"name": name, "namespace": NAMESPACE}, "stringData": dict(values)}
    )


def _role(
    name: str = "workload", source: dict[str, str] | None = None, arn: str = ROLE
) -> AWSClusterRoleIdentity:
    spec: dict[str, Any] = {"roleARN": arn, "allowedNamespaces": {}}
    if source is not None:
        spec["sourceIdentityRef"] = source
    return AWSClusterRoleIdentity.model_validate({"metadata": {"name": name}, "spec": spec})


def _use(store: SQLiteStore, cluster: str, kind: str, name: str) -> None:
    awscluster = store.get(AWSCluster, cluster, "default")
    awscluster.spec.identity_ref = AWSIdentityReference(kind=kind, name=name)  # type: ignore[arg-type]
    store.update(awscluster)


def _chain(store: SQLiteStore) -> None:
    """``demo`` uses the role ``workload``, assumed from the static identity ``base`` and its key."""
    apply_objects(
        store, [_static(), _key_secret(), _role(source={"kind": "AWSClusterStaticIdentity", "name": "base"})]
    )
    _use(store, "demo", "AWSClusterRoleIdentity", "workload")


def _names(objects: list[KubeObject]) -> list[tuple[str, str | None, str]]:
    return [(o.kind, o.namespace, o.name) for o in objects]


CHAIN = [
    ("AWSClusterStaticIdentity", None, "base"),
    ("Secret", NAMESPACE, "base-key"),
    ("AWSClusterRoleIdentity", None, "workload"),
]


def test_a_dry_run_lists_the_identity_chain_first_and_changes_nothing(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    _chain(source)

    result = move(source, target, cluster="demo", dry_run=True)

    assert _names(result.objects[:3]) == CHAIN, "sources first, a static identity followed by its Secret"
    assert _names(result.global_objects) == CHAIN
    assert result.missing == []
    assert ("AWSCluster", "default", "demo") in _names(result.objects)
    assert target.list(AWSClusterRoleIdentity) == []
    assert not source.get(Cluster, "demo", "default").spec.paused


def test_identities_are_copied_to_the_target_and_kept_on_the_source(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    _chain(source)
    # As Cluster API Provider AWS's controller does for clusterctl: the static identity owns its Secret.
    base = source.get(AWSClusterStaticIdentity, "base", None)
    secret = source.get(Secret, "base-key", NAMESPACE)
    secret.metadata.owner_references = [base.owner_reference(controller=False)]
    source.update(secret)

    result = move(source, target, cluster="demo")

    assert result.created["AWSClusterStaticIdentity"] == 1
    assert result.created["AWSClusterRoleIdentity"] == 1
    copied_base = target.get(AWSClusterStaticIdentity, "base", None)
    copied_role = target.get(AWSClusterRoleIdentity, "workload", None)
    copied_secret = target.get(Secret, "base-key", NAMESPACE)
    assert copied_base.metadata.annotations[MOVED_FROM_UID] == base.uid
    assert copied_role.spec == source.get(AWSClusterRoleIdentity, "workload", None).spec
    assert {k: copied_secret.value(k).decode() for k in KEY} == KEY
    assert [r.uid for r in copied_secret.metadata.owner_references] == [copied_base.uid], (
        "the Secret's owner reference names the target's identity"
    )
    assert target.get(AWSCluster, "demo", "default").spec.identity_ref == AWSIdentityReference(
        kind="AWSClusterRoleIdentity", name="workload"
    )
    # Global objects stay on the source: the cluster lab (or one made later) may use them.
    assert source.get(AWSClusterStaticIdentity, "base", None).uid == base.uid
    assert source.get(Secret, "base-key", NAMESPACE).uid == secret.uid
    assert source.get(AWSClusterRoleIdentity, "workload", None) is not None
    assert source.list(AWSCluster, namespace="default") == []

    again = move(source, target, cluster="demo")

    assert sum(again.created.values()) == 0
    assert target.list(AWSClusterStaticIdentity) == [copied_base]


def test_an_identity_two_clusters_use_stays_on_the_source_for_the_one_left(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    apply_objects(
        source,
        [
            AWSClusterControllerIdentity.model_validate(
                {"metadata": {"name": "default"}, "spec": {"allowedNamespaces": {}}}
            )
        ],
    )
    _use(source, "demo", "AWSClusterControllerIdentity", "default")
    other = source.get(AWSCluster, "demo", "default").model_copy(deep=True)
    other.metadata = type(other.metadata)(name="other", namespace="default")
    source.create(other)

    result = move(source, target, cluster="demo")

    assert result.created["AWSClusterControllerIdentity"] == 1
    assert source.get(AWSClusterControllerIdentity, "default", None) is not None
    assert source.get(AWSCluster, "other", "default").spec.identity_ref is not None


def test_an_identity_already_on_the_target_is_kept_as_it_is_when_it_says_the_same(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    _chain(source)
    apply_objects(target, [_role(source={"kind": "AWSClusterStaticIdentity", "name": "base"})])
    before = target.get(AWSClusterRoleIdentity, "workload", None)

    result = move(source, target, cluster="demo")

    assert result.kept["AWSClusterRoleIdentity"] == 1
    assert result.created["AWSClusterStaticIdentity"] == 1
    assert target.get(AWSClusterRoleIdentity, "workload", None).metadata == before.metadata


@pytest.mark.parametrize(
    "different",
    [
        lambda: _role(
            source={"kind": "AWSClusterStaticIdentity", "name": "base"},
            arn="arn:aws:iam::333333333333:role/x",
        ),
        lambda: _key_secret(values={**KEY, "SecretAccessKey": "rotated-secret-value"}),
    ],
    ids=["role with another ARN", "secret with another key"],
)
def test_an_identity_on_the_target_that_says_otherwise_refuses_the_move_before_anything_changes(
    source: SQLiteStore, target: SQLiteStore, different: Callable[[], KubeObject]
) -> None:
    populate(source)
    _chain(source)
    apply_objects(target, [different()])

    with pytest.raises(MoveError) as refused:
        move(source, target, cluster="demo")

    message = str(refused.value)
    assert "exists on the target with" in message
    assert "nothing was changed" in message
    assert "rotated-secret-value" not in message, "a Secret's value is never shown"
    assert "base-secret" not in message
    assert not source.get(Cluster, "demo", "default").spec.paused
    assert target.list(Cluster) == []


def test_a_referenced_identity_the_source_lacks_is_reported_and_the_cluster_still_moves(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    _use(source, "demo", "AWSClusterRoleIdentity", "nowhere")

    result = move(source, target, cluster="demo")

    assert result.missing == ["AWSClusterRoleIdentity nowhere"]
    assert target.get(AWSCluster, "demo", "default").spec.identity_ref is not None


def test_capa_move_dry_run_prints_identities_as_global_objects(cli: Cli, state: Path, tmp_path: Path) -> None:
    store = SQLiteStore(state)
    try:
        populate(store)
        _chain(store)
    finally:
        store.close()

    result = cli("move", "--to-state", str(tmp_path / "b.db"), "--cluster", "demo", "--dry-run")

    assert result.exit_code == 0, str(result)
    assert "AWSClusterRoleIdentity workload (global: copied, kept on the source)" in result.stdout
    assert f"Secret {NAMESPACE}/base-key (global: copied, kept on the source)" in result.stdout
    assert "10 objects would move, 3 global objects would be copied (dry run)" in result.stdout
    assert base64.b64encode(KEY["SecretAccessKey"].encode()).decode() not in result.stdout


def test_the_target_adopts_a_cluster_in_a_roles_account_changing_nothing_in_aws(
    harness: Harness, example: Callable[[], list[KubeObject]], tmp_path: Path
) -> None:
    """The chain static → role on moto: moto's STS hands out credentials of the role's account, so the
    cluster is built there; after the move the target's controllers resolve the copied chain and find
    everything as recorded."""
    objects = example()
    for obj in objects:
        if isinstance(obj, AWSCluster):
            obj.spec.identity_ref = AWSIdentityReference(kind="AWSClusterRoleIdentity", name="workload")
    applied = harness.apply(
        [
            _static(),
            _key_secret(),
            _role(source={"kind": "AWSClusterStaticIdentity", "name": "base"}),
            *objects,
        ]
    )
    targets = [o for o in applied if isinstance(o, Cluster | AWSCluster | AWSMachine)]
    assert harness.converge(targets).converged
    before = harness.store.get(AWSCluster, "demo", "default")

    target = SQLiteStore(tmp_path / "target.db")
    try:
        move(harness.store, target, namespace="default")
        moved = [target.get(type(o), o.name, o.namespace) for o in targets]

        adopted = converge(
            target, Harness(target, harness.server).controllers(), moved, goal="ready", timeout=60
        )

        assert adopted.converged, adopted.states
        operations = adopted.calls.by_operation()
        assert "sts:AssumeRole" in operations, "the target's controllers did not use the copied chain"
        # AssumeRole counts as mutating by its name; it makes credentials, not resources.
        assert adopted.calls.mutating_operations() == {"sts:AssumeRole": 1}, operations
        assert target.get(AWSCluster, "demo", "default").status.resources == before.status.resources
    finally:
        target.close()
