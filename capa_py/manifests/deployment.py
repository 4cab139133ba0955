"""The controller Deployment and its metrics Service, as a management cluster runs capa-py.

Two replicas of ``capa --store kube controller --leader-elect`` (one reconciles, the other waits on the
Lease), probes on the health port, Prometheus metrics on 8080 behind a Service, a locked-down pod (non-root,
read-only root filesystem with a writable ``emptyDir`` at ``/tmp``, no privilege escalation, every capability
dropped) and the AWS credentials from the Secret :data:`CREDENTIALS_SECRET`, which is optional (the pods start
without it, with no credentials) and holds either or both of: the key ``credentials``, an AWS shared
credentials file (``[default]`` with ``aws_access_key_id``, ``aws_secret_access_key``, optionally
``region``), mounted at :data:`CREDENTIALS_DIR` and named by ``AWS_SHARED_CREDENTIALS_FILE`` and
``AWS_CONFIG_FILE``; the keys of :data:`CREDENTIALS_ENV`, each set as the environment variable of its name.
``capa manifests all`` does not print the Secret (create it yourself); the clusterctl provider repository's
components do, from ``${AWS_B64ENCODED_CREDENTIALS}`` (:mod:`capa_py.manifests.repository`). The image is
built from the repository's ``Dockerfile``.

The pods also serve the validating webhooks on :data:`WEBHOOK_PORT` with the certificate cert-manager
writes to the Secret :data:`WEBHOOK_CERT_SECRET`, mounted read-only at :data:`WEBHOOK_CERT_DIR` (a mount
inside the ``/tmp`` emptyDir, which Kubernetes allows); :mod:`capa_py.manifests.webhooks` registers them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capa_py.defaults import DEFAULT_IMAGE
from capa_py.manifests.rbac import COMMON_LABELS, NAMESPACE, SERVICE_ACCOUNT

DEPLOYMENT = "capa-py-controller-manager"
METRICS_SERVICE = "capa-py-controller-manager-metrics"
CONTAINER = "manager"
CREDENTIALS_SECRET = "capa-py-manager-bootstrap-credentials"
CREDENTIALS_KEY = "credentials"
CREDENTIALS_DIR = "/etc/capa-py/aws"
CREDENTIALS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
)
METRICS_PORT = 8080
HEALTH_PORT = 8081
REPLICAS = 2
RUN_AS = 65532
WEBHOOK_PORT = 9443
WEBHOOK_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
"""controller-runtime's default certificate directory (``capa_py.webhooks.DEFAULT_CERT_DIR``)."""
WEBHOOK_CERT_SECRET = "capa-py-webhook-service-cert"
"""The uid and gid of the image's user (``Dockerfile``)."""

SELECTOR = {"app.kubernetes.io/name": "capa-py", "app.kubernetes.io/component": "controller-manager"}

ARGS = (
    "--store",
    "kube",
    "controller",
    "--leader-elect",
    f"--metrics-bind-address=:{METRICS_PORT}",
    f"--health-probe-bind-address=:{HEALTH_PORT}",
    f"--webhook-cert-dir={WEBHOOK_CERT_DIR}",
    f"--webhook-bind-address=:{WEBHOOK_PORT}",
)


def labels() -> dict[str, str]:
    """The labels of the controller's pods and of the objects around them."""
    return {**COMMON_LABELS, **SELECTOR}


def _probe(path: str, initial_delay: int, period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "healthz"},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": period,
    }


def deployment(
    image: str = DEFAULT_IMAGE,
    extra_args: Sequence[str] = (),
    extra_ports: Sequence[dict[str, Any]] = (),
    webhooks: bool = True,
) -> dict[str, Any]:
    """The controller Deployment. ``extra_args`` follow the controller's own (``--providers``...),
    ``extra_ports`` are more container ports; ``webhooks=False`` leaves out the webhook server (its flags,
    port and certificate volume: without cert-manager there is no certificate to mount)."""
    args = [*ARGS, *extra_args] if webhooks else [a for a in ARGS if "webhook" not in a] + list(extra_args)
    ports: list[dict[str, Any]] = [
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        {"name": "healthz", "containerPort": HEALTH_PORT, "protocol": "TCP"},
    ]
    if webhooks:
        ports.append({"name": "webhook-server", "containerPort": WEBHOOK_PORT, "protocol": "TCP"})
    ports += extra_ports
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    if webhooks:
        mounts.append({"name": "webhook-cert", "mountPath": WEBHOOK_CERT_DIR, "readOnly": True})
        volumes.append({"name": "webhook-cert", "secret": {"secretName": WEBHOOK_CERT_SECRET}})
    mounts.append({"name": "aws-credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True})
    volumes.append(
        {"name": "aws-credentials", "secret": {"secretName": CREDENTIALS_SECRET, "optional": True}}
    )
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "ports": ports,
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "AWS_SHARED_CREDENTIALS_FILE", "value": f"{CREDENTIALS_DIR}/{CREDENTIALS_KEY}"},
            {"name": "AWS_CONFIG_FILE", "value": f"{CREDENTIALS_DIR}/{CREDENTIALS_KEY}"},
            *(
                {
                    "name": key,
                    "valueFrom": {"secretKeyRef": {"name": CREDENTIALS_SECRET, "key": key, "optional": True}},
                }
                for key in CREDENTIALS_ENV
            ),
        ],
        "livenessProbe": _probe("/healthz", 15, 20),
        "readinessProbe": _probe("/readyz", 5, 10),
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE, "labels": labels()},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": dict(SELECTOR)},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def metrics_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": METRICS_SERVICE, "namespace": NAMESPACE, "labels": labels()},
        "spec": {
            "selector": dict(SELECTOR),
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }


def workload(image: str = DEFAULT_IMAGE, webhooks: bool = True) -> list[dict[str, Any]]:
    """The Deployment and its metrics Service; ``webhooks=False``: its pods serve no webhook (they are
    served elsewhere)."""
    return [deployment(image, webhooks=webhooks), metrics_service()]
