"""The controller's Deployment: its Namespace, the Deployment itself and the Service Prometheus scrapes.

Two replicas with leader election (one reconciles, the other waits on the Lease), liveness on ``/healthz``
and readiness on ``/readyz``, a metrics port, a non-root user with a read-only root filesystem (``/tmp`` is
an ``emptyDir``), and AWS credentials from a Secret through ``env`` ``valueFrom``: create it with
``kubectl -n capa-system create secret generic capa-aws-credentials --from-literal=AWS_ACCESS_KEY_ID=…
--from-literal=AWS_SECRET_ACCESS_KEY=…`` (``AWS_SESSION_TOKEN`` and ``AWS_REGION`` are optional keys).
"""

from __future__ import annotations

from typing import Any

from capa_py import __version__
from capa_py.manifests.rbac import COMMON_LABELS, NAMESPACE, SERVICE_ACCOUNT

DEPLOYMENT = "capa-controller-manager"
METRICS_SERVICE = "capa-controller-manager-metrics-service"
CREDENTIALS_SECRET = "capa-aws-credentials"
DEFAULT_IMAGE = f"capa-py:{__version__}"
"""The image the repository's Dockerfile builds (``docker build -t capa-py:<version> .``)."""
METRICS_PORT = 8080
HEALTH_PORT = 8081
RUN_AS_USER = 65532
"""The Dockerfile's non-root user."""

SELECTOR = {"app.kubernetes.io/name": "capa-py", "app.kubernetes.io/component": "controller-manager"}

# (variable, key in the Secret, optional)
_CREDENTIALS = (
    ("AWS_ACCESS_KEY_ID", False),
    ("AWS_SECRET_ACCESS_KEY", False),
    ("AWS_SESSION_TOKEN", True),
    ("AWS_REGION", True),
)


def namespace() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": dict(COMMON_LABELS)},
    }


def _env() -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    for variable, optional in _CREDENTIALS:
        ref: dict[str, Any] = {"name": CREDENTIALS_SECRET, "key": variable}
        if optional:
            ref["optional"] = True
        env.append({"name": variable, "valueFrom": {"secretKeyRef": ref}})
    return env


def _probe(path: str, initial_delay: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "healthz"},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": 10,
    }


def deployment(image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    labels = {**COMMON_LABELS, **SELECTOR}
    container = {
        "name": "manager",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["capa"],
        # --store is a global option and comes before the subcommand.
        "args": [
            "--store",
            "kube",
            "--log-format",
            "json",
            "controller",
            "--leader-elect",
            f"--metrics-bind-address=:{METRICS_PORT}",
            f"--health-probe-bind-address=:{HEALTH_PORT}",
        ],
        "ports": [
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
            {"name": "healthz", "containerPort": HEALTH_PORT, "protocol": "TCP"},
        ],
        "env": _env(),
        "livenessProbe": _probe("/healthz", 15),
        "readinessProbe": _probe("/readyz", 5),
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": dict(SELECTOR)},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS_USER,
                        "runAsGroup": RUN_AS_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def metrics_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": METRICS_SERVICE,
            "namespace": NAMESPACE,
            "labels": {**COMMON_LABELS, **SELECTOR},
        },
        "spec": {
            "selector": dict(SELECTOR),
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }


def deployment_documents(image: str = DEFAULT_IMAGE) -> list[dict[str, Any]]:
    return [namespace(), deployment(image), metrics_service()]
