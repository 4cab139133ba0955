"""kubectl as a client peer: ``kubectl`` and the kubectl of each minor version, ``kubectl.1.27`` ...
``kubectl.1.33``, as the Google Cloud SDK installs them side by side in its ``bin`` folder.

Every test finds kubectl here. :func:`find_kubectl` looks on ``PATH`` first, then in the SDK's ``bin`` folder:
the one ``gcloud`` runs from (following its symlink), else the first of :data:`SDK_PLACES` that exists. A
version that is nowhere is reported with the places searched, for the test to skip with that reason.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

VERSIONS = ("1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33")
"""The kubectl minor versions the matrix runs, oldest first."""

SDK_PLACES = (
    "/usr/lib/google-cloud-sdk",
    "/usr/share/google-cloud-sdk",
    "/usr/local/google-cloud-sdk",
    "/opt/google-cloud-sdk",
    "/snap/google-cloud-cli/current",
    "~/google-cloud-sdk",
)
"""Conventional installation folders of the Google Cloud SDK (packages, tarballs, snap), tried when
``gcloud`` is not on ``PATH``."""


@dataclass(frozen=True)
class Found:
    """``path`` is the executable, or None with ``reason`` saying where it was looked for."""

    version: str
    path: Path | None
    reason: str = ""


def sdk_bin() -> Path | None:
    """The Google Cloud SDK's ``bin`` folder: where ``gcloud`` really lives, else a conventional place."""
    gcloud = shutil.which("gcloud")
    if gcloud is not None:
        folder = Path(gcloud).resolve().parent
        if folder.name == "bin":
            return folder
    for place in SDK_PLACES:
        folder = Path(place).expanduser() / "bin"
        if folder.is_dir():
            return folder
    return None


def _search_path() -> tuple[str, Path | None]:
    folder = sdk_bin()
    search = os.environ.get("PATH", "")
    if folder is not None:
        search = os.pathsep.join(p for p in (search, str(folder)) if p)
    return search, folder


def find_kubectl(version: str | None = None) -> Found:
    """``kubectl.<version>`` (``"1.27"``), or plain ``kubectl`` when ``version`` is None."""
    name = f"kubectl.{version}" if version else "kubectl"
    search, folder = _search_path()
    found = shutil.which(name, path=search)
    if found is not None:
        return Found(version or "", Path(found))
    where = f"PATH and {folder}" if folder is not None else "PATH (no Google Cloud SDK found)"
    return Found(version or "", None, f"{name} is not installed: looked on {where}")


def kubectl_binary(version: str | None = None) -> str | None:
    """The executable :func:`find_kubectl` finds, as a string; None when it finds none."""
    found = find_kubectl(version).path
    return None if found is None else str(found)


def kubectl_binaries() -> list[tuple[str, Path]]:
    """(label, binary) of every kubectl found: ``kubectl``, then ``1.27`` ... ``1.33``."""
    found: list[tuple[str, Path]] = []
    for version in (None, *VERSIONS):
        path = find_kubectl(version).path
        if path is not None:
            found.append((version or "kubectl", path))
    return found
