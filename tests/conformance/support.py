"""What the differential suite shares: the example manifest, installing capa-py's CRDs on a real API server,
and the results table printed at the end of the run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from capa_py.manifests.crds import crds
from tests.conformance.endpoints import Endpoint

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "aws-cluster.yaml"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install_crds(ep: Endpoint, timeout: float = 60.0) -> None:
    """capa-py's CRDs (``capa manifests crds``) on the server, each Established (an existing one is kept)."""
    documents = crds()
    for document in documents:
        reply = ep.call("POST", CRD_PATH, document)
        if reply.status not in (201, 409):
            raise RuntimeError(f"creating CRD {document['metadata']['name']}: {reply.status} {reply.body}")
    deadline = time.monotonic() + timeout
    for document in documents:
        name = document["metadata"]["name"]
        while True:
            conditions = (ep.call("GET", f"{CRD_PATH}/{name}").body.get("status") or {}).get(
                "conditions"
            ) or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not Established after {timeout:.0f} s")
            time.sleep(0.1)


@dataclass
class Results:
    """Each scenario's outcome, for the table printed after the run."""

    rows: dict[str, str] = field(default_factory=dict)

    def table(self) -> str:
        width = max((len(name) for name in self.rows), default=10)
        lines = [f"{'scenario'.ljust(width)}  capa serve vs kube-apiserver", f"{'-' * width}  {'-' * 28}"]
        lines += [f"{name.ljust(width)}  {outcome}" for name, outcome in self.rows.items()]
        return "\n".join(lines)


RESULTS = Results()
