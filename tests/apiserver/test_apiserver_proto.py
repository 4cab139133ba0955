"""The checked-in messages of ``capa serve`` (OpenAPI v2, Kubernetes' protobuf bodies) are what their
protobufs compile to, and keep the wire schemas' names and numbers, which clients encode and decode with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf.message import Message

from capa_py.apiserver.proto import kubernetes_pb2
from capa_py.apiserver.proto import openapi_v2_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ["capa_py/apiserver/proto/openapi_v2.proto", "capa_py/apiserver/proto/kubernetes.proto"]
GENERATED = ["openapi_v2_pb2.py", "openapi_v2_pb2.pyi", "kubernetes_pb2.py", "kubernetes_pb2.pyi"]


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
            f"--python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            *(str(ROOT / p) for p in PROTOS),
        ],
        check=True,
        capture_output=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / "capa_py/apiserver/proto" / name).read_text()
        checked_in = (ROOT / "capa_py/apiserver/proto" / name).read_text()
        assert fresh == checked_in, f"{name} is stale: run `make proto`"


def test_document_and_schema_keep_the_wire_numbers() -> None:
    document = pb.Document.DESCRIPTOR
    assert document.full_name == "openapi.v2.Document"
    assert {f.name: f.number for f in document.fields} == {
        "swagger": 1,
        "info": 2,
        "consumes": 6,
        "produces": 7,
        "paths": 8,
        "definitions": 9,
        "vendor_extension": 16,
    }
    schema = {f.name: f.number for f in pb.Schema.DESCRIPTOR.fields}
    assert (schema["_ref"], schema["type"], schema["properties"], schema["vendor_extension"]) == (
        1,
        22,
        25,
        31,
    )
    assert {f.name: f.number for f in pb.AdditionalPropertiesItem.DESCRIPTOR.fields} == {
        "schema": 1,
        "boolean": 2,
    }


def test_kubernetes_messages_keep_the_wire_numbers() -> None:
    def numbers(message: type[Message]) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}

    unknown = {"typeMeta": 1, "raw": 2, "contentEncoding": 3, "contentType": 4}
    assert numbers(kubernetes_pb2.Unknown) == unknown
    secret = {"metadata": 1, "data": 2, "type": 3, "stringData": 4, "immutable": 5}
    assert numbers(kubernetes_pb2.Secret) == secret
    meta = numbers(kubernetes_pb2.ObjectMeta)
    assert (meta["name"], meta["namespace"], meta["labels"], meta["finalizers"]) == (1, 3, 11, 14)
