"""Hegel's index: source address to Hardware, kept up to date by the store's events, so that a request
reads no Hardware list.

A :class:`HardwareIndex` holds every Hardware (every namespace) and, for each address one of their
interfaces declares in ``dhcp.ip``, the Hardware claiming it. It is fed in one of two ways:

* :meth:`HardwareIndex.attach` makes it a handler of an :class:`~capa_py.runtime.informer.Informer` of
  Hardware that sees every Hardware (``capa controller``: the process's own informer); it is ready once
  the informer has listed;
* :meth:`HardwareIndex.start` runs its own list and watch in a thread (``capa tink hegel``, a cluster's
  servers): a watch that ends is started again from the last event, one that answers ``Expired`` or fails
  makes it list again; from a failure until the next list succeeds the index is not usable (503).

A request arriving before the first list waits for it (up to :data:`LIST_WAIT` seconds, then 503).

Each event is applied only when it is not older than what the index holds for that object (a deletion
is remembered by its version until the next list), so the same event arriving twice, or out of order
from two feeds, changes nothing.

With a store telling its latest resourceVersion cheaply (the embedded SQLite store:
:class:`~capa_py.store.protocol.ChangeSequence`), :meth:`HardwareIndex.current` reads that one row per
request and, when it moved, the Hardware events since the index's last one: a Hardware written a moment
ago through another handle is answered at once, as when every request listed. Over a Kubernetes API
server the index is as current as its watch (a change answers after its event).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware
from capa_py.logging import get_logger
from capa_py.runtime.informer import Informer
from capa_py.store.errors import Expired
from capa_py.store.protocol import ObjectStore, WatchEvent, change_sequence_of

_log = get_logger("tinkerbell.hegel")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Key = tuple[str, str]

RETRY_DELAY = 1.0
"""Seconds between attempts to list again after the store could not be read."""
QUICK_WATCH = 0.1
"""A watch ending sooner than this without an event is restarted only after this long."""
LIST_WAIT = 5.0
"""How long a request arriving before the first list waits for it (then 503)."""


def parse_address(text: str) -> IPAddress | None:
    """An address written as ``1.2.3.4``, ``::1`` or ``[::1]`` (IPv4-mapped IPv6 as IPv4); None if none."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class Match:
    """The Hardware a caller is, and the interface whose address it called from."""

    hardware: Hardware
    ip: str
    hostname: str | None


class Ambiguous(Exception):
    """Two Hardware claim the caller's address."""


class NotReady(Exception):
    """The index has not listed the Hardware yet, or the store could not be read since it last did."""


def matches_of(item: Hardware) -> dict[IPAddress, Match]:
    """Each address ``item`` declares, with the first interface declaring it."""
    found: dict[IPAddress, Match] = {}
    for interface in item.spec.network_interfaces.values():
        dhcp = interface.dhcp
        if dhcp is None:
            continue
        address = parse_address(dhcp.ip)
        if address is not None and address not in found:
            found[address] = Match(item, dhcp.ip, dhcp.hostname or None)
    return found


def _version(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


class HardwareIndex:
    """Every Hardware, by the addresses its interfaces declare."""

    def __init__(self, retry_delay: float = RETRY_DELAY, list_wait: float = LIST_WAIT) -> None:
        self.retry_delay = retry_delay
        self.list_wait = list_wait
        self._tried = threading.Event()
        """Set once the own feed's first list succeeded or failed."""
        self._lock = threading.Lock()
        self._matches: dict[Key, dict[IPAddress, Match]] = {}
        self._by_address: dict[IPAddress, dict[Key, Match]] = {}
        self._versions: dict[Key, int] = {}
        """The version of what the index holds for each key; for a deleted one, of its deletion."""
        self._resource_version = 0
        """The latest event of a feed taken in: where a catch-up reads from."""
        self._ready = False
        self._failure: str | None = None
        self._informer: Informer | None = None
        self._store: ObjectStore | None = None
        self._head: Callable[[], str] | None = None
        self._caught_up_to: str | None = None
        self._thread: threading.Thread | None = None
        self.lists = 0
        """How many times the index listed the store itself (its own feed's lists)."""

    # -- feeds --------------------------------------------------------------------------------------
    def attach(self, informer: Informer, store: ObjectStore | None = None) -> None:
        """Take the events of ``informer`` (of Hardware, every namespace, no selector); ``store`` (the one
        the informer reads) lets requests catch up with it when it tells its latest version cheaply."""
        if informer.kind is not Hardware or informer.namespace is not None or informer.label_selector:
            raise ValueError("hegel's index needs an informer of every Hardware (no namespace, no selector)")
        self._informer = informer
        self._use(store)
        informer.add_handler(self._informer_event)

    def start(self, store: ObjectStore, stop: threading.Event) -> None:
        """List and watch ``store`` in a thread until ``stop`` is set."""
        self._use(store)
        self._thread = threading.Thread(
            target=self.run, args=(store, stop), name="capa-hegel-index", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _use(self, store: ObjectStore | None) -> None:
        self._store = store
        self._head = None if store is None else change_sequence_of(store)

    def run(self, store: ObjectStore, stop: threading.Event) -> None:
        """List, then watch until ``stop`` is set: list again after ``Expired`` or a failure."""
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    listed = store.list(Hardware)
                    self.lists += 1
                    self.replace(listed, listed.resource_version)
                    version = listed.resource_version
                    self._tried.set()
                started, delivered = time.monotonic(), 0
                for event in store.watch(Hardware, resource_version=version, stop=stop):
                    self.apply(event)
                    version = event.resource_version
                    delivered += 1
                if not delivered and time.monotonic() - started < QUICK_WATCH:
                    stop.wait(QUICK_WATCH)
            except Expired as exc:
                _log.info("hegel index watch expired; listing again", reason=str(exc))
                version = None
            except Exception as exc:
                _log.warning("cannot read the hardware", error=str(exc))
                self._fail(str(exc))
                version = None
                self._tried.set()
                stop.wait(self.retry_delay)

    def _fail(self, reason: str) -> None:
        with self._lock:
            self._failure = reason

    def _informer_event(self, event: WatchEvent[KubeObject]) -> None:
        if isinstance(event.object, Hardware):
            self.apply(event)  # type: ignore[arg-type]

    # -- keeping the index --------------------------------------------------------------------------
    def replace(self, listed: Iterable[Hardware], resource_version: str) -> None:
        """A complete list as of ``resource_version``: what it lacks and the index holds from before is
        gone; the index is usable from now on."""
        at = _version(resource_version)
        with self._lock:
            present: set[Key] = set()
            for item in listed:
                key = self._key(item)
                present.add(key)
                self._put(key, item, _version(item.metadata.resource_version))
            for key in [k for k, v in self._versions.items() if k not in present and v <= at]:
                self._drop(key, at)
            # Deletions older than the list are in it now: they need not be remembered.
            for key in [k for k, v in self._versions.items() if k not in self._matches and v <= at]:
                del self._versions[key]
            self._resource_version = max(self._resource_version, at)
            self._ready, self._failure = True, None

    def apply(self, event: WatchEvent[Hardware]) -> None:
        """One watch event (ignored when the index already holds a newer state of that Hardware)."""
        key = self._key(event.object)
        at = _version(event.resource_version)
        with self._lock:
            if event.type == "DELETED":
                if at >= self._versions.get(key, 0):
                    self._drop(key, at)
            else:
                self._put(key, event.object, _version(event.object.metadata.resource_version) or at)
            self._resource_version = max(self._resource_version, at)

    def _put(self, key: Key, item: Hardware, version: int) -> None:
        if version < self._versions.get(key, 0):
            return
        self._unindex(key)
        self._versions[key] = version
        matches = matches_of(item)
        self._matches[key] = matches
        for address, match in matches.items():
            self._by_address.setdefault(address, {})[key] = match

    def _drop(self, key: Key, version: int) -> None:
        self._unindex(key)
        self._matches.pop(key, None)
        self._versions[key] = max(version, self._versions.get(key, 0))

    def _unindex(self, key: Key) -> None:
        for address in self._matches.get(key, {}):
            claims = self._by_address.get(address)
            if claims is None:
                continue
            claims.pop(key, None)
            if not claims:
                del self._by_address[address]

    @staticmethod
    def _key(item: KubeObject) -> Key:
        return (item.metadata.namespace or "default", item.metadata.name)

    # -- answering ----------------------------------------------------------------------------------
    def current(self) -> None:
        """Make the index answer for what the store holds now: NotReady when it cannot, StoreError when
        the store cannot be read. Reads one row per call when the store tells its latest version cheaply,
        and the Hardware events since the last one only when that moved; never a list."""
        with self._lock:
            ready, failure = self._ready, self._failure
        if not ready and failure is None:
            # Just started: the first list is on its way (a request as the server starts waits for it).
            if self._informer is not None:
                if self._informer.wait_for_sync(self.list_wait):
                    self._seed(self._informer)
            elif self._thread is not None and self._tried.wait(self.list_wait):
                pass
            with self._lock:
                ready, failure = self._ready, self._failure
        if failure is not None:
            raise NotReady(f"the hardware cannot be read: {failure}")
        if not ready:
            raise NotReady("the hardware have not been listed yet")
        if self._head is None or self._store is None:
            return
        head = self._head()
        if head == self._caught_up_to:
            return
        with self._lock:
            since = str(self._resource_version)
        try:
            for event in self._store.watch(Hardware, resource_version=since, timeout=0):
                self.apply(event)
        except Expired:
            # Compacted past the index's last event: its feed lists again; until then, it answers as it
            # stands (the feed's own watch expired too, or will).
            return
        # Read before the catch-up: a write landing during it is read again next time, never lost. Every
        # Hardware event up to it is in the index now, so the next catch-up starts there.
        self._caught_up_to = head
        with self._lock:
            self._resource_version = max(self._resource_version, _version(head))

    def _seed(self, informer: Informer) -> None:
        """The informer's cache, once it has listed (events the index took meanwhile are not undone: the
        version is read before the cache, so what the cache lacks and the index holds is newer)."""
        version = informer.resource_version
        self.replace((item for item in informer.list() if isinstance(item, Hardware)), version)

    def lookup(self, address: IPAddress) -> Match | None:
        """The Hardware declaring ``address``; :class:`Ambiguous` (logged as a warning naming both) when
        more than one does."""
        with self._lock:
            claims = list(self._by_address.get(address, {}).items())
        if len(claims) > 1:
            names = ", ".join(sorted(f"{namespace}/{name}" for (namespace, name), _ in claims))
            _log.warning("address claimed by more than one hardware", address=str(address), hardware=names)
            raise Ambiguous(names)
        return claims[0][1] if claims else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._matches)


__all__ = [
    "Ambiguous",
    "HardwareIndex",
    "Match",
    "NotReady",
    "matches_of",
    "parse_address",
]
