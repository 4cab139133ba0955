"""Change notification for a SQLite store file, across the processes that share it.

A store's readers learn of writes by reading its ``events`` table; without a signal they would have to read
it over and over. Each process keeps one :class:`ChangeSignal` per store file: a generation number that a
commit of this process raises, and that a datagram from another process's commit raises too.

The datagrams travel over Unix domain sockets in a private directory of the user's temporary directory,
named after the store file's resolved path (so every process opening the same file finds the same one): a
process that waits for changes binds a socket there once; a process that commits sends one byte to every
other socket in it. A socket left by a process that died is removed by the first writer that finds nobody
reading it. Nothing else is said: a datagram only wakes the reader, which then reads the table.

Where no socket can be made (no Unix sockets, a path too long, a directory someone else owns) the signal
still wakes this process's own waiters, and readers fall back to polling at their interval.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import secrets
import socket
import threading
import time
from pathlib import Path

from capa_py.logging import get_logger
from capa_py.scratch import PROCESSES, private_root

_log = get_logger("store.notify")

THREAD_NAME = "capa-store-notify"
"""The receiving threads' names: this, a dash and the store's socket directory's name."""

STOP_CHECK_SECONDS = 0.25
"""How often a waiter given a ``stop`` event looks at it."""

SOCKET_PATH_LIMIT = 100
"""Longest socket path used (Linux allows 107 bytes, macOS 103)."""

_signals: dict[Path, ChangeSignal] = {}
_signals_lock = threading.Lock()


def signal_for(path: Path) -> ChangeSignal:
    """The process's signal of the store file at ``path`` (one per file, shared by every store open on it);
    each store :func:`release` s it when it closes."""
    resolved = path.resolve()
    with _signals_lock:
        found = _signals.get(resolved)
        if found is None:
            found = _signals[resolved] = ChangeSignal(resolved)
        found.users += 1
        return found


def release(signal: ChangeSignal) -> None:
    """A store on the signal's file closed: the last one to close stops listening (socket and thread)."""
    with _signals_lock:
        signal.users -= 1
        if signal.users > 0:
            return
        if _signals.get(signal.path) is signal:
            del _signals[signal.path]
    signal.stop()


def _reset_after_fork() -> None:
    global _signals_lock
    _signals_lock = threading.Lock()
    for signal in _signals.values():
        signal._after_fork()


def _at_exit() -> None:
    for signal in list(_signals.values()):
        signal._forget_socket()


atexit.register(_at_exit)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _remove_dead(peer: Path) -> None:
    """Remove the socket of a process that is gone, and its directory once empty."""
    with contextlib.suppress(OSError):
        peer.unlink()
    with contextlib.suppress(OSError):
        peer.parent.rmdir()


def _alive(peer: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(str(peer))  # connecting sends nothing: a live reader is not woken
    except ConnectionRefusedError:
        return False
    except OSError:
        return True  # gone meanwhile, or not ours to judge
    finally:
        probe.close()
    return True


def sweep(root: Path) -> None:
    """Remove what killed processes left under ``root``: sockets nobody reads, and emptied directories
    (stores whose readers all went away, their files perhaps deleted since)."""
    with contextlib.suppress(OSError):
        for directory in root.iterdir():
            if directory.name == PROCESSES:
                continue  # processes' scratch directories: capa_py.scratch sweeps them
            with contextlib.suppress(OSError):
                for peer in directory.iterdir():
                    if peer.name.endswith(".sock") and not _alive(peer):
                        with contextlib.suppress(OSError):
                            peer.unlink()
                directory.rmdir()  # only when empty


class ChangeSignal:
    """One store file's changes, as this process learns of them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._generation = 0
        self._condition = threading.Condition()
        self._directory: Path | None = None
        self._own: Path | None = None
        self._listening = False
        self._available = hasattr(socket, "AF_UNIX")
        self._sender: socket.socket | None = None
        self._receiver: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._owner_pid = 0
        self._stopping = False
        self.users = 0
        """Stores open on the file in this process (:func:`signal_for`, :func:`release`)."""

    def _after_fork(self) -> None:
        """In a forked child: the parent's socket and receiving thread are not this process's."""
        self._close_sockets()
        self._listening = False
        self._own = None
        self._send_lock = threading.Lock()
        self._condition = threading.Condition()

    @property
    def listening(self) -> bool:
        """Whether other processes' commits reach this process (else its readers poll)."""
        return self._listening

    def _socket_directory(self) -> Path | None:
        if self._directory is None and self._available:
            root = private_root()
            if root is None:
                self._available = False
                return None
            digest = hashlib.sha256(str(self.path).encode()).hexdigest()[:16]
            self._directory = root / digest
        return self._directory

    # -- readers --------------------------------------------------------------------------------------
    def generation(self) -> int:
        """The current generation; taken before a read, then :meth:`wait` returns once a change after that
        read is known. The first call starts listening for other processes' commits."""
        if not self._listening and self._available:
            self._listen()
        with self._condition:
            return self._generation

    def wait(self, generation: int, timeout: float, stop: threading.Event | None = None) -> bool:
        """Wait up to ``timeout`` seconds for a change after ``generation``, or until ``stop`` is set
        (looked at every :data:`STOP_CHECK_SECONDS`); whether a change came."""
        end = time.monotonic() + timeout
        with self._condition:
            while self._generation == generation:
                left = end - time.monotonic()
                if left <= 0 or (stop is not None and stop.is_set()):
                    return False
                self._condition.wait(min(left, STOP_CHECK_SECONDS) if stop is not None else left)
            return True

    def _listen(self) -> None:
        with self._send_lock:
            if self._listening or not self._available:
                return
            directory = self._socket_directory()
            if directory is None:
                return
            own = directory / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
            if len(os.fsencode(own)) > SOCKET_PATH_LIMIT:
                _log.info("store change notification off: socket path too long", store=str(self.path))
                self._available = False
                return
            sweep(directory.parent)
            receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            for attempt in range(3):
                try:
                    directory.mkdir(mode=0o700, exist_ok=True)
                    receiver.bind(str(own))
                    break
                except FileNotFoundError:
                    if attempt < 2:
                        continue  # a writer removed the directory, empty, between the two steps
                    failure = "the socket directory keeps disappearing"
                except OSError as exc:
                    failure = str(exc)
                receiver.close()
                _log.info("store change notification off", store=str(self.path), reason=failure)
                self._available = False
                return
            self._own = own
            self._receiver = receiver
            self._owner_pid = os.getpid()
            self._listening = True
            threading.Thread(
                target=self._receive,
                args=(receiver,),
                name=f"{THREAD_NAME}-{directory.name}",
                daemon=True,
            ).start()

    def _receive(self, receiver: socket.socket) -> None:
        while True:
            try:
                receiver.recv(64)
            except OSError:
                return
            if self._stopping:
                receiver.close()
                return
            self._raise()

    def stop(self) -> None:
        """Stop listening: the receiving thread ends (woken by a datagram of our own), the socket goes."""
        with self._send_lock:
            self._stopping = True
            receiver, own = self._receiver, self._own
            if receiver is not None and own is not None and self._owner_pid == os.getpid():
                with contextlib.suppress(OSError):
                    wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    try:
                        wake.sendto(b"!", str(own))
                    finally:
                        wake.close()
            self._receiver = None  # closed by its thread
            if self._sender is not None:
                self._sender.close()
                self._sender = None
            self._listening = False
            self._available = False
            self._unlink_own()

    def _close_sockets(self) -> None:
        for sock in (self._sender, self._receiver):
            if sock is not None:
                sock.close()
        self._sender = self._receiver = None

    def _forget_socket(self) -> None:
        self._close_sockets()
        self._unlink_own()

    def _unlink_own(self) -> None:
        if self._own is not None and self._owner_pid == os.getpid():  # never a forked child's doing
            with contextlib.suppress(OSError):
                self._own.unlink()
            with contextlib.suppress(OSError):
                self._own.parent.rmdir()  # the last reader of this store leaves no directory behind
        self._own = None

    # -- writers --------------------------------------------------------------------------------------
    def changed(self) -> None:
        """A commit of this process: wake its own waiters and tell every other process reading the file."""
        self._raise()
        directory = self._socket_directory()
        if directory is None:
            return
        try:
            names = os.listdir(directory)
        except OSError:
            return  # nobody reads this store with notification yet
        own = self._own.name if self._own is not None else None
        with self._send_lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            for name in names:
                if name == own or not name.endswith(".sock"):
                    continue
                peer = directory / name
                try:
                    self._sender.sendto(b"!", str(peer))
                except ConnectionRefusedError:
                    _remove_dead(peer)
                except OSError:
                    pass  # gone meanwhile, or its queue is full: it is awake already

    def _raise(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()
