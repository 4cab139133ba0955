"""What an undecidable intent saw is what ``capa audit`` reports: the look-alike the engine refused to
attribute is a pending intent (never deleted, the report says why), and a look-alike appearing after that
examination is not the intent's business."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from capa_app.audit import AuditClass, AuditOptions, DiscoveryMode, run_audit
from capa_py.api.aws import AWSCluster, AWSClusterSpec, NetworkSpec, VPCSpec
from capa_py.api.meta import ObjectMeta, utcnow
from capa_py.engine.engine import Engine, Scope
from capa_py.engine.errors import UndecidableIntent
from capa_py.engine.profiles import ADOPTION_WINDOW, MOTO
from capa_py.engine.recorder import StatusRecorder
from capa_py.store import SQLiteStore
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from tests.audit.helpers import REGION, make_pool
from tests.harness.moto_server import MotoServer

UNTRACKED = {"tag_on_create": False, "taggable": False, "client_token": False}


class Crash(BaseException):
    """The process dying just before it sends the create."""


def test_an_undecidable_intent_reports_what_it_saw_and_nothing_else(
    moto_server: MotoServer, tmp_path: Path
) -> None:
    moto_server.reset()
    pool = make_pool(moto_server, tmp_path)
    aws = pool.for_region(REGION)
    with SQLiteStore(tmp_path / "state.db") as store:
        store.create(
            AWSCluster(
                metadata=ObjectMeta(name="alpha", namespace="default"),
                spec=AWSClusterSpec(
                    region=REGION, network=NetworkSpec(vpc=VPCSpec(cidr_block="10.0.0.0/16"))
                ),
            )
        )

        def scope() -> Scope:
            obj = store.get(AWSCluster, "alpha", "default")
            return Scope("alpha", obj.uid, StatusRecorder(store, obj))

        profile = MOTO.with_overrides({"elastic-ip": UNTRACKED})
        started = utcnow() - timedelta(seconds=ADOPTION_WINDOW + 300)

        def die(**_: object) -> None:
            raise Crash

        events = aws.ec2.raw.meta.events
        events.register("before-send.ec2.AllocateAddress", die)
        try:
            with pytest.raises(Crash):
                Engine(profile, clock=lambda: started).ensure(
                    ElasticIp(aws), "eip-nat", ElasticIpDesired(), scope()
                )
        finally:
            events.unregister("before-send.ec2.AllocateAddress", die)
        seen = aws.ec2.call("AllocateAddress", Domain="vpc")["AllocationId"]
        with pytest.raises(UndecidableIntent):
            Engine(profile).ensure(ElasticIp(aws), "eip-nat", ElasticIpDesired(), scope())
        unseen = aws.ec2.call("AllocateAddress", Domain="vpc")["AllocationId"]

        report = run_audit(store, pool, AuditOptions(discovery=DiscoveryMode.DESCRIBE))

    rows = {row.id: row for row in report.rows}
    row = rows[seen]
    assert (row.classification, row.cluster, row.role) == (AuditClass.PENDING_INTENT, "alpha", "eip-nat")
    assert "first examined" in row.reason
    assert seen in row.reason
    assert not row.leak
    assert unseen not in rows or rows[unseen].classification != AuditClass.PENDING_INTENT
