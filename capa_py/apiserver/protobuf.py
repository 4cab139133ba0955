"""Request bodies in Kubernetes' protobuf form (``Content-Type: application/vnd.kubernetes.protobuf``).

kubectl 1.32 and later send ``create namespace``, ``create configmap`` and ``create secret`` bodies, and the
reviews of ``auth can-i`` and ``auth whoami``, only in this form, and do not retry with JSON when a server
answers 415, so ``capa serve`` decodes them for those kinds, as the API server does: the magic ``k8s\\0``,
then a ``runtime.Unknown`` envelope whose ``raw`` holds the object
(:mod:`capa_py.apiserver.proto.kubernetes_pb2`). The object becomes the JSON document a JSON client would
have sent, and from there a write is handled as any other. Responses stay JSON (kubectl accepts JSON as
well). A protobuf body for any other kind is a 415.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import DecodeError, Message

from capa_py.api.meta import KubeObject
from capa_py.apiserver.proto import kubernetes_pb2 as pb
from capa_py.apiserver.status import ApiError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
MESSAGES: dict[tuple[str, str], type[Message]] = {
    ("v1", "Namespace"): pb.Namespace,
    ("v1", "ConfigMap"): pb.ConfigMap,
    ("v1", "Secret"): pb.Secret,
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): pb.SelfSubjectAccessReview,
    ("authentication.k8s.io/v1", "SelfSubjectReview"): pb.SelfSubjectReview,
}


_ZERO_TIMES = (0, int(datetime(1, 1, 1, tzinfo=UTC).timestamp()))
"""Seconds a zero ``metav1.Time`` travels as: what JSON leaves out."""


def _time(value: pb.Time) -> str | None:
    if value.seconds in _ZERO_TIMES and not value.nanos:
        return None
    return datetime.fromtimestamp(value.seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _base64(values: Any) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in values.items()}


def _set(doc: dict[str, Any], message: Message, *names: str) -> None:
    """Fields Go's JSON omits when empty (``omitempty``: "", 0, false), though protobuf carries them."""
    for name in names:
        value = getattr(message, name)
        if message.HasField(name) and value:
            doc[name] = value


def _set_present(doc: dict[str, Any], message: Message, *names: str) -> None:
    """Fields JSON carries whenever they are set, even to false or 0 (pointers in Go)."""
    for name in names:
        if message.HasField(name):
            doc[name] = getattr(message, name)


def _metadata(meta: pb.ObjectMeta) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    _set(doc, meta, "name", "generateName", "namespace", "uid", "resourceVersion", "generation")
    _set_present(doc, meta, "deletionGracePeriodSeconds")
    for name in ("creationTimestamp", "deletionTimestamp"):
        stamp = _time(getattr(meta, name)) if meta.HasField(name) else None
        if stamp is not None:
            doc[name] = stamp
    if meta.labels:
        doc["labels"] = dict(meta.labels)
    if meta.annotations:
        doc["annotations"] = dict(meta.annotations)
    if meta.ownerReferences:
        references = []
        for ref in meta.ownerReferences:
            entry: dict[str, Any] = {"apiVersion": ref.apiVersion, "kind": ref.kind}
            entry |= {"name": ref.name, "uid": ref.uid}
            _set_present(entry, ref, "controller", "blockOwnerDeletion")
            references.append(entry)
        doc["ownerReferences"] = references
    if meta.finalizers:
        doc["finalizers"] = list(meta.finalizers)
    return doc


def _selector(selector: pb.SelectorAttributes) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    _set(doc, selector, "rawSelector")
    if selector.requirements:
        doc["requirements"] = [
            {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
            for r in selector.requirements
        ]
    return doc


def _access_review_spec(spec: pb.SelfSubjectAccessReviewSpec) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if spec.HasField("resourceAttributes"):
        attributes = spec.resourceAttributes
        resource: dict[str, Any] = {}
        _set(resource, attributes, "namespace", "verb", "group", "version", "resource", "subresource", "name")
        for name in ("fieldSelector", "labelSelector"):
            if attributes.HasField(name):
                resource[name] = _selector(getattr(attributes, name))
        doc["resourceAttributes"] = resource
    if spec.HasField("nonResourceAttributes"):
        doc["nonResourceAttributes"] = {}
        _set(doc["nonResourceAttributes"], spec.nonResourceAttributes, "path", "verb")
    return doc


def _document(message: Message) -> dict[str, Any]:
    doc: dict[str, Any] = {"metadata": _metadata(message.metadata)}  # type: ignore[attr-defined]
    if isinstance(message, pb.Namespace):
        if message.HasField("spec"):
            doc["spec"] = {"finalizers": list(message.spec.finalizers)}
        if message.HasField("status") and message.status.phase:
            doc["status"] = {"phase": message.status.phase}
    elif isinstance(message, pb.ConfigMap):
        if message.data:
            doc["data"] = dict(message.data)
        if message.binaryData:
            doc["binaryData"] = _base64(message.binaryData)
        _set_present(doc, message, "immutable")
    elif isinstance(message, pb.Secret):
        if message.data:
            doc["data"] = _base64(message.data)
        if message.stringData:
            doc["stringData"] = dict(message.stringData)
        _set(doc, message, "type")
        _set_present(doc, message, "immutable")
    elif isinstance(message, pb.SelfSubjectAccessReview):
        doc["spec"] = _access_review_spec(message.spec)
    return doc


def decode(raw: bytes, model: type[KubeObject]) -> dict[str, Any]:
    """The JSON document a protobuf body of ``model`` holds; 415 for a kind not decoded, 400 for a body
    that is not a Kubernetes protobuf message (the API server's words)."""
    return decode_kind(raw, model.API_VERSION, model.KIND)


def decode_kind(raw: bytes, api_version: str, kind: str) -> dict[str, Any]:
    """:func:`decode` for a kind named by its ``apiVersion`` and ``kind``."""
    message_type = MESSAGES.get((api_version, kind))
    if message_type is None:
        raise ApiError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json",
        )
    if not raw.startswith(MAGIC):
        raise ApiError(
            400,
            f"the object provided is unrecognized (must be of type {kind}): provided data does not appear "
            f"to be a protobuf message, expected prefix [107 56 115 0] ({raw[:1024].hex()})",
        )
    version = api_version.rpartition("/")[2]
    try:
        envelope = pb.Unknown.FromString(raw[len(MAGIC) :])
        message = message_type.FromString(envelope.raw)
    except DecodeError as exc:
        raise ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {exc}') from exc
    doc = _document(message)
    if envelope.typeMeta.apiVersion:
        doc["apiVersion"] = envelope.typeMeta.apiVersion
    if envelope.typeMeta.kind:
        doc["kind"] = envelope.typeMeta.kind
    return doc
