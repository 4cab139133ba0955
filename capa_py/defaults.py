"""Defaults the command line shows in its options, kept in a module that imports nothing heavy: registering
``capa``'s commands (all ``--help`` needs) reads them without loading the store or the manifests.

:mod:`capa_py.store` and :mod:`capa_py.manifests.deployment` export them under the same names.
"""

from __future__ import annotations

from pathlib import Path

from capa_py import __version__

DEFAULT_STATE = Path(".capa") / "state.db"
"""Where the embedded SQLite store is, relative to the working directory."""

IMAGE_REPOSITORY = "ghcr.io/capa-py/capa-py"
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{__version__}"
"""The controller image the manifests deploy: this version's."""
