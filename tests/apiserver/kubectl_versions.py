"""The kubectl binaries a test can run: ``kubectl`` on PATH and the versioned ``kubectl.1.NN`` ones, looked
for on PATH and then in :data:`PLACES`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PLACES = ("/usr/lib/google-cloud-sdk/bin",)
"""Where versioned kubectl binaries are installed beside the Google Cloud SDK, looked in after PATH."""

MINORS = range(27, 34)


def kubectl_binaries() -> list[tuple[str, Path]]:
    """(label, binary) of each kubectl found: ``kubectl`` then ``1.27`` … ``1.33`` (missing ones left out)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *PLACES])
    found: list[tuple[str, Path]] = []
    default = shutil.which("kubectl", path=search)
    if default is not None:
        found.append(("kubectl", Path(default)))
    for minor in MINORS:
        binary = shutil.which(f"kubectl.1.{minor}", path=search)
        if binary is not None:
            found.append((f"1.{minor}", Path(binary)))
    return found
