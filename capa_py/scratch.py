"""Private scratch space: files a process needs on disk for as long as it runs, and no longer.

Some things only take a path: a TLS context loads its certificate and key from files, and the Kubernetes
client writes a kubeconfig's inline certificate data to files before it can use them. Left in the system's
temporary directory, those files outlive a process that is killed (its clean-up never runs), and a serving
CA's key stays behind.

Each process that needs such files gets one directory, :func:`process_directory`:
``<tmp>/capa-py-<uid>/processes/<pid>-<random>/``, private to the user. The process holds an exclusive
``flock`` on a ``lock`` file inside it for as long as it lives; the directory is removed when the process
exits normally, and the first process to make its own directory after one was killed removes the dead one's
(its lock is free: the kernel released it with the process). Nothing there is ever read by another process.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

from capa_py.logging import get_logger

_log = get_logger("scratch")

PROCESSES = "processes"
"""The folder of :func:`private_root` holding one directory per live process."""

LOCK_NAME = "lock"

UNLOCKED_GRACE_SECONDS = 60.0
"""A directory with no lock file this long after it was made belongs to a process that died making it."""

_lock = threading.Lock()
_directory: Path | None = None
_lock_fd: int | None = None
_owner_pid: int | None = None


def private_root() -> Path | None:
    """``<tmp>/capa-py-<uid>``, made private to the user; None when it is not ours or not private."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    root = Path(tempfile.gettempdir()) / f"capa-py-{uid}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = root.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        _log.warning("private temporary directory not used: it is not private", directory=str(root))
        return None
    return root


def process_directory() -> Path | None:
    """This process's scratch directory (made on the first call; a forked child gets its own), or None
    when no private directory can be made: callers then use the system's temporary directory."""
    global _directory, _lock_fd, _owner_pid
    with _lock:
        if _directory is not None and _owner_pid == os.getpid():
            return _directory
        root = private_root()
        if root is None:
            return None
        parent = root / PROCESSES
        for _attempt in range(3):
            try:
                parent.mkdir(mode=0o700, exist_ok=True)
                sweep(parent)
                directory = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))
                fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except FileNotFoundError:
                continue  # another process removed the emptied parent meanwhile: make it again
            except OSError as exc:
                _log.info("private temporary directory not used", reason=str(exc))
                return None
        else:
            return None
        _directory, _lock_fd, _owner_pid = directory, fd, os.getpid()
        return directory


def kube_client_files() -> str | None:
    """Where the Kubernetes client writes a kubeconfig's inline certificate data (its ``temp_file_path``):
    a folder of :func:`process_directory`, or None (the system's temporary directory) when there is none."""
    directory = process_directory()
    return None if directory is None else str(directory / "kube")


def sweep(parent: Path) -> None:
    """Remove the directories of processes that are gone: those whose lock nobody holds."""
    with contextlib.suppress(OSError):
        for directory in parent.iterdir():
            if _owner_pid == os.getpid() and directory == _directory:
                continue
            if _abandoned(directory):
                shutil.rmtree(directory, ignore_errors=True)


def _abandoned(directory: Path) -> bool:
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        # Being made right now (its lock comes first thing after it), or its process died in between.
        with contextlib.suppress(OSError):
            return time.time() - directory.stat().st_mtime > UNLOCKED_GRACE_SECONDS
        return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # its process holds it: alive
    finally:
        os.close(fd)  # closing releases the probe's own lock
    return True


def _remove_own() -> None:
    global _directory, _lock_fd, _owner_pid
    with _lock:
        if _directory is None or _owner_pid != os.getpid():
            return
        shutil.rmtree(_directory, ignore_errors=True)
        if _lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(_lock_fd)
        _directory = _lock_fd = _owner_pid = None


atexit.register(_remove_own)
