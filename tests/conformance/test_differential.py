"""capa serve against the real kube-apiserver: each scenario runs on both and what a client observes must
agree, or be a known difference listed (with its reason) in ``KNOWN_DIFFERENCES`` and in the docs' table
(docs/conformance.md). A known difference that stops differing fails too, so the list never goes stale."""

from __future__ import annotations

import pytest

from tests.conformance.endpoints import Endpoint
from tests.conformance.scenarios import SCENARIOS
from tests.conformance.support import RESULTS

# scenario -> (the steps that differ, why)
KNOWN_DIFFERENCES: dict[str, tuple[frozenset[str], str]] = {
    "field selectors": (
        frozenset({"a field of the content"}),
        "capa serve selects on any field path (the API server only on metadata.name and metadata.namespace "
        "for most kinds, 400 otherwise): a superset, which capa's own tools use",
    ),
    "a malformed resourceVersion": (
        frozenset({"get", "watch"}),
        "kube-apiserver answers a get or a watch naming a resourceVersion that is no number 500 "
        "InternalError (a list 400); capa serve answers each 400 BadRequest: the client's error is no "
        "internal error",
    ),
    "patches kube-apiserver answers 500": (
        frozenset(
            {
                "strategic: unknown $patch",
                "strategic: $setElementOrder not a list",
                "apply: a field of the wrong type",
            }
        ),
        "kube-apiserver answers a strategic merge directive of the wrong shape and an apply patch with a "
        "field of the wrong type 500 InternalError; capa serve answers 400 BadRequest and 422 Invalid, the "
        "client's error being no internal error",
    ),
    "an object over the storage limit": (
        frozenset({"create"}),
        "kube-apiserver answers etcd's refusal of an object over its request limit (1.5 MiB) 500 "
        "InternalError; capa serve answers 413 RequestEntityTooLarge with the same message and stores "
        "nothing",
    ),
}


def differing(left: dict[str, object], right: dict[str, object]) -> set[str]:
    return {key for key in left.keys() | right.keys() if left.get(key) != right.get(key)}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_capa_serve_answers_as_kube_apiserver_does(
    scenario: str, capa_serve: Endpoint, kube_apiserver: Endpoint, namespace: str
) -> None:
    run = SCENARIOS[scenario]
    ours = run(capa_serve, namespace)
    theirs = run(kube_apiserver, namespace)
    steps = differing(ours, theirs)
    known = KNOWN_DIFFERENCES.get(scenario)
    if known is None:
        RESULTS.rows[scenario] = "same" if not steps else "DIFFERENT: " + ", ".join(sorted(steps))
        detail = "\n".join(
            f"  {s}:\n    capa serve:     {ours.get(s)!r}\n    kube-apiserver: {theirs.get(s)!r}"
            for s in sorted(steps)
        )
        assert not steps, f"capa serve differs from kube-apiserver in {scenario!r}:\n{detail}"
        return
    expected, reason = known
    RESULTS.rows[scenario] = f"known difference ({', '.join(sorted(expected))}): {reason}"
    assert steps == expected, (
        f"{scenario!r}: the steps that differ changed: now {sorted(steps)}, listed {sorted(expected)}"
    )
