"""Run the ``capa`` command in this process and report how many reconciles its controllers ran.

    python benchmarks/capa_probe.py RECONCILES_OUT.json [capa arguments...]

This is the ``capa`` console script (``capa_app.cli.main:run``) with one addition: the result of the
command's converge loop (``controllers.run.converge``) is kept, and its per-controller reconcile counts are
written to ``RECONCILES_OUT.json`` when the command ends. Nothing else changes — same arguments, output,
exit code and AWS calls. If capa-py no longer has that function, the command still runs and the file is
simply not written (the benchmark then reports the reconcile count as unknown).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: capa_probe.py RECONCILES_OUT.json [capa arguments...]")
    out = Path(sys.argv[1])
    try:
        import controllers.run as run_module

        original = run_module.converge

        def converge(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            out.write_text(json.dumps(dict(getattr(result, "reconciles", {}) or {}), sort_keys=True))
            return result

        run_module.converge = converge
    except (ImportError, AttributeError):
        pass
    from capa_app.cli.main import run

    sys.argv = ["capa", *sys.argv[2:]]
    run()


if __name__ == "__main__":
    main()
