"""Hegel over a real SQLite store, served on a loopback port: callers connect from distinct loopback source
addresses (127.0.0.2, 127.0.0.3, ...) that are the DHCP addresses of their Hardware."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import structlog
import yaml

from capa_py.api.tinkerbell import Hardware, NetworkInterface
from capa_py.logging import configure_logging
from capa_py.store import SQLiteStore
from capa_py.store.kube import KubeStore
from capa_py.tinkerbell.hegel import (
    RunningHegel,
    caller_address,
    parse_trusted_proxies,
    start_in_thread,
)

USERDATA = "#cloud-config\nsecret_marker: s3cr3t-userdata-value\n"
VENDORDATA = "vendor-only-marker-value"


def hardware(name: str, ip: str, hostname: str | None = None, userdata: str | None = None) -> Hardware:
    mac = f"02:00:00:00:00:{int(ip.rsplit('.', 1)[1]):02x}"
    dhcp: dict[str, object] = {"ip": ip, "netmask": "255.0.0.0"}
    if hostname is not None:
        dhcp["hostname"] = hostname
    spec: dict[str, object] = {"networkInterfaces": {mac: {"dhcp": dhcp}}}
    if userdata is not None:
        spec["instance"] = {"userdata": userdata, "vendordata": VENDORDATA}
    return Hardware.model_validate(
        {
            "apiVersion": "tinkerbell.org/v1alpha2",
            "kind": "Hardware",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "state.db") as opened:
        yield opened


def serve(store: SQLiteStore, trusted: str | None = None) -> RunningHegel:
    return start_in_thread(store, "127.0.0.1", 0, parse_trusted_proxies(trusted))


@pytest.fixture
def json_logs() -> Iterator[None]:
    """Structured logs as JSON lines on stderr at debug level; the logging configuration is put back."""
    saved = structlog.get_config()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    configure_logging("json", 2)
    yield
    structlog.configure(**saved)
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


@pytest.fixture
def hegel(store: SQLiteStore) -> Iterator[RunningHegel]:
    running = serve(store)
    yield running
    running.stop()


def call(
    url: str, source: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes, str]:
    """One request from ``source``: status, body and content type."""

    async def run() -> tuple[int, bytes, str]:
        connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.request(method, url, headers=headers or {}) as response,
        ):
            return response.status, await response.read(), response.content_type

    return asyncio.run(run())


def test_every_endpoint_answers_the_caller_by_its_source_address(
    store: SQLiteStore, hegel: RunningHegel
) -> None:
    store.create(hardware("machine1", "127.0.0.2", hostname="node-1", userdata=USERDATA))
    store.create(hardware("machine2", "127.0.0.3"))
    base = f"{hegel.url}/2009-04-04"
    assert call(f"{base}/meta-data/instance-id", "127.0.0.2")[:2] == (200, b"machine1")
    assert call(f"{base}/meta-data/instance-id", "127.0.0.3")[:2] == (200, b"machine2")
    assert call(f"{base}/meta-data/hostname", "127.0.0.2")[:2] == (200, b"node-1")
    assert call(f"{base}/meta-data/hostname", "127.0.0.3")[0] == 404
    assert call(f"{base}/meta-data/local-ipv4", "127.0.0.2")[:2] == (200, b"127.0.0.2")
    listing = b"instance-id\nhostname\nlocal-ipv4"
    assert call(f"{base}/meta-data/", "127.0.0.2")[:2] == (200, listing)
    assert call(f"{base}/meta-data", "127.0.0.2")[:2] == (200, listing)
    assert call(f"{base}/meta-data/", "127.0.0.3")[:2] == (200, b"instance-id\nlocal-ipv4")
    status, body, content_type = call(f"{base}/user-data", "127.0.0.2")
    assert (status, body, content_type) == (200, USERDATA.encode(), "text/plain")
    assert call(f"{base}/user-data", "127.0.0.3")[0] == 404
    assert call(f"{base}/meta-data/ami-id", "127.0.0.2")[0] == 404
    assert call(f"{hegel.url}/latest/meta-data/instance-id", "127.0.0.2")[0] == 404
    assert call(f"{base}/meta-data/instance-id", "127.0.0.2", method="HEAD")[0] == 200
    assert call(f"{base}/meta-data/instance-id", "127.0.0.2", method="POST")[0] == 405
    assert call(f"{base}/user-data", "127.0.0.2", method="PUT")[0] == 405


def test_an_unknown_caller_gets_404_on_every_endpoint(store: SQLiteStore, hegel: RunningHegel) -> None:
    store.create(hardware("machine1", "127.0.0.2", hostname="node-1", userdata=USERDATA))
    for path in (
        "meta-data/instance-id",
        "meta-data/hostname",
        "meta-data/local-ipv4",
        "meta-data/",
        "user-data",
    ):
        assert call(f"{hegel.url}/2009-04-04/{path}", "127.0.0.9")[0] == 404, path


def test_a_hardware_created_or_changed_after_start_is_answered_at_once(
    store: SQLiteStore, hegel: RunningHegel
) -> None:
    url = f"{hegel.url}/2009-04-04/meta-data/instance-id"
    assert call(url, "127.0.0.4")[0] == 404
    store.create(hardware("late", "127.0.0.4", userdata="one"))
    assert call(url, "127.0.0.4")[:2] == (200, b"late")
    changed = store.get(Hardware, "late", "default")
    assert changed.spec.instance is not None
    changed.spec.instance.userdata = "two"
    store.update(changed)
    assert call(f"{hegel.url}/2009-04-04/user-data", "127.0.0.4")[:2] == (200, b"two")
    store.delete(Hardware, "late", "default")
    assert call(url, "127.0.0.4")[0] == 404


def test_an_address_claimed_by_two_hardware_is_answered_by_neither(
    store: SQLiteStore, hegel: RunningHegel, capsys: pytest.CaptureFixture[str], json_logs: None
) -> None:
    store.create(hardware("first", "127.0.0.5"))
    store.create(hardware("second", "127.0.0.5"))
    assert call(f"{hegel.url}/2009-04-04/meta-data/instance-id", "127.0.0.5")[0] == 404
    logged = capsys.readouterr().err
    warning = next(line for line in logged.splitlines() if "more than one hardware" in line)
    assert "default/first" in warning
    assert "default/second" in warning


def test_x_forwarded_for_is_believed_from_a_trusted_proxy_only(store: SQLiteStore) -> None:
    store.create(hardware("behind-proxy", "127.0.0.6"))
    store.create(hardware("proxy-host", "127.0.0.7"))
    running = serve(store, trusted="127.0.0.7/32,10.0.0.0/8")
    try:
        url = f"{running.url}/2009-04-04/meta-data/instance-id"
        forwarded = {"X-Forwarded-For": "192.0.2.1, 127.0.0.6, 10.1.2.3"}
        # From the trusted proxy: the right-most untrusted hop (10.1.2.3 is a trusted proxy too).
        assert call(url, "127.0.0.7", headers=forwarded)[:2] == (200, b"behind-proxy")
        # From the trusted proxy without the header: the proxy itself.
        assert call(url, "127.0.0.7")[:2] == (200, b"proxy-host")
        # From an untrusted peer the header is ignored: it is answered as itself.
        assert call(url, "127.0.0.6", headers={"X-Forwarded-For": "127.0.0.7"})[:2] == (200, b"behind-proxy")
        assert call(url, "127.0.0.8", headers={"X-Forwarded-For": "127.0.0.6"})[0] == 404
        # A hop that is not an address identifies nobody.
        assert call(url, "127.0.0.7", headers={"X-Forwarded-For": "127.0.0.6, junk"})[0] == 404
    finally:
        running.stop()


def test_caller_address_rules() -> None:
    trusted = parse_trusted_proxies("10.0.0.0/8")
    assert str(caller_address("10.0.0.1", ["192.0.2.9, 10.0.0.2"], trusted)) == "192.0.2.9"
    assert str(caller_address("10.0.0.1", ["192.0.2.9", "198.51.100.4"], trusted)) == "198.51.100.4"
    assert str(caller_address("10.0.0.1", ["10.0.0.3, 10.0.0.2"], trusted)) == "10.0.0.3"
    assert str(caller_address("192.0.2.1", ["198.51.100.4"], trusted)) == "192.0.2.1"
    assert str(caller_address("::ffff:192.0.2.1", [], trusted)) == "192.0.2.1"


@pytest.mark.parametrize("bad", ["10.0.0.1/8", "not-a-cidr", "10.0.0.0/33"])
def test_a_bad_trusted_proxy_cidr_is_refused_naming_the_flag(bad: str) -> None:
    with pytest.raises(ValueError, match=r"^--trusted-proxies: "):
        parse_trusted_proxies(f"127.0.0.0/8,{bad}")


def test_userdata_and_vendordata_never_reach_the_logs(
    store: SQLiteStore, hegel: RunningHegel, capsys: pytest.CaptureFixture[str], json_logs: None
) -> None:
    store.create(hardware("machine1", "127.0.0.2", hostname="node-1", userdata=USERDATA))
    for path in ("user-data", "meta-data/instance-id", "meta-data/"):
        assert call(f"{hegel.url}/2009-04-04/{path}", "127.0.0.2")[0] == 200
    logged = capsys.readouterr().err
    access = [line for line in logged.splitlines() if "hegel request" in line]
    assert len(access) == 3, logged
    assert all('"hardware": "machine1"' in line and '"status": 200' in line for line in access), access
    assert "s3cr3t-userdata-value" not in logged
    assert VENDORDATA not in logged
    assert "127.0.0.2" not in "".join(access)


def test_a_store_that_cannot_be_read_is_a_503_not_a_500(tmp_path: Path) -> None:
    """An API server that does not answer (a loopback port nothing listens on)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "kubeconfig"
    cluster = {"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}
    context = {"name": "gone", "context": {"cluster": "gone", "user": "gone"}}
    document = {"clusters": [cluster], "users": [{"name": "gone", "user": {}}], "contexts": [context]}
    config.write_text(yaml.safe_dump({**document, "current-context": "gone"}))
    with KubeStore.from_kubeconfig(config) as store:
        running = start_in_thread(store, "127.0.0.1", 0)
        try:
            assert call(f"{running.url}/2009-04-04/meta-data/instance-id", "127.0.0.2")[0] == 503
        finally:
            running.stop()


def test_the_interface_called_from_gives_hostname_and_local_ipv4(
    store: SQLiteStore, hegel: RunningHegel
) -> None:
    machine = hardware("two-nics", "127.0.0.10", hostname="nic-a")
    machine.spec.network_interfaces["02:00:00:00:01:0b"] = NetworkInterface.model_validate(
        {"dhcp": {"ip": "127.0.0.11", "netmask": "255.0.0.0", "hostname": "nic-b"}}
    )
    store.create(machine)
    base = f"{hegel.url}/2009-04-04/meta-data"
    assert call(f"{base}/hostname", "127.0.0.11")[:2] == (200, b"nic-b")
    assert call(f"{base}/local-ipv4", "127.0.0.11")[:2] == (200, b"127.0.0.11")
    assert call(f"{base}/hostname", "127.0.0.10")[:2] == (200, b"nic-a")
    assert call(f"{base}/instance-id", "127.0.0.11")[:2] == (200, b"two-nics")
