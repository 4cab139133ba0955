"""What the AWS kinds share: their API version, their finalizers, and the records capa-py's strategy
engine keeps in their status (every AWS resource it created, and the intents it wrote before creates that
have no tag, token or natural key)."""

from __future__ import annotations

from pydantic import Field

from capa_py.api.meta import KubeModel, Time

INFRA_API_VERSION = "infrastructure.cluster.x-k8s.io/v1beta2"
AWSCLUSTER_FINALIZER = "awscluster.infrastructure.cluster.x-k8s.io"
AWSMACHINE_FINALIZER = "awsmachine.infrastructure.cluster.x-k8s.io"


class RecordedResource(KubeModel):
    """An AWS resource the engine created or adopted, recorded right after its create returned."""

    kind: str
    id: str
    strategy: str | None = None
    tags_complete: bool = True
    created_at: Time | None = None


class IntentRecord(KubeModel):
    """Written before a create that has no tag, token or natural key to find its result again."""

    kind: str
    started_at: Time
    fingerprint: str
    request: dict[str, str] = Field(default_factory=dict)
    examined_at: Time | None = None
    """When a reconcile first looked for the resource the interrupted create may have made."""
    seen: list[str] = Field(default_factory=list)
    """The candidates that first examination saw; later ones consider no other (a look-alike appearing
    later was not made by the interrupted create)."""
