"""Which local AWS endpoint a store's AWS resources live on, so that a store outliving it says so.

``capa local stop`` ends the moto server and everything it held: VPCs, instances, load balancers. A store
used with ``--aws-endpoint local`` still records their ids. Reconciling it against a new endpoint would
find every recorded resource gone and make each anew, with a warning per resource, as if AWS had lost
them. Instead, a command that would reconcile such a store refuses with one line that says what happened
and how to start again.

The store's endpoint is recorded beside the state file (``STATE.local-aws.json``: the store's uid, the
endpoint's id, url and start time) each time a command reconciles it with ``--aws-endpoint local``. It
counts only for the store whose uid it names: a store made anew at the same path (the old file removed)
is a new store, and the record is replaced.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from capa_py.aws.local import LocalEndpoint
from capa_py.inventory import recorded_resources
from capa_py.logging import get_logger
from capa_py.store.protocol import ObjectStore

_log = get_logger("cli.local_binding")
SUFFIX = ".local-aws.json"


def binding_path(state: Path) -> Path:
    return state.with_name(state.name + SUFFIX)


def stale_store(state: Path, store: ObjectStore, endpoint: LocalEndpoint) -> str | None:
    """Why ``store`` must not be reconciled on ``endpoint`` (its resources lived on a local endpoint that
    has been stopped), or None after recording that its resources now live on ``endpoint``."""
    if not endpoint.id:
        return None  # an endpoint started by an older capa: nothing to tell it apart by
    path = binding_path(state)
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        recorded = None
    if (
        isinstance(recorded, dict)
        and recorded.get("storeUid") == store.uid
        and recorded.get("endpoint") not in (None, endpoint.id)
    ):
        resources = recorded_resources(store)
        if resources:
            started = recorded.get("startedAt")
            when = (
                datetime.fromtimestamp(float(started), UTC).strftime(" (started %Y-%m-%d %H:%M:%S UTC)")
                if isinstance(started, int | float)
                else ""
            )
            return (
                f"{state} describes {len(resources)} AWS resources made on a local AWS endpoint that has "
                f"been stopped{when}: they are gone with it. To start again, remove {state} (or use "
                "another --state) and apply your manifests again"
            )
    document = {
        "storeUid": store.uid,
        "endpoint": endpoint.id,
        "url": endpoint.url,
        "startedAt": endpoint.started_at,
    }
    try:
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(document))
        os.replace(temporary, path)
    except OSError as exc:  # a read-only directory: the store still works, it just cannot tell later
        _log.warning("could not record the store's local AWS endpoint", path=str(path), error=str(exc))
    return None


__all__ = ["SUFFIX", "binding_path", "stale_store"]
