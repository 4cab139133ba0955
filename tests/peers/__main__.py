"""The upstream peers for people and scripts.

``python -m tests.peers build`` builds them and Cluster API's manager and clusterctl (``make peers``; ``make
test`` runs it with ``--optional``, which only says so where Go is missing); ``python -m tests.peers cluster
--kubeconfig-out PATH`` starts etcd, kube-apiserver and kube-controller-manager on free loopback ports, writes
an admin kubeconfig to PATH once the API server is ready, and runs until SIGINT or SIGTERM, then stops the
components and removes their data directory (``make peer-cluster KUBECONFIG_OUT=PATH``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from tests.peers import clusterapi
from tests.peers.build import GoMissing, build
from tests.peers.cluster import die_with_parent, start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers")
    commands = parser.add_subparsers(dest="command", required=True)
    build_command = commands.add_parser("build", help="build the peers into the cache (once per version)")
    build_command.add_argument(
        "--optional", action="store_true", help="without Go, say so and exit 0 (the tests then skip)"
    )
    run = commands.add_parser("cluster", help="run a real API server until SIGINT/SIGTERM")
    run.add_argument("--kubeconfig-out", type=Path, required=True, help="where to write the admin kubeconfig")
    run.add_argument("--no-controller-manager", action="store_true", help="run etcd and kube-apiserver only")
    args = parser.parse_args(argv)
    try:
        binary = build()
        built = [binary]
        if args.command == "build":
            capi = clusterapi.build()
            built += [capi.manager, capi.clusterctl]
    except GoMissing as exc:
        if args.command == "build" and args.optional:
            print(
                f"not building the upstream peers: {exc}; the tests that need them will skip", file=sys.stderr
            )
            return 0
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.command == "build":
        for path in built:
            print(path)
        return 0
    out: Path = args.kubeconfig_out
    if not out.parent.is_dir():
        print(f"error: --kubeconfig-out {out}: no such directory {out.parent}", file=sys.stderr)
        return 2
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # Run under make and backgrounded, a SIGTERM reaches make only: stop (and clean up) when it goes.
    die_with_parent(signal.SIGTERM)
    try:
        cluster = start(controller_manager=not args.no_controller_manager)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        out.write_bytes(cluster.admin_kubeconfig.read_bytes())
        out.chmod(0o600)
        print(
            f"kube-apiserver ready at {cluster.url}; admin kubeconfig written to {out}; "
            f"data in {cluster.directory}",
            flush=True,
        )
        print("stop with Ctrl-C (SIGINT) or SIGTERM", flush=True)
        while not stopping.wait(1.0):
            for name, process in cluster.processes.items():
                if process.poll() is not None:
                    print(f"error: {name} exited with {process.returncode}", file=sys.stderr)
                    return 1
    finally:
        cluster.stop()
        print("stopped; data directory removed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
