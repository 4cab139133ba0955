"""What the real Tinkerbell agent costs: real agents with the process runtime behind one workflow server.

Run: ``.venv/bin/python -m benchmarks.tink_agent [--agents 20] [--workflows 5] [--json PATH]``. A SQLite
store in a temp directory holds ``--agents`` Hardware, one Template of two actions that run ``/bin/true``
as host processes, and ``--workflows`` Workflows per Hardware, prepared by the workflow controller. The
server listens on a loopback port; every agent is :class:`capa_py.tinkerbell.agent.Agent` with the process
runtime, in a thread of this process. Prints the workflows run per second (from the agents' start until
every workflow has ended) and the mean time one agent spends per workflow (its workflows run one after the
other: dispatch, two processes, four events); asserts nothing. Compare with
``benchmarks/tink_server.py``, whose agents only publish events: the difference is what running real
processes and the agent's own bookkeeping cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from capa_py.api.tinkerbell import Hardware, Template, Workflow  # noqa: E402
from capa_py.logging import configure_logging  # noqa: E402
from capa_py.runtime.events import EventRecorder  # noqa: E402
from capa_py.runtime.queue import ObjectKey  # noqa: E402
from capa_py.store import SQLiteStore  # noqa: E402
from capa_py.tinkerbell.agent import Agent, AgentConfig  # noqa: E402
from capa_py.tinkerbell.agentauth import issue_token  # noqa: E402
from capa_py.tinkerbell.runtimes import ProcessRuntime  # noqa: E402
from capa_py.tinkerbell.server import start_in_thread  # noqa: E402
from controllers.tinkerbell import WorkflowController  # noqa: E402

POLL = 0.05


def _objects(agents: int, workflows: int) -> list[Any]:
    actions = [{"name": name, "image": "busybox", "command": "/bin/true"} for name in ("first", "second")]
    objects: list[Any] = [
        Template.model_validate(
            {"metadata": {"name": "noop", "namespace": "default"}, "spec": {"actions": actions}}
        )
    ]
    for index in range(agents):
        mac = f"02:00:00:01:{index >> 8 & 255:02x}:{index & 255:02x}"
        objects.append(
            Hardware.model_validate(
                {
                    "metadata": {"name": f"machine-{index}", "namespace": "default"},
                    "spec": {
                        "networkInterfaces": {mac: {"dhcp": {"ip": "10.0.0.1", "netmask": "255.0.0.0"}}}
                    },
                }
            )
        )
        objects.extend(
            Workflow.model_validate(
                {
                    "metadata": {"name": f"machine-{index}-{number}", "namespace": "default"},
                    "spec": {"hardwareRef": {"name": f"machine-{index}"}, "templateRef": {"name": "noop"}},
                }
            )
            for number in range(workflows)
        )
    return objects


def measure(agents: int, workflows: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        store = SQLiteStore(Path(home) / "state.db")
        controller = WorkflowController(store, EventRecorder(store))
        for obj in _objects(agents, workflows):
            store.create(obj)
            if isinstance(obj, Workflow):
                controller.reconcile(ObjectKey("Workflow", "default", obj.name))
        # Each agent proves its Hardware with a token, as agents must.
        tokens = [
            issue_token(store, store.get(Hardware, f"machine-{i}", "default"))[1] for i in range(agents)
        ]
        server = start_in_thread(store, "127.0.0.1", 0)
        running = [
            Agent(AgentConfig(f"machine-{i}", server.address, token=tokens[i]), ProcessRuntime())
            for i in range(agents)
        ]
        threads = [threading.Thread(target=agent.run, daemon=True) for agent in running]
        total = agents * workflows
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        while True:
            ended = [w for w in store.list(Workflow) if w.status.state in ("Succeeded", "Failed", "Canceled")]
            if len(ended) == total:
                break
            time.sleep(POLL)
        elapsed = time.perf_counter() - started
        for agent in running:
            agent.shutdown()
        for thread in threads:
            thread.join()
        server.stop()
        succeeded = sum(1 for w in ended if w.status.state == "Succeeded")
        store.close()
    return {
        "agents": agents,
        "workflows": total,
        "succeeded": succeeded,
        "seconds": elapsed,
        "workflows_per_second": total / elapsed,
        "agent_ms_per_workflow": elapsed / workflows * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--workflows", type=int, default=5, help="workflows per agent")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if not 1 <= args.agents <= 65536:
        parser.error("--agents must be between 1 and 65536")
    if args.workflows < 1:
        parser.error("--workflows must be at least 1")
    configure_logging("console", 0)  # warnings only: no log line per event
    figures = measure(args.agents, args.workflows)
    print(f"tink agent: {figures['agents']} agents (process runtime), {figures['workflows']} workflows")
    print(f"  workflows run per second: {figures['workflows_per_second']:.1f}")
    print(f"  one agent's time per workflow of 2 actions: {figures['agent_ms_per_workflow']:.0f} ms")
    print(f"  succeeded: {figures['succeeded']} of {figures['workflows']} in {figures['seconds']:.1f}s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
