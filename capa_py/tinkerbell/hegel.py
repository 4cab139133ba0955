"""Hegel: the instance metadata a provisioned machine reads over HTTP (EC2's ``2009-04-04`` layout).

The caller is identified by its source address, matched against the ``dhcp.ip`` of every interface of
every Hardware (in every namespace; an interface with ``disableDhcp`` still declares its address).
``X-Forwarded-For`` is believed only when the direct peer is inside a trusted CIDR; then the right-most
address of the header that is not itself trusted is the caller (the left-most when every one is).

* ``GET /2009-04-04/meta-data/instance-id``: the Hardware's name (names are what every other Tinkerbell
  object refers to a Hardware by);
* ``GET /2009-04-04/meta-data/hostname`` and ``local-ipv4``: the matched interface's ``dhcp.hostname``
  (404 when unset) and ``dhcp.ip``;
* ``GET /2009-04-04/meta-data/`` (or without the slash): the names above that have a value, one a line;
* ``GET /2009-04-04/user-data``: ``spec.instance.userdata``, byte for byte (404 when unset).

Every other path is 404, another method on these paths 405. An unknown caller, or an address two Hardware
claim (logged as a warning naming both), is 404; a store that cannot be read, or an index that has not
listed the Hardware yet, is 503. Callers are found through a :class:`~capa_py.tinkerbell.hegel_index.
HardwareIndex` (source address to Hardware, kept by the store's events), not a list per request: the
index of ``capa controller``'s Hardware informer when one is passed, else one with its own list and watch
for as long as the application runs. Access logs carry the path, the status and the Hardware's name only;
user-data and vendor-data are never logged.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

from aiohttp import web

from capa_py.api.tinkerbell import Hardware
from capa_py.logging import get_logger
from capa_py.runtime.background import Ready, RunningServer, start_loop_thread
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell.hegel_index import (
    Ambiguous,
    HardwareIndex,
    IPAddress,
    Match,
    NotReady,
    parse_address,
)

_log = get_logger("tinkerbell.hegel")

DEFAULT_PORT = 50061
PREFIX = "/2009-04-04"
META_DATA = f"{PREFIX}/meta-data"
USER_DATA = f"{PREFIX}/user-data"

HARDWARE_NAME = web.RequestKey("hardware", str)
"""The name of the Hardware a request was answered for, for the access log."""

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_trusted_proxies(text: str | None) -> tuple[IPNetwork, ...]:
    """``CIDR[,CIDR...]`` (a bare address is a /32 or /128); ValueError naming the bad entry."""
    networks: list[IPNetwork] = []
    for written in (text or "").split(","):
        entry = written.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=True))
        except ValueError as exc:
            raise ValueError(f"--trusted-proxies: {entry!r} is not a CIDR ({exc})") from exc
    return tuple(networks)


_address = parse_address


def _trusted(address: IPAddress, trusted: Sequence[IPNetwork]) -> bool:
    return any(address in network for network in trusted)


def caller_address(
    peer: str | None, forwarded: Iterable[str], trusted: Sequence[IPNetwork]
) -> IPAddress | None:
    """The caller's address: the peer's, or, from a trusted peer, the right-most untrusted address of
    ``X-Forwarded-For`` (the headers' values in order). None when it cannot be told."""
    direct = _address(peer) if peer else None
    if direct is None or not _trusted(direct, trusted):
        return direct
    hops = [hop for value in forwarded for hop in value.split(",") if hop.strip()]
    if not hops:
        return direct
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            return None  # a hop that is no address: nobody to answer
        if not _trusted(address, trusted):
            return address
    return _address(hops[0])


def find_caller(hardware: Iterable[Hardware], address: IPAddress) -> Match | None:
    """The Hardware with an interface at ``address`` among ``hardware``; :class:`Ambiguous` when more than
    one has (what the index answers, without one)."""
    index = HardwareIndex()
    index.replace(hardware, "0")
    return index.lookup(address)


def meta_data(match: Match) -> dict[str, str]:
    """The meta-data entries that have a value, in the listing's order."""
    entries = {"instance-id": match.hardware.name}
    if match.hostname:
        entries["hostname"] = match.hostname
    entries["local-ipv4"] = match.ip
    return entries


def build_app(
    store: ObjectStore, trusted: Sequence[IPNetwork] = (), index: HardwareIndex | None = None
) -> web.Application:
    """The Hegel application over ``store``: callers are found in ``index`` (kept by someone else, an
    informer), or, without one, in an index that lists and watches ``store`` while the application runs."""
    own = index is None
    found = HardwareIndex() if index is None else index

    async def identify(request: web.Request) -> Match | None:
        address = caller_address(request.remote, request.headers.getall("X-Forwarded-For", []), trusted)
        if address is None:
            return None
        # The store is synchronous: catching up in a thread keeps other callers served meanwhile.
        await asyncio.to_thread(found.current)
        return found.lookup(address)

    def answered(
        handler: Callable[[Match], web.Response],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            try:
                match = await identify(request)
            except (StoreError, NotReady) as exc:
                _log.warning("cannot read the hardware", error=str(exc))
                return web.Response(status=503, text="the store cannot be read\n")
            except Ambiguous:
                match = None
            if match is None:
                return web.Response(status=404, text="not found\n")
            request[HARDWARE_NAME] = match.hardware.name
            return handler(match)

        return handle

    def listing(match: Match) -> web.Response:
        return web.Response(text="\n".join(meta_data(match)))

    def entry(name: str) -> Callable[[Match], web.Response]:
        def answer(match: Match) -> web.Response:
            value = meta_data(match).get(name)
            if value is None:
                return web.Response(status=404, text="not found\n")
            return web.Response(text=value)

        return answer

    def user_data(match: Match) -> web.Response:
        instance = match.hardware.spec.instance
        if instance is None or instance.userdata is None:
            return web.Response(status=404, text="not found\n")
        return web.Response(body=instance.userdata.encode(), content_type="text/plain")

    @web.middleware
    async def access_log(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            _log.info("hegel request", path=request.path, status=exc.status, hardware=None)
            raise
        _log.info(
            "hegel request", path=request.path, status=response.status, hardware=request.get(HARDWARE_NAME)
        )
        return response

    async def feed(app: web.Application) -> AsyncIterator[None]:
        stop = threading.Event()
        found.start(store, stop)
        yield
        stop.set()
        await asyncio.to_thread(found.join, 10.0)

    app = web.Application(middlewares=[access_log])
    if own:
        app.cleanup_ctx.append(feed)
    app.router.add_get(META_DATA, answered(listing))
    app.router.add_get(f"{META_DATA}/", answered(listing))
    for name in ("instance-id", "hostname", "local-ipv4"):
        app.router.add_get(f"{META_DATA}/{name}", answered(entry(name)))
    app.router.add_get(USER_DATA, answered(user_data))
    return app


class RunningHegel(RunningServer):
    """Hegel on its own event loop in a background thread."""


def start_in_thread(
    store: ObjectStore,
    bind: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    trusted: Sequence[IPNetwork] = (),
    index: HardwareIndex | None = None,
) -> RunningHegel:
    """Serve Hegel in a background thread; returns once the port is bound (OSError when it cannot be).
    ``index``: an index someone else keeps (see :func:`build_app`)."""

    async def server(stopping: asyncio.Event, ready: Ready) -> None:
        runner = web.AppRunner(build_app(store, trusted, index), handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, bind, port)
            await site.start()
            host, bound = runner.addresses[0][:2]
            url = f"http://{f'[{host}]' if ':' in host else host}:{bound}"
            _log.info("serving hegel metadata", url=url, trusted_proxies=[str(n) for n in trusted])
            ready({"url": url, "port": bound})
            await stopping.wait()
        finally:
            await runner.cleanup()

    info, handle = start_loop_thread(server, "capa-hegel")
    return RunningHegel(info["url"], info["port"], handle)


__all__ = [
    "DEFAULT_PORT",
    "Ambiguous",
    "HardwareIndex",
    "Match",
    "RunningHegel",
    "build_app",
    "caller_address",
    "find_caller",
    "parse_trusted_proxies",
    "start_in_thread",
]
