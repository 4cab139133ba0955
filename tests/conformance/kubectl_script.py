"""One fixed kubectl script, run step by step against one server, and the matrix of how two servers compare.

:func:`run_script` runs every step of :data:`STEPS` with one kubectl binary against one server, each step as
its own kubectl process, in a namespace of the test's own, and returns each step's :class:`Outcome`: the exit
code and the output reduced by :func:`normalise` to what must agree between servers (ages, resourceVersions,
uids, timestamps, temporary file names and server addresses are removed). The steps build on each other as a
user's session would (apply, change, look, delete), but each one changes something no later step looks at
unless it is a step every server must support, so that one step failing does not make later ones differ.

:class:`Matrix` collects a cell per (step, kubectl version): ``same``, ``differs``, ``fails on capa serve``,
``fails on both`` or ``fails on kube-apiserver``, and renders the table for pytest's terminal summary and as
Markdown for docs/conformance.md.
"""

from __future__ import annotations

import copy
import json
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from capa_py.api.registry import REGISTRY
from tests.conformance.endpoints import Endpoint
from tests.conformance.support import EXAMPLE

STEPS = (
    "apply -f",
    "apply --server-side",
    "diff",
    "explain awscluster.spec",
    "get -o wide",
    "get -w",
    "describe",
    "label",
    "annotate",
    "patch --type merge",
    "patch --type json",
    "edit",
    "wait --for",
    "delete --wait",
    "get events",
)
SAME = "same"
DIFFERS = "differs"
FAILS_ON_CAPA = "fails on capa serve"
FAILS_ON_BOTH = "fails on both"
FAILS_ON_KUBE = "fails on kube-apiserver"
STEP_TIMEOUT = 60.0
WATCH_TIMEOUT = 30.0


@dataclass(frozen=True)
class Outcome:
    """What one step showed: its exit code and normalised output."""

    code: int
    stdout: tuple[str, ...]
    stderr: tuple[str, ...]
    ok_codes: frozenset[int] = frozenset({0})

    @property
    def ok(self) -> bool:
        return self.code in self.ok_codes

    def text(self) -> str:
        return "\n".join([f"exit {self.code}", *self.stdout, *(f"stderr: {line}" for line in self.stderr)])


# -- normalising output ------------------------------------------------------------------------------------
_UID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?( [+-]\d{4})?\b")
_AGE = re.compile(r"(?<![\w.-])(\d+(s|m|h|d|y))+(?![\w.-])")
_TEMP = re.compile(r"/\S*/(LIVE|MERGED)-\d+/")
_SERVER = re.compile(r"(https?://)(127\.0\.0\.1|localhost|\[::1\]):\d+")
_RV_LINE = re.compile(r"(resourceVersion|Resource Version|uid|UID|creationTimestamp|Creation Timestamp)\b")
_EDIT_COPY = re.compile(r"-edit-\d+\.yaml")
_KLOG = re.compile(r"^[IWE]\d{4} \d{2}:\d{2}:\d{2}")


def normalise(text: str) -> tuple[str, ...]:
    """The lines of ``text`` as they must agree between servers: without klog lines, lines naming a
    resourceVersion, uid or creation time, and with ages, timestamps, uids, the temporary folders of
    ``kubectl diff`` and server addresses replaced by placeholders; runs of spaces become one."""
    lines: list[str] = []
    for raw in text.splitlines():
        if _KLOG.match(raw) or _RV_LINE.search(raw):
            continue
        line = _TEMP.sub(r"<tmp>/\1/", raw)
        line = _EDIT_COPY.sub("-edit-<n>.yaml", line)
        line = _SERVER.sub(r"\1<server>", line)
        line = _UID.sub("<uid>", line)
        line = _TIME.sub("<time>", line)
        line = _AGE.sub("<age>", line)
        line = re.sub(r"\s+", " ", line).rstrip()
        if line:
            lines.append(line)
    return tuple(lines)


def diff_lines(text: str) -> str:
    """Only the changed lines of a unified diff (the headers name temporary files and times)."""
    kept = [
        line
        for line in text.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---")) and "generation" not in line
    ]
    return "\n".join(kept)


def describe_without_metadata(text: str) -> str:
    """``kubectl describe`` of a custom resource without its ``Metadata:`` block (managed fields, times,
    resourceVersion: the server's bookkeeping, which differs from one server to another)."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("Metadata:"):
            skipping = True
            continue
        if skipping and line.startswith(" "):
            continue
        skipping = False
        kept.append(line)
    return "\n".join(kept)


# -- the manifests the script applies ----------------------------------------------------------------------
def example_in(namespace: str) -> list[dict[str, Any]]:
    """The example manifest's documents, moved into ``namespace``."""
    documents = [doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc]
    for doc in documents:
        doc["metadata"]["namespace"] = namespace
    return documents


def changed_cluster(namespace: str) -> dict[str, Any]:
    """The example's AWSCluster with one tag changed and one more: what ``kubectl diff`` compares. (Only
    mutable fields change: capa serve validates an AWSCluster as capa-py's admission webhook does, which
    refuses a new region.)"""
    cluster = copy.deepcopy(next(d for d in example_in(namespace) if d["kind"] == "AWSCluster"))
    cluster["spec"]["additionalTags"]["team"] = "infra"
    cluster["spec"]["additionalTags"]["stage"] = "test"
    return cluster


def server_side_machine(namespace: str) -> dict[str, Any]:
    """A new AWSMachine, applied server-side (a new object: no other manager owns its fields)."""
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSMachine",
        "metadata": {"name": "demo-worker-2", "namespace": namespace},
        "spec": {"instanceType": "t3.small", "ami": {"id": "ami-785db401"}},
    }


EDITOR = """#!/bin/sh
# Changes one field of the object kubectl edit opened: the instance type.
sed -i 's/instanceType: t3.medium/instanceType: t3.xlarge/' "$1"
"""


def kubeconfig_for(endpoint: Endpoint, path: Path) -> Path:
    """The endpoint's admin kubeconfig (``path`` is unused: both servers come with one)."""
    assert endpoint.kubeconfig is not None, f"{endpoint.name} has no kubeconfig"
    return Path(endpoint.kubeconfig)


# -- running kubectl ---------------------------------------------------------------------------------------
@dataclass
class Kubectl:
    """One kubectl binary against one server, with its own HOME (discovery cache) and kubeconfig."""

    binary: Path
    kubeconfig: Path
    home: Path
    namespace: str
    editor: Path
    workdir: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.kubeconfig),
            "KUBE_EDITOR": str(self.editor),
            "TMPDIR": str(self.workdir),  # where kubectl edit keeps a copy of changes it could not save
        }

    def command(self, *args: str) -> list[str]:
        return [str(self.binary), "--namespace", self.namespace, *args]

    def run(
        self,
        *args: str,
        ok_codes: frozenset[int] = frozenset({0}),
        reduce: Callable[[str], str] = lambda text: text,
    ) -> Outcome:
        try:
            done = subprocess.run(
                self.command(*args),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=STEP_TIMEOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return Outcome(-1, normalise(out), (f"timed out after {STEP_TIMEOUT:.0f} s",), ok_codes)
        return Outcome(
            done.returncode,
            normalise(reduce(self._local(done.stdout))),
            normalise(self._local(done.stderr)),
            ok_codes,
        )

    def _local(self, text: str) -> str:
        """``text`` with this run's working folder (which the manifests are in) named ``<workdir>``."""
        return text.replace(str(self.workdir), "<workdir>")

    def watch_change(self, args: list[str], first: str, change: Callable[[], None], expect: str) -> Outcome:
        """``kubectl get -w``: once a line containing ``first`` shows, ``change`` runs; the watch is stopped
        as soon as a line containing ``expect`` shows (exit code 0 then), else after ``WATCH_TIMEOUT``
        seconds, when kubectl's own request timeout ends it."""
        process = subprocess.Popen(
            self.command(*args, f"--request-timeout={WATCH_TIMEOUT:.0f}s"),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        errors: list[str] = []
        stdout, stderr = process.stdout, process.stderr
        assert stdout is not None
        assert stderr is not None

        def pump() -> None:
            for line in stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        def pump_errors() -> None:
            errors.extend(line.rstrip("\n") for line in stderr)

        readers = [
            threading.Thread(target=pump, daemon=True),
            threading.Thread(target=pump_errors, daemon=True),
        ]
        for reader in readers:
            reader.start()
        seen: list[str] = []
        changed = saw_change = False
        deadline = time.monotonic() + WATCH_TIMEOUT + 10
        try:
            while time.monotonic() < deadline:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    continue
                if line is None:
                    break
                seen.append(line)
                if not changed and first in line:
                    change()
                    changed = True
                elif changed and expect in line:
                    saw_change = True
                    break
        finally:
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=10)
            for reader in readers:
                reader.join(timeout=10)
            stdout.close()
            stderr.close()
        code = 0 if saw_change else process.returncode
        if not saw_change:
            seen.append("(the change was not seen)")
        return Outcome(code, normalise("\n".join(seen)), normalise("\n".join(errors)))


def collection(doc: dict[str, Any]) -> str:
    model = REGISTRY.for_gvk(doc["apiVersion"], doc["kind"])
    group_version = doc["apiVersion"]
    base = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    namespace = doc["metadata"].get("namespace")
    if model.NAMESPACED and namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{model.PLURAL}"


def ensure(endpoint: Endpoint, documents: list[dict[str, Any]]) -> None:
    """Create, through the API, each of ``documents`` the server does not have: the later steps look at
    the example's objects whether or not ``kubectl apply`` could create them."""
    for doc in documents:
        path = collection(doc)
        if endpoint.call("GET", f"{path}/{doc['metadata']['name']}").status != 404:
            continue
        reply = endpoint.call("POST", path, doc)
        if reply.status != 201:
            raise RuntimeError(
                f"{endpoint.name}: creating {doc['kind']} {doc['metadata']['name']}: {reply.body}"
            )


def record_event(endpoint: Endpoint, namespace: str) -> None:
    """An Event about the AWSCluster, as a controller records one: ``describe`` lists it (kubectl finds it by
    the object's uid) and so does ``get events``."""
    cluster = endpoint.call(
        "GET", f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/awsclusters/demo"
    ).body
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "demo.matrix", "namespace": namespace},
        "involvedObject": {
            "apiVersion": cluster["apiVersion"],
            "kind": cluster["kind"],
            "name": "demo",
            "namespace": namespace,
            "uid": cluster["metadata"]["uid"],
        },
        "reason": "Checked",
        "message": "looked at by the kubectl matrix",
        "type": "Normal",
        "source": {"component": "kubectl-matrix"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    reply = endpoint.call("POST", f"/api/v1/namespaces/{namespace}/events", event)
    if reply.status != 201:
        raise RuntimeError(f"{endpoint.name}: recording an Event: {reply.body}")


def run_script(kubectl: Kubectl, endpoint: Endpoint) -> dict[str, Outcome]:
    """Every step of :data:`STEPS` against one server, in order; see the module doc."""
    ns = kubectl.namespace
    workdir = kubectl.workdir
    example = workdir / "example.yaml"
    example.write_text(yaml.safe_dump_all(example_in(ns)))
    changed = workdir / "changed.yaml"
    changed.write_text(yaml.safe_dump(changed_cluster(ns)))
    server_side = workdir / "server-side.yaml"
    server_side.write_text(yaml.safe_dump(server_side_machine(ns)))
    clusters = f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{ns}/awsclusters"

    def paint() -> None:
        reply = endpoint.call(
            "PATCH",
            f"{clusters}/demo",
            {"metadata": {"labels": {"color": "blue"}}},
            content_type="application/merge-patch+json",
        )
        if reply.status != 200:
            raise RuntimeError(f"{endpoint.name}: labelling the watched AWSCluster: {reply.body}")

    k = kubectl
    out: dict[str, Outcome] = {}
    out["apply -f"] = k.run("apply", "-f", str(example))
    ensure(endpoint, example_in(ns))
    out["apply --server-side"] = k.run(
        "apply", "--server-side", "--field-manager=matrix", "-f", str(server_side)
    )
    out["diff"] = k.run("diff", "-f", str(changed), ok_codes=frozenset({0, 1}), reduce=diff_lines)
    out["explain awscluster.spec"] = k.run("explain", "awscluster.spec")
    out["get -o wide"] = k.run("get", "awsclusters", "-o", "wide")
    out["get -w"] = k.watch_change(
        ["get", "awsclusters", "-w", "-o", "custom-columns=NAME:.metadata.name,COLOR:.metadata.labels.color"],
        "demo",
        paint,
        "blue",
    )
    record_event(endpoint, ns)
    out["describe"] = k.run("describe", "awscluster", "demo", reduce=describe_without_metadata)
    out["label"] = k.run("label", "awscluster", "demo", "tier=gold")
    out["annotate"] = k.run("annotate", "awscluster", "demo", "owner=matrix")
    out["patch --type merge"] = k.run(
        "patch",
        "awscluster",
        "demo",
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"additionalTags": {"stage": "dev"}}}),
    )
    out["patch --type json"] = k.run(
        "patch",
        "awscluster",
        "demo",
        "--type",
        "json",
        "-p",
        json.dumps([{"op": "replace", "path": "/spec/additionalTags/team", "value": "infra"}]),
    )
    out["edit"] = k.run("edit", "awsmachine", "demo-worker-1")
    out["wait --for"] = k.run(
        "wait", "--for=jsonpath={.spec.additionalTags.team}=infra", "awscluster/demo", "--timeout=30s"
    )
    out["delete --wait"] = k.run("delete", "-f", str(example), "--wait", "--timeout=60s")
    out["get events"] = k.run("get", "events")
    assert list(out) == list(STEPS)
    return out


def compare(capa: Outcome, kube: Outcome) -> str:
    """The cell of the matrix for one step."""
    if not kube.ok:
        return FAILS_ON_BOTH if not capa.ok else FAILS_ON_KUBE
    if not capa.ok:
        return FAILS_ON_CAPA
    return SAME if capa == kube else DIFFERS


# -- the matrix --------------------------------------------------------------------------------------------
@dataclass
class Matrix:
    """Cells by (step, version), the versions skipped (with why) and each version's run time."""

    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def versions(self) -> list[str]:
        seen = {v for _, v in self.cells} | set(self.skipped)
        return sorted(seen, key=lambda v: tuple(int(p) for p in v.split(".")))

    def _rows(self, marked: bool) -> list[list[str]]:
        rows = []
        for step in STEPS:
            row = [step]
            for version in self.versions:
                if version in self.skipped:
                    row.append("skipped")
                    continue
                cell = self.cells.get((step, version), "")
                if marked and (step, version) in self.notes:
                    cell += f" [{self._footnotes().index(self.notes[(step, version)]) + 1}]"
                row.append(cell)
            rows.append(row)
        return rows

    def table(self) -> str:
        header = ["step", *(f"kubectl {v}" for v in self.versions)]
        rows = self._rows(marked=True)
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines += self._footer()
        return "\n".join(lines)

    def markdown(self) -> str:
        header = ["step", *(f"kubectl {v}" for v in self.versions)]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in self._rows(marked=True)]
        lines += ["", *(f"{line}  " for line in self._footer(timed=False))]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        """The Markdown table into ``path``: between the lines :data:`MARKERS` when the file has them (the
        rest of the page is kept), else as the whole file."""
        table = self.markdown()
        text = path.read_text() if path.exists() else ""
        start, end = MARKERS
        if start in text and end in text:
            before, _, rest = text.partition(start)
            _, _, after = rest.partition(end)
            path.write_text(f"{before}{start}\n{table}{end}{after}")
        else:
            path.write_text(table)

    def _footnotes(self) -> list[str]:
        return sorted(set(self.notes.values()))

    def _footer(self, timed: bool = True) -> list[str]:
        lines = [f"[{n}] {note}" for n, note in enumerate(self._footnotes(), 1)]
        lines += [f"kubectl {v} skipped: {reason}" for v, reason in sorted(self.skipped.items())]
        if timed and self.seconds:
            total = sum(self.seconds.values())
            each = ", ".join(f"{v}: {s:.0f} s" for v, s in sorted(self.seconds.items()))
            lines.append(f"run time {total:.0f} s ({each})")
        return lines


MARKERS = ("<!-- kubectl matrix: start -->", "<!-- kubectl matrix: end -->")
MATRIX = Matrix()
