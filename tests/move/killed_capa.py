"""``capa`` killed with SIGKILL after its N-th store write: ``python -m tests.move.killed_capa N ARGS…``.

Counts every create, update, update_status and delete of the SQLite store (either side of a move) and
kills the process right after the N-th returns, as a crash between two writes would."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def main() -> None:
    from capa_py.store.sqlite import SQLiteStore

    limit = int(sys.argv.pop(1))
    writes = [0]

    def counted(method: Any) -> Any:
        def write(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
            result = method(self, *args, **kwargs)
            writes[0] += 1
            if writes[0] == limit:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return write

    for name in ("create", "update", "update_status", "delete"):
        setattr(SQLiteStore, name, counted(getattr(SQLiteStore, name)))
    from capa_app.cli.main import run

    sys.argv[0] = "capa"
    run()


if __name__ == "__main__":
    main()
