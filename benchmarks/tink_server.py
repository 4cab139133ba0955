"""What the Tinkerbell workflow server sustains: many agents on one server over a SQLite store.

Run: ``.venv/bin/python -m benchmarks.tink_server [--agents 50] [--workflows 10] [--json PATH]``. A SQLite
store in a temp directory holds ``--agents`` Hardware, one Template of two actions and ``--workflows``
Workflows per Hardware, prepared by the workflow controller. The server listens on a loopback port; each
agent is a thread with the generated client that opens its command stream and, for every StartWorkflow,
publishes ActionStarted and ActionSucceeded for each action, one after the other. Prints the workflows
dispatched per second (every workflow from the first stream opening until the last workflow succeeded)
and the event round trip (a PublishEvent call until its reply) p50/p99, and the process's CPU time per
workflow (the server's and the agent threads': on a shared machine a steadier figure than the rates);
then the same for the same agents against a bare grpc.aio server doing the same exchange with no store and
no checks, and how many times slower the workflow server is. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import grpc  # noqa: E402

from capa_py.api.tinkerbell import Hardware, Template, Workflow  # noqa: E402
from capa_py.logging import configure_logging  # noqa: E402
from capa_py.runtime.background import Ready, start_loop_thread  # noqa: E402
from capa_py.runtime.events import EventRecorder  # noqa: E402
from capa_py.runtime.queue import ObjectKey  # noqa: E402
from capa_py.store import SQLiteStore  # noqa: E402
from capa_py.tinkerbell.agentauth import issue_token  # noqa: E402
from capa_py.tinkerbell.proto import workflow_pb2 as pb  # noqa: E402
from capa_py.tinkerbell.proto import workflow_pb2_grpc as pb_grpc  # noqa: E402
from capa_py.tinkerbell.server import start_in_thread  # noqa: E402
from controllers.tinkerbell import WorkflowController  # noqa: E402


def _objects(agents: int, workflows: int) -> list[Any]:
    objects: list[Any] = [
        Template.model_validate(
            {
                "metadata": {"name": "provision", "namespace": "default"},
                "spec": {
                    "actions": [
                        {"name": "stream-image", "image": "quay.io/tinkerbell/image2disk:v1"},
                        {"name": "kexec", "image": "quay.io/tinkerbell/kexec:v1"},
                    ]
                },
            }
        )
    ]
    for index in range(agents):
        mac = f"02:00:00:00:{index >> 8 & 255:02x}:{index & 255:02x}"
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
        for number in range(workflows):
            objects.append(
                Workflow.model_validate(
                    {
                        "metadata": {"name": f"machine-{index}-{number}", "namespace": "default"},
                        "spec": {
                            "hardwareRef": {"name": f"machine-{index}"},
                            "templateRef": {"name": "provision"},
                        },
                    }
                )
            )
    return objects


def _agent(
    address: str, name: str, token: str, workflows: int, latencies: list[float], lock: threading.Lock
) -> None:
    metadata = (("authorization", f"Bearer {token}"),)
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.WorkflowServiceStub(channel)
        stream = stub.GetWorkflows(pb.GetWorkflowsRequest(agent_id=name), metadata=metadata)
        mine: list[float] = []
        done = 0
        for command in stream:
            if command.WhichOneof("cmd") != "start_workflow":
                continue
            sent = command.start_workflow.workflow
            for action in sent.actions:
                for event in (
                    pb.Event(
                        workflow_id=sent.workflow_id,
                        action_started=pb.Event.ActionStarted(action_id=action.id),
                    ),
                    pb.Event(
                        workflow_id=sent.workflow_id,
                        action_succeeded=pb.Event.ActionSucceeded(action_id=action.id),
                    ),
                ):
                    started = time.perf_counter()
                    stub.PublishEvent(pb.PublishEventRequest(event=event), metadata=metadata)
                    mine.append(time.perf_counter() - started)
            done += 1
            if done == workflows:
                break
        stream.cancel()
    with lock:
        latencies.extend(mine)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _run_agents(
    address: str, agents: int, workflows: int, tokens: list[str]
) -> tuple[list[float], float, float]:
    """Every agent's event latencies, the seconds and the process CPU seconds until all were done."""
    latencies: list[float] = []
    lock = threading.Lock()
    threads = [
        threading.Thread(target=_agent, args=(address, f"machine-{i}", tokens[i], workflows, latencies, lock))
        for i in range(agents)
    ]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, time.perf_counter() - started, time.process_time() - cpu


def _raw_command(agent: str, number: int) -> pb.GetWorkflowsResponse:
    actions = [
        pb.Workflow.Action(id=name, name=name, image=f"quay.io/tinkerbell/{name}:v1")
        for name in ("stream-image", "kexec")
    ]
    workflow = pb.Workflow(workflow_id=f"default/{agent}-{number}", actions=actions)
    return pb.GetWorkflowsResponse(start_workflow=pb.GetWorkflowsResponse.StartWorkflow(workflow=workflow))


class _RawService(pb_grpc.WorkflowServiceServicer):
    """The same exchange with nothing behind it: each agent's next workflow goes once the last action of
    the previous one succeeded; events are answered at once."""

    def __init__(self, workflows: int) -> None:
        self.workflows = workflows
        self.done: dict[str, asyncio.Queue[None]] = {}

    async def GetWorkflows(self, request: Any, context: Any) -> AsyncIterator[pb.GetWorkflowsResponse]:
        done = self.done.setdefault(request.agent_id, asyncio.Queue())
        for number in range(self.workflows):
            yield _raw_command(request.agent_id, number)
            await done.get()

    async def PublishEvent(self, request: Any, context: Any) -> pb.PublishEventResponse:
        event = request.event
        if event.WhichOneof("event") == "action_succeeded" and event.action_succeeded.action_id == "kexec":
            agent = event.workflow_id.partition("/")[2].rsplit("-", 1)[0]
            self.done[agent].put_nowait(None)
        return pb.PublishEventResponse()


def measure_raw(agents: int, workflows: int) -> dict[str, float]:
    """The same agents against a bare grpc.aio server doing the same exchange (no store, no checks)."""

    async def serve(stopping: asyncio.Event, ready: Ready) -> None:
        server = grpc.aio.server()
        pb_grpc.add_WorkflowServiceServicer_to_server(_RawService(workflows), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ready({"address": f"127.0.0.1:{port}"})
        await stopping.wait()
        await server.stop(1.0)

    info, handle = start_loop_thread(serve, "raw-tink-server")
    try:
        latencies, elapsed, cpu = _run_agents(info["address"], agents, workflows, [""] * agents)
    finally:
        handle.stop(10.0)
    return {
        "dispatched_per_second": agents * workflows / elapsed,
        "event_p50_ms": _percentile(latencies, 0.50) * 1000,
        "event_p99_ms": _percentile(latencies, 0.99) * 1000,
        "cpu_ms_per_workflow": cpu / (agents * workflows) * 1000,
    }


def measure(agents: int, workflows: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        store = SQLiteStore(Path(home) / "state.db")
        controller = WorkflowController(store, EventRecorder(store))
        prepared_at = time.perf_counter()
        for obj in _objects(agents, workflows):
            store.create(obj)
            if isinstance(obj, Workflow):
                controller.reconcile(ObjectKey("Workflow", "default", obj.name))
        print(
            f"prepared {agents * workflows} workflows in {time.perf_counter() - prepared_at:.1f}s",
            file=sys.stderr,
        )
        # Each agent proves its Hardware with a token, as agents must.
        tokens = [
            issue_token(store, store.get(Hardware, f"machine-{i}", "default"))[1] for i in range(agents)
        ]
        server = start_in_thread(store, "127.0.0.1", 0)
        try:
            latencies, elapsed, cpu = _run_agents(server.address, agents, workflows, tokens)
        finally:
            server.stop()
        succeeded = sum(1 for w in store.list(Workflow) if w.status.state == "Succeeded")
        store.close()
    return {
        "agents": agents,
        "workflows": agents * workflows,
        "succeeded": succeeded,
        "seconds": elapsed,
        "dispatched_per_second": agents * workflows / elapsed,
        "event_p50_ms": _percentile(latencies, 0.50) * 1000,
        "event_p99_ms": _percentile(latencies, 0.99) * 1000,
        "event_mean_ms": statistics.fmean(latencies) * 1000,
        "events": len(latencies),
        "cpu_ms_per_workflow": cpu / (agents * workflows) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--workflows", type=int, default=10, help="workflows per agent")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.agents < 1 or args.agents > 65536:
        parser.error("--agents must be between 1 and 65536")
    if args.workflows < 1:
        parser.error("--workflows must be at least 1")
    configure_logging("console", 0)  # warnings only: no log line per event
    figures = measure(args.agents, args.workflows)
    print(f"tink server: {figures['agents']} agents, {figures['workflows']} workflows of 2 actions")
    print(f"  workflows dispatched (and run) per second: {figures['dispatched_per_second']:.1f}")
    print(
        f"  event round trip: p50 {figures['event_p50_ms']:.1f} ms, p99 {figures['event_p99_ms']:.1f} ms"
        f" ({figures['events']} PublishEvent calls)"
    )
    print(f"  succeeded: {figures['succeeded']} of {figures['workflows']} in {figures['seconds']:.1f}s")
    print(f"  CPU per workflow (server and agent threads): {figures['cpu_ms_per_workflow']:.1f} ms")
    raw = measure_raw(args.agents, args.workflows)
    figures["raw"] = raw  # type: ignore[assignment]
    print(
        f"raw grpc.aio server, same exchange: {raw['dispatched_per_second']:.1f} workflows/s, event p50 "
        f"{raw['event_p50_ms']:.1f} ms, p99 {raw['event_p99_ms']:.1f} ms, CPU per workflow "
        f"{raw['cpu_ms_per_workflow']:.1f} ms"
    )
    print(
        f"  tink server against raw: {raw['dispatched_per_second'] / figures['dispatched_per_second']:.2f}x "
        f"slower, {figures['event_p50_ms'] / raw['event_p50_ms']:.2f}x the event p50"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
