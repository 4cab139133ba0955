"""Secrets Manager secrets that carry a cluster's tag: the bootstrap data a machine's create stored.

A machine's secrets live from just before its instance is launched until it runs (or the machine is
deleted); one left behind (a controller stopped for good in between, a machine's objects removed from the
store) holds a cluster's join token, so the audit lists every secret of the region with its tags
(``ListSecrets`` returns them, paginated) in both discovery modes, and keeps the owned ones. Their ids are
their names, as the resource class (:class:`resources.secret.Secret`) names them.
"""

from __future__ import annotations

from capa_app.audit.model import Found
from capa_py.aws.session import AWSClients
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
