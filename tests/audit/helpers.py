"""Building blocks for the orphan audit tests: clients against a moto server, clusters made by the real
controllers, and leaks made the ways they happen.

* :func:`make_pool`: a :class:`~capa_py.aws.session.ClientPool` against a moto server, made in a clean AWS
  environment (no ambient credentials, profiles or endpoints reach it).
* :func:`apply_cluster`: stores a Cluster/AWSCluster (and optionally one control-plane machine) and runs
  the controllers in-process until they are ready, as ``capa apply`` does.
* :func:`forget_cluster`: drops a cluster's objects from the store, finalizers and all, so its AWS
  resources stay behind with no object — the "cluster gone" leak.
* :func:`crash_after`: a client hook that kills the process right after AWS answered a call (a crash point).
* :class:`FailingStatusStore`: a store whose status writes fail (a lost record).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster, Machine
from capa_py.api.core import Secret
from capa_py.api.loader import load_manifest_text
from capa_py.api.meta import KubeObject
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSSettings, ClientPool, RetryPolicy, register_client_hook
from capa_py.engine.engine import Engine
from capa_py.engine.profiles import MOTO
from capa_py.engine.tags import STORE_TAG
from capa_py.operations import apply_objects
from capa_py.store.errors import NotFound, StoreError
from capa_py.store.protocol import ObjectStore
from tests.harness.manifests import cluster_documents
from tests.harness.moto_server import MotoServer

REGION = "us-east-1"
ZONE = "us-east-1a"
# Fail fast against moto; see tests/resources/builders.py for why initial_delay stays at 1 s.
TEST_RETRY = RetryPolicy(attempts=2, initial_delay=1.0, max_delay=1.0, not_found_window=2.0)
OWNED_PREFIX = "sigs.k8s.io/cluster-api-provider-aws/cluster/"


@contextmanager
def clean_aws_env(scratch: Path) -> Iterator[pytest.MonkeyPatch]:
    """No ambient AWS configuration while clients are made (or the CLI runs)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in list(os.environ):
            if name.startswith("AWS_"):
                monkeypatch.delenv(name)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(scratch / "no-aws-config"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(scratch / "no-aws-credentials"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield monkeypatch


def make_pool(server: MotoServer, scratch: Path) -> ClientPool:
    with clean_aws_env(scratch):
        pool = ClientPool(
            AWSSettings(region=REGION, endpoint_url=server.url, retry=TEST_RETRY),
            limiter=RateLimiter(enabled=False),
        )
        clients = pool.for_region(REGION)
        for service in ("ec2", "elbv2", "elb", "iam", "resourcegroupstaggingapi", "route53", "s3"):
            clients.client(service)
    return pool


def owned(cluster: str, store_uid: str | None) -> dict[str, str]:
    """The owned tag of ``cluster``, and the store tag of ``store_uid`` (None: a resource no capa-py store
    made, which the audit calls foreign)."""
    tags = {OWNED_PREFIX + cluster: "owned"}
    if store_uid is not None:
        tags[STORE_TAG] = store_uid
    return tags


def tag_spec(resource_type: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def register_image(pool: ClientPool) -> str:
    ec2 = pool.for_region(REGION).ec2.raw
    return str(ec2.register_image(Name="capa-audit-node", RootDeviceName="/dev/sda1")["ImageId"])


_MACHINE = """
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}-bootstrap, namespace: default}}
stringData: {{value: "#cloud-config"}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata:
  name: {name}-cp-0
  namespace: default
  labels: {{cluster.x-k8s.io/cluster-name: {name}, cluster.x-k8s.io/control-plane: ""}}
spec:
  clusterName: {name}
  version: v1.31.0
  bootstrap: {{dataSecretName: {name}-bootstrap}}
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    kind: AWSMachine
    name: {name}-cp-0
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachine
metadata:
  name: {name}-cp-0
  namespace: default
  labels: {{cluster.x-k8s.io/cluster-name: {name}, cluster.x-k8s.io/control-plane: ""}}
spec:
  instanceType: t3.medium
  ami: {{id: {ami}}}
"""


def cluster_manifest(name: str, cidr: str, ami: str | None = None) -> str:
    """A one-zone cluster (``cidr`` is the first two octets, ``10.1``), with a control-plane machine when
    an AMI is given."""
    text = cluster_documents(
        name,
        f"""\
    vpc: {{cidrBlock: {cidr}.0.0/16}}
    subnets:
      - {{availabilityZone: us-east-1a, cidrBlock: {cidr}.0.0/20, isPublic: true}}
      - {{availabilityZone: us-east-1a, cidrBlock: {cidr}.64.0/18}}""",
    )
    if ami is not None:
        text += _MACHINE.format(name=name, ami=ami)
    return text


def apply_cluster(store: ObjectStore, pool: ClientPool, manifest: str, timeout: float = 60.0) -> None:
    """Store the objects and run the real controllers until every one is ready (fails the test if not)."""
    from controllers import aws_controllers
    from controllers.run import converge

    applied = apply_objects(store, load_manifest_text(manifest, "test.yaml"))
    targets = [a.object for a in applied if not isinstance(a.object, Secret)]
    result = converge(store, aws_controllers(store, pool, Engine(MOTO)), targets, timeout=timeout)
    assert result.converged, f"cluster did not converge: {result.states}"


def recorded_ids(store: ObjectStore, cluster: str) -> dict[str, str]:
    """id → kind of everything the cluster's objects record."""
    ids: dict[str, str] = {}
    for kind in (AWSCluster, AWSMachine):
        for obj in store.list(kind, label_selector=None):
            name = obj.metadata.labels.get(CLUSTER_NAME_LABEL) or obj.name
            if name == cluster:
                ids.update({r.id: r.kind for r in obj.status.resources.values()})
    return ids


def forget_cluster(store: ObjectStore, cluster: str) -> None:
    """Remove a cluster's objects from the store, bypassing finalizers: its AWS resources stay."""
    kinds: tuple[type[KubeObject], ...] = (AWSMachine, Machine, AWSCluster, Cluster)
    for kind in kinds:
        for listed in list(store.list(kind)):
            if listed.name != cluster and listed.metadata.labels.get(CLUSTER_NAME_LABEL) != cluster:
                continue
            obj = listed
            if obj.metadata.finalizers:
                obj.metadata.finalizers = []
                obj = store.update(obj)
            with suppress(NotFound):
                store.delete(kind, obj.name, obj.metadata.namespace)


class FailingStatusStore:
    """The real store, except that every status write fails: what a lost record looks like."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def update_status(self, obj: Any) -> Any:
        raise StoreError("injected: the status write was lost")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Crash(BaseException):
    """The process dies (BaseException: nothing in the engine may catch it)."""


@contextmanager
def crash_after(operation: str) -> Iterator[None]:
    """Clients made inside the block die right after AWS answered ``operation``: a crash point between
    create and record."""

    def hook(raw: Any, service: str) -> None:
        def die(**_: Any) -> None:
            raise Crash(f"killed after {operation}")

        raw.meta.events.register(f"after-call.{service}.{operation}", die)

    unregister = register_client_hook(hook)
    try:
        yield
    finally:
        unregister()


def crashing(fn: Callable[[], Any]) -> None:
    """Run ``fn`` and swallow the simulated crash."""
    try:
        fn()
    except Crash:
        return
    raise AssertionError("the crash point was never reached")
