"""``python -m capa_app.cli`` runs the ``capa`` command."""

from capa_app.cli.main import run

run()
