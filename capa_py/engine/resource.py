"""The resource class contract: what a module in ``resources/`` declares and implements.

A resource class states facts (its :class:`~capa_py.engine.traits.Traits`, the AWS create operation
behind them) and implements the calls: create, describe by id / by tags / by key, tag, update of mutable
attributes, delete. It holds no strategy logic: the engine decides when to find, create, record, tag or
roll back. Every call goes through :class:`~capa_py.aws.session.AWSClient` (classified errors, retries,
accounting).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from capa_py.aws.session import AWSClients
from capa_py.engine.traits import Traits


@dataclass
class Observed:
    """What AWS says about one resource."""

    id: str
    tags: dict[str, str] = field(default_factory=dict)
    state: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    stale: bool = False
    """Set by the engine when an update changed the resource in ways this observation does not show: it is
    then not served from the shared observations (the next reconcile describes it again)."""


@dataclass(frozen=True)
class Mismatch:
    """An immutable attribute whose value on a found resource differs from the desired one."""

    attribute: str
    """The attribute as AWS names it (``cidrBlock``, ``availabilityZone``)."""
    wanted: str
    found: str


def compare(pairs: Mapping[str, tuple[Any, Any]]) -> list[Mismatch]:
    """``{"cidrBlock": (wanted, found)}`` → the mismatches; a found value of None (not reported by the
    endpoint) cannot be compared and is skipped."""
    return [
        Mismatch(attribute, str(wanted), str(found))
        for attribute, (wanted, found) in pairs.items()
        if found is not None and wanted is not None and str(wanted) != str(found)
    ]


D = TypeVar("D")


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    """``{"k": "v"}`` → ``[{"Key": "k", "Value": "v"}]``, sorted for stable requests."""
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def tag_dict(tags: list[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in tags or []}


def tag_filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """EC2 ``Filters`` matching every given tag exactly."""
    return [{"Name": f"tag:{k}", "Values": [v]} for k, v in sorted(tags.items())]


class ResourceClass(ABC, Generic[D]):
    """Base of every resource class. ``D`` is the desired-state dataclass the class creates from."""

    kind: ClassVar[str]
    """Short name used in status, logs and the CLI (``vpc``, ``nat-gateway``)."""
    service: ClassVar[str]
    """botocore service name (``ec2``, ``elbv2``)."""
    create_operation: ClassVar[str]
    """The AWS operation the traits describe (``CreateVpc``)."""
    traits: ClassVar[Traits]
    deletion_is_slow: ClassVar[bool] = False
    """Whether deleting takes minutes in AWS (NAT gateways): callers requeue instead of blocking."""
    freshness: ClassVar[float] = 60.0
    """How long (seconds) an observation of a ready resource of this class may be reused instead of
    describing it again (:mod:`capa_py.aws.observations`); drift is noticed within this bound, and
    controllers resync less often than that."""
    reads_within: ClassVar[str | None] = None
    """The kind whose describe also reports this kind's resources (a route table's routes and
    associations, an internet gateway's attachments): :meth:`describe_many` may be given recent
    observations of it to read from instead of describing those again."""
    create_refuses_taken_key: ClassVar[bool] = False
    """Whether the create call itself refuses a natural key already taken (``AlreadyExists``) and then
    makes nothing, on every endpoint (Secrets Manager's ``CreateSecret`` of an existing name:
    ``ResourceExistsException``), and the desired state names the key of the role's only resource. The
    engine then creates first and looks the key up only when the create is refused: a lookup before the
    create could only find what the refusal finds anyway."""
    id_is_key: ClassVar[bool] = False
    """Whether the resource's id is its natural key (a secret's name), so that a recorded id also names
    any replacement of the resource: a delete by the recorded id needs no describe before it, and its
    NotFound means done."""
    tracks_updates: ClassVar[bool] = False
    """Whether :meth:`update` writes every change it makes into the observation it was given (so the
    engine may keep serving it); otherwise an update that changed something makes it stale."""

    def __init__(self, aws: AWSClients) -> None:
        self.aws = aws

    # -- required calls -----------------------------------------------------------------------------
    @abstractmethod
    def create(self, desired: D, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        """Create the resource. ``tags`` is given only when the class tags on create; ``token`` only
        when the class takes a client token."""

    @abstractmethod
    def describe_by_id(self, resource_id: str) -> Observed | None:
        """The resource, or None when it does not exist (or is deleted/terminated)."""

    @abstractmethod
    def delete(self, resource_id: str) -> None:
        """Start deleting; NotFound means already gone and is not an error for callers."""

    # -- optional calls, by trait -------------------------------------------------------------------
    def describe_by_tags(self, tags: Mapping[str, str], desired: D | None) -> list[Observed]:
        """Live resources carrying every tag in ``tags`` (taggable classes)."""
        raise NotImplementedError(f"{self.kind} cannot be found by tags")

    def describe_by_key(self, desired: D) -> Observed | None:
        """The resource holding the natural key of ``desired`` (natural-key classes)."""
        raise NotImplementedError(f"{self.kind} has no natural key")

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        """Add (or overwrite) tags after creation (taggable classes)."""
        raise NotImplementedError(f"{self.kind} cannot be tagged")

    def update(self, observed: Observed, desired: D) -> bool:
        """Bring mutable attributes to the desired state; returns whether anything changed."""
        return False

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        """Several resources by id, in as few calls as the API allows; ids that do not exist are left
        out (never an error for the others). ``within``: observations of :attr:`reads_within` made moments
        ago, read instead of described again. The default asks one by one."""
        found: dict[str, Observed] = {}
        for resource_id in resource_ids:
            observed = self.describe_by_id(resource_id)
            if observed is not None:
                found[resource_id] = observed
        return found

    def describe_candidates(self, desired: D) -> list[Observed]:
        """Resources that may be the result of an interrupted create of ``desired`` (no tag, token or
        key to find it by): those matching its attributes that nothing else claims."""
        return []

    def mismatches(self, observed: Observed, desired: D) -> list[Mismatch]:
        """The immutable attributes of a found resource (by tags, key or intent, not yet recorded) that
        differ from ``desired``: the engine refuses to adopt it when there is any. Only attributes the
        describe reports are compared; the default compares nothing."""
        return []

    def parent_of(self, desired: D) -> str | None:
        """The id of the resource ``desired`` lives in, when nothing but its creator can have put it there:
        a subnet's VPC, a NAT gateway's subnet, a route's table. When this process created that parent, the
        engine answers "does one exist already?" from what it created since, without a Describe. None
        (the default) when the class's identity reaches beyond a parent (an account-wide name)."""
        return None

    def made_after(self, desired: D) -> str | None:
        """The resource (the cluster's VPC) that ``desired``'s kind is only ever created after, for the same
        cluster, and deleted before (an internet gateway, a NAT gateway's elastic IP). When this process
        created that one moments ago — its own lookup by tags had found none of the cluster's — no
        resource of this kind can carry the cluster's tags but what this process made since: the lookup
        by tags is answered without a Describe, as inside a :meth:`parent_of`. None (the default): ask."""
        return None

    def creates_first_in(self, desired: D) -> str | None:
        """The resource (a VPC) that makes the create of ``desired`` safe to try before any lookup when
        this process has just created it: the create refuses a taken key (``AlreadyExists``), or answers
        a request with the very same settings with the resource that has them, and nothing but this
        process can have put one with those settings there. None (the default): look up first."""
        return None

    def is_ready(self, observed: Observed) -> bool:
        """Whether the resource is usable (a NAT gateway is ``available``, an instance ``running``)."""
        return True

    def key_of(self, desired: D) -> str:
        """A readable natural key or description of ``desired`` for logs and intents."""
        return repr(desired)

    def fingerprint(self, desired: D) -> dict[str, str]:
        """The request attributes an intent record keeps (never secrets or user data)."""
        return {"key": self.key_of(desired)}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kind={self.kind}>"
