"""Describe calls for Auto Scaling groups (a machine pool's), each group turned into a :class:`Found`.

Auto Scaling filters by neither VPC nor (reliably, on every endpoint) tag, so the audit lists every group
of the region once and keeps the owned ones; the groups are parsed by their resource class
(:mod:`resources.listing`). A group's instances carry the ``aws:autoscaling:groupName`` tag AWS adds: while
their group exists they go with it (discovery leaves them out), and deleting the group terminates them.
"""

from __future__ import annotations

from collections.abc import Sequence

from capa_app.audit.model import Found
from capa_py.aws.session import AWSClients
from resources.listing import list_autoscaling_groups

GROUP_NAME_TAG = "aws:autoscaling:groupName"
"""The tag AWS puts on every instance an Auto Scaling group launches."""


def describe_autoscaling_groups(
    aws: AWSClients, *, ids: Sequence[str] | None = None, vpc_ids: Sequence[str] | None = None
) -> list[Found]:
    """Auto Scaling groups: all of them, or those named in ``ids``; none "in VPCs" (a group spans subnets,
    and its instances are what sits in the VPC)."""
    if vpc_ids is not None:
        return []
    return [
        Found(
            aws.region,
            "autoscaling-group",
            observed.id,
            dict(observed.tags),
            state=observed.state,
            created_at=observed.created_at,
            name=observed.id,
            attributes=dict(observed.attributes),
        )
        for observed in list_autoscaling_groups(aws, ids)
    ]
