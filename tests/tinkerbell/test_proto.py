"""The checked-in gRPC code is what the protobuf compiles to; the protobuf keeps the design's wire names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from capa_py.tinkerbell.proto import workflow_pb2, workflow_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
PROTO = "capa_py/tinkerbell/proto/workflow.proto"
GENERATED = ["workflow_pb2.py", "workflow_pb2.pyi", "workflow_pb2_grpc.py", "workflow_pb2_grpc.pyi"]


def test_checked_in_code_matches_what_the_protobuf_compiles_to(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(ROOT),
            f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            f"--mypy_grpc_out={tmp_path}",
            str(ROOT / PROTO),
        ],
        check=True,
        capture_output=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / "capa_py/tinkerbell/proto" / name).read_text()
        checked_in = (ROOT / "capa_py/tinkerbell/proto" / name).read_text()
        assert fresh == checked_in, f"{name} is stale: run `make proto`"


def test_service_and_message_names_are_the_designs() -> None:
    service = workflow_pb2.DESCRIPTOR.services_by_name["WorkflowService"]
    assert service.full_name == "internal.proto.workflow.v2.WorkflowService"
    assert [m.name for m in service.methods] == ["GetWorkflows", "PublishEvent"]
    assert service.methods_by_name["GetWorkflows"].server_streaming
    assert hasattr(workflow_pb2_grpc, "WorkflowServiceStub")


def test_namespace_fields_keep_the_designs_numbers_and_wire_type() -> None:
    ns = workflow_pb2.Workflow.Action.Namespace.DESCRIPTOR
    assert [(f.name, f.number, f.type) for f in ns.fields] == [
        ("pid", 1, ns.fields[0].TYPE_STRING),
        ("network", 2, ns.fields[1].TYPE_STRING),
    ]
    # Both are proto3 optional: presence is tracked, so "unset" differs from "".
    message = workflow_pb2.Workflow.Action.Namespace(pid="host")
    assert message.HasField("pid")
    assert not message.HasField("network")
    decoded = workflow_pb2.Workflow.Action.Namespace.FromString(message.SerializeToString())
    assert decoded.pid == "host"


def test_event_and_command_field_numbers_are_the_designs() -> None:
    event = workflow_pb2.Event.DESCRIPTOR
    assert {f.name: f.number for f in event.fields} == {
        "workflow_id": 1,
        "action_started": 2,
        "action_succeeded": 3,
        "action_failed": 4,
        "workflow_rejected": 5,
    }
    action = workflow_pb2.Workflow.Action.DESCRIPTOR
    assert {f.name: f.number for f in action.fields} == {
        "id": 1,
        "name": 2,
        "image": 3,
        "cmd": 4,
        "args": 5,
        "env": 6,
        "volumes": 7,
        "ns": 8,
    }
    command = workflow_pb2.GetWorkflowsResponse.DESCRIPTOR
    assert {f.name: f.number for f in command.fields} == {"start_workflow": 1, "stop_workflow": 2}
