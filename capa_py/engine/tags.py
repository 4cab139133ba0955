"""Tag conventions, as Cluster API Provider AWS uses them.

* owned: ``sigs.k8s.io/cluster-api-provider-aws/cluster/<cluster>=owned`` on everything we manage;
* shared with the in-cluster cloud provider: also ``kubernetes.io/cluster/<cluster>=owned``; such
  resources are create/delete only (ongoing management is handed off to the cloud provider);
* unmanaged (given by the user): never tagged, modified or deleted by us;
* plus ``sigs.k8s.io/cluster-api-provider-aws/role=<role>`` and ``Name=<cluster>-<role>``.

Lookups by tags use only the owned and role tags — never user tags, which users change — so additional
tags can never make a resource invisible to the reconciler (and so duplicate it).
"""

from __future__ import annotations

from collections.abc import Mapping

OWNED = "owned"
SHARED = "shared"
CLUSTER_TAG_PREFIX = "sigs.k8s.io/cluster-api-provider-aws/cluster/"
CLOUD_PROVIDER_TAG_PREFIX = "kubernetes.io/cluster/"
ROLE_TAG = "sigs.k8s.io/cluster-api-provider-aws/role"
NAME_TAG = "Name"


def cluster_tag_key(cluster: str) -> str:
    return CLUSTER_TAG_PREFIX + cluster


def cloud_provider_tag_key(cluster: str) -> str:
    return CLOUD_PROVIDER_TAG_PREFIX + cluster


def lookup_tags(cluster: str, role: str) -> dict[str, str]:
    """The tags a managed resource is found by: owned + role."""
    return {cluster_tag_key(cluster): OWNED, ROLE_TAG: role}


def managed_tags(
    cluster: str,
    role: str,
    name: str | None = None,
    additional: Mapping[str, str] | None = None,
    shared_with_cloud_provider: bool = False,
) -> dict[str, str]:
    """Every tag a managed resource carries. Managed keys win over additional tags of the same key."""
    tags = dict(additional or {})
    tags[NAME_TAG] = name or f"{cluster}-{role}"
    tags.update(lookup_tags(cluster, role))
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
