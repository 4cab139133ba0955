"""Validating admission webhooks: ``capa apply``'s admission for objects written to a real API server.

A real API server checks a custom resource against its CRD's schema only; what the schema cannot express
(CIDRs inside the VPC, zones of the region, immutable fields…) is checked here, by the same code
``capa apply`` and ``capa serve`` run (:func:`capa_py.apiserver.resources.admit`). The API server sends an
``admission.k8s.io/v1`` ``AdmissionReview`` to ``POST /validate-<group>-<version>-<kind>``
(controller-runtime's path convention: the group's dots as dashes, the kind in lower case) over HTTPS; the
answer allows the write or denies it with a ``Status`` whose ``details.causes`` name each field, as a 422
from the API server would.

Certificates come from a directory holding ``tls.crt`` and ``tls.key`` (controller-runtime's
``--webhook-cert-dir`` layout, as cert-manager writes it); they are re-read when either file changes, so a
rotated certificate is served without a restart.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.apiserver.discovery import group_version
from capa_py.apiserver.resources import Target, admit
from capa_py.apiserver.status import ApiError
from capa_py.logging import get_logger
from capa_py.runtime.background import Ready, RunningServer, start_loop_thread

_log = get_logger("webhooks")

ADMISSION_API_VERSION = "admission.k8s.io/v1"
DEFAULT_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
DEFAULT_PORT = 9443
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


class WebhookConfigError(ValueError):
    """The webhook cannot be served as configured (a missing or unreadable certificate)."""


def validate_path(model: type[KubeObject]) -> str:
    """``/validate-infrastructure-cluster-x-k8s-io-v1beta2-awscluster`` for AWSCluster."""
    group, version = group_version(model)
    prefix = f"{group.replace('.', '-')}-" if group else "core-"
    return f"/validate-{prefix}{version}-{model.KIND.lower()}"


def validated_kinds(registry: KindRegistry = REGISTRY) -> list[type[KubeObject]]:
    """The kinds the webhook validates: the custom kinds, those a CRD (``capa manifests crds``) defines."""
    from capa_py.manifests.crds import custom_kinds

    return custom_kinds(registry)


_KEPT_METADATA = frozenset(field.alias or name for name, field in ObjectMeta.model_fields.items())


def _as_stored(document: Any) -> Any:
    """The object without the metadata the API server keeps for itself (``managedFields``, ``selfLink``):
    the models do not keep it, and what they do not keep is not the object's to be judged on."""
    if not isinstance(document, Mapping) or not isinstance(document.get("metadata"), Mapping):
        return document
    metadata = {k: v for k, v in document["metadata"].items() if k in _KEPT_METADATA}
    return {**document, "metadata": metadata}


def review(model: type[KubeObject], document: Any) -> dict[str, Any]:
    """The ``AdmissionReview`` answering one request for ``model``; raises ``ValueError`` for a body
    that is not an AdmissionReview request."""
    if not isinstance(document, Mapping) or not isinstance(document.get("request"), Mapping):
        raise ValueError("the body is not an AdmissionReview with a request")
    request = document["request"]
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ValueError("request.uid is required")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    operation = request.get("operation")
    if operation in ("CREATE", "UPDATE"):
        new = _as_stored(request.get("object"))
        old_doc = _as_stored(request.get("oldObject")) if operation == "UPDATE" else None
        namespace = request.get("namespace") or None
        name = request.get("name") or None
        if name is None and isinstance(new, Mapping) and isinstance(new.get("metadata"), Mapping):
            name = new["metadata"].get("name")
        target = Target(model, namespace, name, None)
        try:
            old = model.model_validate(old_doc) if isinstance(old_doc, Mapping) else None
            admit(target, new, old, dry_run=request.get("dryRun") is True)
        except ApiError as exc:
            response = {"uid": uid, "allowed": False, "status": exc.status()}
        except ValueError as exc:  # an old object that no longer validates: judge the new one alone
            _log.info("old object does not validate; checking the new one alone", error=str(exc))
            try:
                admit(target, new, None)
            except ApiError as inner:
                response = {"uid": uid, "allowed": False, "status": inner.status()}
    _log.info(
        "admission reviewed",
        kind=model.KIND,
        operation=operation,
        namespace=request.get("namespace"),
        name=request.get("name"),
        allowed=response["allowed"],
    )
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def build_app(registry: KindRegistry = REGISTRY) -> web.Application:
    """The webhook application: one ``POST`` route per validated kind."""
    app = web.Application(client_max_size=8 * 1024 * 1024)

    def handler_for(model: type[KubeObject]) -> Any:
        async def handle(request: web.Request) -> web.Response:
            try:
                document = json.loads(await request.read())
                answer = review(model, document)
            except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
                return web.json_response({"error": f"bad AdmissionReview: {exc}"}, status=400)
            return web.json_response(answer)

        return handle

    for model in validated_kinds(registry):
        app.router.add_post(validate_path(model), handler_for(model))
    return app


class CertificateReloader:
    """An SSL context serving ``tls.crt``/``tls.key`` from ``cert_dir``, reloaded when they change."""

    def __init__(self, cert_dir: Path, flag: str = "--webhook-cert-dir") -> None:
        self.cert_dir = cert_dir
        self.flag = flag
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple[float, float] | None = None
        self.reload()

    def _paths(self) -> tuple[Path, Path]:
        return self.cert_dir / CERT_FILE, self.cert_dir / KEY_FILE

    def _current_stamp(self) -> tuple[float, float]:
        cert, key = self._paths()
        try:
            return cert.stat().st_mtime, key.stat().st_mtime
        except OSError as exc:
            raise WebhookConfigError(
                f"{self.flag} {self.cert_dir}: needs {CERT_FILE} and {KEY_FILE} ({exc.strerror}: "
                f"{exc.filename})"
            ) from exc

    def _culprit(self) -> str:
        """Which file a failed load is about: the certificate when it does not parse, else the key (which
        does not parse or does not match the certificate)."""
        cert, key = self._paths()
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.load_verify_locations(cafile=cert)
        except (ssl.SSLError, OSError):
            return f"{cert.name} is not a PEM certificate"
        return f"{key.name} is not a PEM private key matching {cert.name}"

    def reload(self) -> bool:
        """Load the files if they changed since the last load; True when they were (re)loaded."""
        stamp = self._current_stamp()
        if stamp == self._stamp:
            return False
        cert, key = self._paths()
        try:
            self.context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise WebhookConfigError(f"{self.flag} {self.cert_dir}: {self._culprit()}: {exc}") from exc
        if self._stamp is not None:
            _log.info("serving certificate reloaded", cert_dir=str(self.cert_dir))
        self._stamp = stamp
        return True


class RunningWebhook(RunningServer):
    """The webhook server on its own event loop in a background thread."""


def start_in_thread(
    cert_dir: Path,
    bind: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    registry: KindRegistry = REGISTRY,
    reload_interval: float = 10.0,
) -> RunningWebhook:
    """Serve the webhooks over HTTPS in a background thread; returns once the port is bound. A missing
    or bad certificate raises :class:`WebhookConfigError` before anything is served."""
    certificates = CertificateReloader(cert_dir)

    async def server(stopping: asyncio.Event, ready: Ready) -> None:
        runner = web.AppRunner(build_app(registry), handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, bind, port, ssl_context=certificates.context)
            await site.start()
            host, bound = runner.addresses[0][:2]
            url = f"https://{f'[{host}]' if ':' in host else host}:{bound}"
            _log.info("serving validating webhooks", url=url, cert_dir=str(cert_dir))
            ready({"url": url, "port": bound})
            while not stopping.is_set():
                try:
                    await asyncio.wait_for(stopping.wait(), reload_interval)
                except TimeoutError:
                    try:
                        certificates.reload()
                    except WebhookConfigError as exc:
                        _log.warning(
                            "webhook certificate not reloaded; serving the previous one", error=str(exc)
                        )
        finally:
            await runner.cleanup()

    try:
        info, handle = start_loop_thread(server, "capa-webhooks")
    except Exception as exc:
        raise WebhookConfigError(f"the webhook server did not start: {exc}") from exc
    return RunningWebhook(info["url"], info["port"], handle)
