"""``python -m capa_py.cli`` runs the ``capa`` command."""

from capa_py.cli.main import run

run()
