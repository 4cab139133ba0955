"""The last step of a cluster's delete: whatever else carries the cluster's owned tag and this store's tag.

Duplicates from lost records are deleted (what AWS refuses while attached — an attached internet gateway,
a route table's associations — released first, by :func:`resources.deletion.release_and_delete`, as
``capa audit --delete`` does), their observations forgotten; another store's resources,
and those with no capa-py store tag, are left alone. The cluster's instances are swept only once no
AWSMachine of the cluster is left. A resource that waiting cannot free (a permission, another cluster's
use) is logged for ``capa audit`` rather than holding the finalizer forever.
"""

from __future__ import annotations

from typing import Any

from capa_py.api.aws import AWSMachine
from capa_py.api.cluster import CLUSTER_NAME_LABEL
from capa_py.aws.errors import AWSError, DependencyViolation, Retryable
from capa_py.aws.errors import NotFound as AWSNotFound
from capa_py.engine.errors import Waiting
from capa_py.engine.resource import ResourceClass
from capa_py.engine.tags import CLUSTER_TAG_PREFIX, OWNED, foreign_store, tagging_store_uid
from capa_py.logging import get_logger
from controllers.services.cluster_scope import ClusterScope
from resources.deletion import DELETION_ORDER, release_and_delete
from resources.instance import Instance

_log = get_logger("controller.awscluster")


def _swept(scope: ClusterScope) -> list[ResourceClass[Any]]:
    """The kinds swept, in :data:`~resources.deletion.DELETION_ORDER`; the cluster's instances (first) only
    when no AWSMachine of it is left."""
    rcs = scope.resources
    machines_left = list(
        scope.store.list(
            AWSMachine,
            namespace=scope.obj.namespace,
            label_selector=f"{CLUSTER_NAME_LABEL}={scope.cluster_name}",
        )
    )
    classes: list[ResourceClass[Any]] = [
        rcs.vpc,
        rcs.listener,
        rcs.load_balancer,
        rcs.target_group,
        rcs.nat_gateway,
        rcs.elastic_ip,
        rcs.route_table,
        rcs.internet_gateway,
        rcs.subnet,
        rcs.security_group,
    ]
    if not machines_left:
        classes.append(Instance(scope.aws))
    return sorted(classes, key=lambda rc: DELETION_ORDER.index(rc.kind))


def sweep_cluster_resources(scope: ClusterScope) -> None:
    cluster = scope.cluster_name
    tag = {CLUSTER_TAG_PREFIX + cluster: OWNED}
    store_uid = tagging_store_uid(scope.obj.metadata.annotations, scope.store.uid)
    classes = _swept(scope)
    waiting: list[str] = []
    for rc in classes:
        for observed in rc.describe_by_tags(tag, None):
            if foreign_store(observed.tags, store_uid) is not None:
                # Another store's (or not capa-py's) resource under this cluster's name: never ours.
                _log.warning(
                    "not sweeping a resource tagged with the cluster that another store owns",
                    kind=rc.kind,
                    resource_id=observed.id,
                    cluster=cluster,
                )
                continue
            try:
                release_and_delete(rc, observed.id, observed)
                scope.reads(rc).deleted(observed.id, cluster)
                if scope.engine_scope.events is not None:
                    scope.engine_scope.events.deleted(rc.kind, "stray", observed.id)
                _log.warning(
                    "deleted a stray resource tagged with the cluster",
                    kind=rc.kind,
                    resource_id=observed.id,
                    cluster=cluster,
                )
            except AWSNotFound:
                continue
            except (Retryable, DependencyViolation) as exc:
                waiting.append(f"{rc.kind} {observed.id}: {exc}")
            except AWSError as exc:
                # Not something waiting fixes (a permission, a resource another cluster still uses):
                # reported prominently and left for `capa audit`, not a finalizer stuck forever.
                _log.error(
                    "could not delete a stray resource tagged with the cluster; `capa audit` lists it",
                    kind=rc.kind,
                    resource_id=observed.id,
                    cluster=cluster,
                    error=str(exc),
                )
                continue
            if rc.deletion_is_slow and rc.describe_by_id(observed.id) is not None:
                waiting.append(f"{rc.kind} {observed.id} deleting")
    if waiting:
        raise Waiting("sweeping stray cluster resources: " + "; ".join(waiting[:5]), 10.0)
