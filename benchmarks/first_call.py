"""Run a client in this process until its first AWS call, note when that was, and exit without making it.

    python benchmarks/first_call.py OUT.json capa [capa arguments...]
    python benchmarks/first_call.py OUT.json script PATH [script arguments...]

``capa`` runs the ``capa`` console script's function (``capa_app.cli.main:run``), ``script`` runs a Python
file as ``__main__`` (``benchmarks/minimal.py``). Every botocore client's ``_make_api_call`` is wrapped: the
first call writes ``{"firstCallAt": <time.time()>, "operation": <name>}`` to ``OUT.json`` and ends the
process at once (exit status 0), before anything is sent. The caller notes ``time.time()`` just before
starting this process, so the difference is the client's start-up as a user pays it: interpreter, imports,
configuration, clients, everything before the first request. botocore is imported here first, which both
sides would import anyway.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any

import botocore.client


def _stop_at_first_call(out: Path) -> None:
    def first_call(self: Any, operation_name: str, api_params: Any) -> Any:
        at = time.time()
        out.write_text(json.dumps({"firstCallAt": at, "operation": operation_name}))
        sys.stdout.flush()
        os._exit(0)

    setattr(botocore.client.BaseClient, "_make_api_call", first_call)  # noqa: B010 (private, untyped)


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[2] not in ("capa", "script"):
        sys.exit("usage: first_call.py OUT.json capa [arguments...] | script PATH [arguments...]")
    out = Path(sys.argv[1])
    _stop_at_first_call(out)
    if sys.argv[2] == "capa":
        from capa_app.cli.main import run

        sys.argv = ["capa", *sys.argv[3:]]
        run()
    else:
        path = sys.argv[3]
        sys.argv = [path, *sys.argv[4:]]
        sys.path.insert(0, str(Path(path).resolve().parent))
        runpy.run_path(path, run_name="__main__")
    sys.exit(f"{sys.argv[0]} ended without an AWS call")


if __name__ == "__main__":
    main()
