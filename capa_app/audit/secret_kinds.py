"""Secrets Manager secrets and Parameter Store parameters that carry a cluster's tag: the bootstrap data a
machine's create stored.

A machine's secrets live from just before its instance is launched until it runs (or the machine is
deleted); one left behind (a controller stopped for good in between, a machine's objects removed from the
store) holds a cluster's join token, so the audit lists every secret of the region with its tags
(``ListSecrets`` returns them, paginated) in both discovery modes, and keeps the owned ones. Their ids are
their names, as the resource class (:class:`resources.secret.Secret`) names them.

Parameters (``secureSecretsBackend: ssm-parameter-store``) likewise: every ``SecureString`` parameter of the
region (``DescribeParameters`` filtered on the type, paginated; it returns no tags, so one
``ListTagsForResource`` per parameter), in both modes. ``DescribeParameters``' ``tag:<key>`` filter needs
the cluster's name in the key, which an audit of every cluster does not know, and the tagging API's hits
would make the two modes differ. Their ids are their names (:class:`resources.parameter.Parameter`).
"""

from __future__ import annotations

from capa_app.audit.model import Found
from capa_py.aws.session import AWSClients
from resources.parameter import Parameter
from resources.secret import Secret


def describe_secrets(aws: AWSClients) -> list[Found]:
    """Every live secret of the region, with its tags (filtering to the owned ones is the caller's)."""
    return [
        Found(
            aws.region,
            Secret.kind,
            observed.id,
            observed.tags,
            state=observed.state,
            created_at=observed.created_at,
            name=observed.attributes.get("arn"),
        )
        for observed in Secret(aws).listed()
    ]


def describe_parameters(aws: AWSClients) -> list[Found]:
    """Every ``SecureString`` parameter of the region, with its tags (filtering is the caller's)."""
    return [
        Found(
            aws.region,
            Parameter.kind,
            observed.id,
            observed.tags,
            state=observed.state,
            created_at=observed.created_at,
            name=observed.attributes.get("arn"),
        )
        for observed in Parameter(aws).listed()
    ]
