"""Derived names of MachineSets and Machines, and which objects a set may take for its own.

The 5 characters after a set's or a Machine's name look random but are not: a set's come from its
deployment's uid and template hash, a Machine's from its set's uid and the first slot (0, 1, ...) no Machine
of the set holds. Every writer asking for the same thing asks for the same name, so a writer whose view lags
is refused (``AlreadyExists``) and takes what another made instead of making a second one.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator

from capa_py.api.machinesets import REVISION_ANNOTATION, MachineDeployment, MachineSet, encode_digest
from capa_py.api.meta import KubeObject, OwnerReference

_MAX_LABEL_VALUE = 63


def label_value(name: str) -> str:
    """A name as a label value: itself when it fits (at most 63 characters), else a hash of it."""
    if len(name) <= _MAX_LABEL_VALUE:
        return name
    return "hash_" + encode_digest(hashlib.sha256(name.encode()).digest(), 20) + "_z"


def derived_suffix(*parts: str, length: int = 5) -> str:
    """Name characters that look random but follow from ``parts``: every writer asking for the same thing
    asks for the same name."""
    return encode_digest(hashlib.sha256("/".join(parts).encode()).digest(), length)


def controller_of(obj: KubeObject) -> OwnerReference | None:
    return next((r for r in obj.metadata.owner_references if r.controller), None)


def controlled_by(obj: KubeObject, owner: KubeObject) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.uid == owner.metadata.uid


def revision_of(ms: MachineSet) -> int:
    """The set's ``machinedeployment.clusters.x-k8s.io/revision``, 0 when missing or not a number."""
    try:
        return int(ms.metadata.annotations.get(REVISION_ANNOTATION, "0"))
    except ValueError:
        return 0


def set_suffix(md: MachineDeployment, digest: str, attempt: int = 0) -> str:
    """The 5 characters of the name of the deployment's set for the template hash ``digest``; another
    ``attempt`` only when the first name is held by a set being deleted, or not this template's."""
    return derived_suffix(md.metadata.uid or md.name, digest, *([str(attempt)] if attempt else []))


def free_machine_names(ms: MachineSet, taken: set[str]) -> Iterator[str]:
    """The names of the set's free slots, first slot first: what every writer asks for next."""
    for slot in itertools.count():
        name = f"{ms.name}-{derived_suffix(ms.metadata.uid or ms.name, str(slot))}"
        if name not in taken:
            yield name


def clone_of(infra: KubeObject, ms: MachineSet, name: str) -> bool:
    """Whether ``infra`` is the infrastructure clone of the set's Machine ``name`` (so the set adopts it
    rather than making another): owned by the set, or already by that Machine."""
    return any(
        r.uid == ms.metadata.uid or (r.kind == "Machine" and r.name == name)
        for r in infra.metadata.owner_references
    )
