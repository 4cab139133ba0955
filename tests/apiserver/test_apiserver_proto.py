"""The checked-in OpenAPI v2 messages are what their protobuf compiles to, and keep the wire schema's names,
numbers and package (``openapi.v2``), which clients unmarshal ``/openapi/v2`` into."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from capa_py.apiserver.proto import openapi_v2_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
PROTO = "capa_py/apiserver/proto/openapi_v2.proto"
GENERATED = ["openapi_v2_pb2.py", "openapi_v2_pb2.pyi"]


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
            str(ROOT / PROTO),
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
