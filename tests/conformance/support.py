"""What the differential suite shares: the example manifest, installing capa-py's CRDs on a real API server,
and the results table printed at the end of the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "aws-cluster-machines.yaml"


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
