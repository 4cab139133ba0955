"""Tag conventions, as Cluster API Provider AWS uses them, plus capa-py's own.

* owned: ``sigs.k8s.io/cluster-api-provider-aws/cluster/<cluster>=owned`` on everything we manage;
* shared with the in-cluster cloud provider: also ``kubernetes.io/cluster/<cluster>=owned``; such
  resources are create/delete only (ongoing management is handed off to the cloud provider);
* unmanaged (given by the user): never tagged, modified or deleted by us;
* ``sigs.k8s.io/cluster-api-provider-aws/role=<CAPA role>`` with CAPA's values (``common``, ``public``,
  ``private``, ``apiserver``, ``controlplane``/``node``/``lb``/``bastion`` for security groups,
  ``control-plane``/``node``/``bastion`` for instances), so tools that read CAPA's tags understand ours;
* ``capa-py.io/role=<role>``: capa-py's own per-resource role (``subnet-public-us-east-1a``), what lookups
  use; ``Name=<cluster>-<role>``;
* ``capa-py.io/store=<store uid>``: the object store that created the resource. A resource carrying a
  cluster's owned tag and another store's uid (or no capa-py store at all) is never adopted or deleted.

Lookups by tags use only the owned and ``capa-py.io/role`` tags — never user tags, which users change — so
additional tags can never make a resource invisible to the reconciler (and so duplicate it). Resources made
before ``capa-py.io/role`` existed carry capa-py's role in the CAPA role tag; lookups fall back to it and
the update flow re-tags them.
"""

from __future__ import annotations

from collections.abc import Mapping

OWNED = "owned"
SHARED = "shared"
CLUSTER_TAG_PREFIX = "sigs.k8s.io/cluster-api-provider-aws/cluster/"
CLOUD_PROVIDER_TAG_PREFIX = "kubernetes.io/cluster/"
ROLE_TAG = "sigs.k8s.io/cluster-api-provider-aws/role"
"""CAPA's role tag: holds CAPA's value for the resource (see :func:`capa_role`)."""
CAPA_PY_ROLE_TAG = "capa-py.io/role"
"""capa-py's own role of the resource (unique per owner): what lookups by tags use."""
STORE_TAG = "capa-py.io/store"
"""The uid of the object store whose objects created the resource."""
STORE_UID_ANNOTATION = "capa-py.io/store-uid"
"""On an AWSCluster or AWSMachine moved from another store (``capa move``): the store uid its AWS resources
carry in :data:`STORE_TAG`, used instead of the store's own so that the moved objects adopt their resources
as they are (no retagging)."""
NAME_TAG = "Name"

COMMON_ROLE = "common"
PUBLIC_ROLE = "public"
PRIVATE_ROLE = "private"
APISERVER_ROLE = "apiserver"
NODE_ROLE = "node"
CONTROL_PLANE_ROLE = "control-plane"
"""CAPA's role value for control-plane instances (its security group is ``controlplane``)."""

_CAPA_ROLES: tuple[tuple[str, str], ...] = (
    ("vpc", COMMON_ROLE),
    ("internet-gateway", COMMON_ROLE),
    ("eip-", COMMON_ROLE),
    ("nat-gateway-", COMMON_ROLE),
    ("subnet-public-", PUBLIC_ROLE),
    ("subnet-private-", PRIVATE_ROLE),
    ("route-table-public", PUBLIC_ROLE),
    ("route-table-private-", PRIVATE_ROLE),
    ("apiserver-", APISERVER_ROLE),
    ("sg-controlplane", "controlplane"),
    ("sg-node", NODE_ROLE),
    ("sg-lb", "lb"),
    ("sg-apiserver-lb", "apiserver-lb"),
    ("sg-bastion", "bastion"),
    ("bastion", "bastion"),
)
"""capa-py role (exact, or prefix when it ends in ``-``) → CAPA's role tag value."""


def capa_role(role: str) -> str | None:
    """CAPA's role tag value for a capa-py role, or None where CAPA defines none (instances: the caller
    knows whether the machine is a control-plane one)."""
    for prefix, value in _CAPA_ROLES:
        if role == prefix or (prefix.endswith("-") and role.startswith(prefix)):
            return value
    return None


def cluster_tag_key(cluster: str) -> str:
    return CLUSTER_TAG_PREFIX + cluster


def cloud_provider_tag_key(cluster: str) -> str:
    return CLOUD_PROVIDER_TAG_PREFIX + cluster


def lookup_tags(cluster: str, role: str) -> dict[str, str]:
    """The tags a managed resource is found by: owned + capa-py's role."""
    return {cluster_tag_key(cluster): OWNED, CAPA_PY_ROLE_TAG: role}


def role_of(tags: Mapping[str, str]) -> str | None:
    """capa-py's role of a resource: ``capa-py.io/role``, else (made by an older version) the CAPA role tag
    of a resource capa-py owns."""
    role = tags.get(CAPA_PY_ROLE_TAG)
    if role is not None:
        return role
    return tags.get(ROLE_TAG)


def has_role(tags: Mapping[str, str], cluster: str, role: str) -> bool:
    """Whether a resource carries ``cluster``'s owned tag and capa-py's ``role`` (new tag or old style)."""
    if tags.get(cluster_tag_key(cluster)) != OWNED:
        return False
    if CAPA_PY_ROLE_TAG in tags:
        return tags[CAPA_PY_ROLE_TAG] == role
    return tags.get(ROLE_TAG) == role


def managed_tags(
    cluster: str,
    role: str,
    name: str | None = None,
    additional: Mapping[str, str] | None = None,
    shared_with_cloud_provider: bool = False,
    store_uid: str | None = None,
    capa_role_value: str | None = None,
) -> dict[str, str]:
    """Every tag a managed resource carries. Managed keys win over additional tags of the same key."""
    tags = dict(additional or {})
    tags[NAME_TAG] = name or f"{cluster}-{role}"
    tags.update(lookup_tags(cluster, role))
    value = capa_role_value or capa_role(role)
    if value is not None:
        tags[ROLE_TAG] = value
    else:
        tags.pop(ROLE_TAG, None)
    if store_uid:
        tags[STORE_TAG] = store_uid
    if shared_with_cloud_provider:
        tags[cloud_provider_tag_key(cluster)] = OWNED
    return tags


def missing_tags(observed: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str]:
    """Desired tags absent or different on the resource; tags the resource has beyond these are left alone."""
    return {k: v for k, v in desired.items() if observed.get(k) != v}


def owning_cluster(tags: Mapping[str, str]) -> str | None:
    """The cluster a resource is owned by, from its owned tag."""
    for key, value in tags.items():
        if key.startswith(CLUSTER_TAG_PREFIX) and value == OWNED:
            return key.removeprefix(CLUSTER_TAG_PREFIX)
    return None


def store_of(tags: Mapping[str, str]) -> str | None:
    """The uid of the capa-py store that created a resource, from its store tag."""
    return tags.get(STORE_TAG)


def foreign_store(tags: Mapping[str, str], store_uid: str) -> str | None:
    """Why a resource owned by a cluster is not this store's: ``"<uid>"`` of the other store, ``""`` when
    it carries no capa-py store tag; None when it is this store's."""
    other = store_of(tags)
    if other == store_uid:
        return None
    return other or ""


def tagging_store_uid(annotations: Mapping[str, str], store_uid: str) -> str:
    """The store uid an object's AWS resources carry: the one its move recorded, else its store's."""
    return annotations.get(STORE_UID_ANNOTATION) or store_uid
