"""The security groups service: the control plane's, the nodes', and the load balancers' group shared with
the cloud provider. While the cluster has a bastion host, the control plane and the nodes allow SSH from
the bastion's group (:mod:`controllers.services.bastion`, which ensures that group first), as Cluster API
Provider AWS's do; the rule goes when the bastion is disabled.

:func:`reconcile_security_groups` first ensures the groups themselves (found, adopted or re-created after
drift), rules left alone, so that rules name the groups' current ids; then the rules of the control plane
and the nodes, on the groups just observed (the shared group is created and deleted only). The groups go
to ``status.network.securityGroups``, where machines find them. :data:`DELETION` deletes the groups.
"""

from __future__ import annotations

from capa_py.api.aws import SecurityGroupStatus
from capa_py.engine.resource import Observed
from controllers.services.cluster_scope import API_SERVER_PORT, ClusterScope, Deletion, roles
from resources.security_group import SELF, IngressRule, SecurityGroupDesired

SECURITY_GROUPS_READY = "ClusterSecurityGroupsReady"
CONDITIONS = (SECURITY_GROUPS_READY,)
SG_ROLES = ("controlplane", "node", "lb")
_PURPOSE = {"controlplane": "control plane", "node": "nodes", "lb": "load balancers (cloud provider)"}


def security_group_rules(ids: dict[str, str]) -> dict[str, tuple[IngressRule, ...]]:
    """Each group's ingress rules, given the ids of the groups they name."""
    node = ids.get("node")
    controlplane = ids.get("controlplane")
    bastion = ids.get("bastion")
    rules: dict[str, list[IngressRule]] = {role: [] for role in SG_ROLES}
    rules["controlplane"] += [
        IngressRule(
            "tcp", API_SERVER_PORT, API_SERVER_PORT, cidr_block="0.0.0.0/0", description="Kubernetes API"
        ),
        IngressRule("tcp", 2379, 2380, source_group_id=SELF, description="etcd"),
    ]
    if node:
        rules["controlplane"].append(
            IngressRule("tcp", 10250, 10250, source_group_id=node, description="kubelet")
        )
    rules["node"] += [
        IngressRule("tcp", 30000, 32767, cidr_block="0.0.0.0/0", description="NodePort services"),
        IngressRule("-1", source_group_id=SELF, description="node to node"),
    ]
    if controlplane:
        rules["node"].append(
            IngressRule("tcp", 10250, 10250, source_group_id=controlplane, description="kubelet")
        )
    if bastion:
        for role in ("controlplane", "node"):
            rules[role].append(
                IngressRule("tcp", 22, 22, source_group_id=bastion, description="SSH from the bastion")
            )
    return {role: tuple(r) for role, r in rules.items()}


def _desired(
    scope: ClusterScope, role: str, rules: tuple[IngressRule, ...], manage_rules: bool = True
) -> SecurityGroupDesired:
    vpc_id = scope.network.vpc_id
    assert vpc_id is not None
    cluster = scope.cluster_name
    return SecurityGroupDesired(
        vpc_id, f"{cluster}-{role}", f"{cluster} {_PURPOSE[role]}", rules, manage_rules
    )


def reconcile_security_groups(scope: ClusterScope) -> None:
    assert scope.network.vpc_id is not None
    rc = scope.resources.security_group
    scope.prefetch(rc, [f"sg-{role}" for role in SG_ROLES])
    observed: dict[str, Observed] = {}
    for role in SG_ROLES:
        observed[role] = scope.ensure(
            rc, f"sg-{role}", _desired(scope, role, (), manage_rules=False), shared=role == "lb"
        )
    ids = {role: o.id for role, o in observed.items()}
    bastion = scope.network.security_groups.get("bastion")
    if bastion is not None:  # ensured in this pass, before these groups
        ids["bastion"] = bastion.id
    rules = security_group_rules(ids)
    for role in SG_ROLES:
        if role != "lb":  # shared with the cloud provider: create/delete only
            scope.engine.update(rc, observed[role], _desired(scope, role, rules[role]))
        scope.network.security_groups[role] = SecurityGroupStatus(
            id=observed[role].id, name=f"{scope.cluster_name}-{role}"
        )
    scope.record_network()


DELETION = (
    Deletion("DeleteSecurityGroups", lambda r: r.security_group, roles(*(f"sg-{r}" for r in SG_ROLES))),
)
