"""The embedded store over the Kubernetes REST API (``capa serve``).

Nothing below this package imports it: it is a layer over :mod:`capa_py.store` and :mod:`capa_py.api`.
"""

from capa_py.apiserver.server import RunningServer, build_app, serve, start_in_thread

__all__ = ["RunningServer", "build_app", "serve", "start_in_thread"]
