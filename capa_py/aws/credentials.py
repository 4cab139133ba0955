"""Credentials other than the controller's own: a static access key, and roles assumed with STS.

An AWSCluster's ``identityRef`` (:mod:`capa_py.api.aws_identity`) names whose credentials its controllers
use. This module knows nothing of the identity objects; it turns what they say into botocore credentials:

* :class:`StaticKey` — an access key (with a session token when the key is temporary), as a static
  identity's Secret holds it;
* :func:`assume_role` — the credentials of ``AssumeRole`` called through an STS client of the source
  identity (so roles chain: the source may itself be an assumed role), with the external id, session
  policy and policy ARNs of the role identity. They are :class:`~botocore.credentials.RefreshableCredentials`:
  botocore's signer calls ``AssumeRole`` again before they expire, so a long reconcile never signs with
  expired credentials.

:func:`botocore_session` makes a botocore session whose only credentials are the ones given (no
environment, profile or instance role can stand in for them).

Secrets never leave this module in a log line or a ``repr``: only the access key id's last four characters,
the role ARN, the session name and the expiry are logged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import botocore.session
from botocore.credentials import CredentialProvider, CredentialResolver, Credentials, RefreshableCredentials
from botocore.utils import parse_timestamp

from capa_py.logging import get_logger

_log = get_logger("aws.credentials")

SESSION_NAME_PREFIX = "capa-py-"
ADVISORY_REFRESH = 15 * 60.0
"""botocore's own advisory refresh window, in seconds (shortened for short sessions: see :func:`_windows`)."""
MANDATORY_REFRESH = 10 * 60.0


def key_hint(access_key_id: str) -> str:
    """What a log line may say of an access key id: its last four characters."""
    return f"...{access_key_id[-4:]}" if len(access_key_id) > 4 else "..."


@dataclass(frozen=True)
class StaticKey:
    """An access key as a static identity's Secret holds it; the secret parts stay out of ``repr``."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def credentials(self) -> Credentials:
        return Credentials(self.access_key_id, self.secret_access_key, self.session_token, method="static")


@dataclass(frozen=True)
class RoleRequest:
    """What an ``AssumeRole`` call asks for (a role identity's spec)."""

    role_arn: str
    session_name: str
    duration_seconds: int = 900
    external_id: str | None = None
    inline_policy: str | None = None
    policy_arns: tuple[str, ...] = ()

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "RoleArn": self.role_arn,
            "RoleSessionName": self.session_name,
            "DurationSeconds": self.duration_seconds,
        }
        if self.external_id:
            params["ExternalId"] = self.external_id
        if self.inline_policy:
            params["Policy"] = self.inline_policy
        if self.policy_arns:
            params["PolicyArns"] = [{"arn": arn} for arn in self.policy_arns]
        return params


AssumeRoleCall = Callable[..., dict[str, Any]]
"""``call(**params)`` calls STS ``AssumeRole`` through a client made with the source identity's credentials
(counted, limited and retried as every call is): ``functools.partial(sts.call, "AssumeRole")``. The caller
names the operation, so the module that makes the call declares its IAM action."""


def _windows(duration_seconds: int) -> tuple[float, float]:
    """(advisory, mandatory) refresh windows: botocore's (15 and 10 minutes) would make a 15-minute session
    refresh on every request, so a short session refreshes in its last third and must in its last sixth."""
    return min(ADVISORY_REFRESH, duration_seconds / 3), min(MANDATORY_REFRESH, duration_seconds / 6)


def assume_role(
    call: AssumeRoleCall,
    request: RoleRequest,
    *,
    time_fetcher: Callable[[], datetime] | None = None,
) -> RefreshableCredentials:
    """Assume the role now (a refusal raises the classified AWS error) and return credentials that assume
    it again before they expire."""

    def fetch() -> dict[str, Any]:
        response = call(**request.params())
        issued = response["Credentials"]
        expiry = issued["Expiration"]
        _log.info(
            "assumed role",
            role_arn=request.role_arn,
            session_name=request.session_name,
            access_key=key_hint(str(issued["AccessKeyId"])),
            expires=expiry.isoformat() if isinstance(expiry, datetime) else str(expiry),
        )
        return {
            "access_key": issued["AccessKeyId"],
            "secret_key": issued["SecretAccessKey"],
            "token": issued["SessionToken"],
            "expiry_time": expiry.isoformat() if isinstance(expiry, datetime) else str(expiry),
        }

    first = fetch()
    advisory, mandatory = _windows(request.duration_seconds)
    extra: dict[str, Any] = {} if time_fetcher is None else {"time_fetcher": time_fetcher}
    return RefreshableCredentials(
        access_key=first["access_key"],
        secret_key=first["secret_key"],
        token=first["token"],
        expiry_time=parse_timestamp(first["expiry_time"]),
        refresh_using=fetch,
        method="assume-role",
        advisory_timeout=int(advisory),
        mandatory_timeout=int(mandatory),
        **extra,
    )


class _Only(CredentialProvider):
    METHOD = "capa-py-identity"

    def __init__(self, credentials: Credentials) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials


def botocore_session(credentials: Credentials) -> botocore.session.Session:
    """A botocore session whose credentials are ``credentials`` and nothing else: no environment variable,
    profile or instance role of the process is consulted."""
    session = botocore.session.get_session()
    session.register_component("credential_provider", CredentialResolver([_Only(credentials)]))
    return session
