"""capa-py as a clusterctl infrastructure provider: a local provider repository.

clusterctl reads a provider from a local repository laid out as
``<root>/infrastructure-capa-py/<version>/``, holding the provider's components
(:data:`COMPONENTS_FILE`, named in clusterctl's configuration by a ``file://`` URL) and, beside it,
:data:`METADATA_FILE`: clusterctl's ``Metadata`` (``clusterctl.cluster.x-k8s.io/v1alpha3``), whose
``releaseSeries`` maps each ``major.minor`` of capa-py to the Cluster API contract it implements
(the newest of :data:`~capa_py.manifests.crds.INFRASTRUCTURE_CONTRACTS`).

The components are what an infrastructure provider installs beside Cluster API core (``clusterctl init``
installs core, and cert-manager, first):

- the Namespace :data:`~capa_py.manifests.rbac.NAMESPACE`;
- the CRDs of the infrastructure kinds only (AWS and Tinkerbell): Cluster API core owns Cluster, Machine
  and the rest, and capa-py's ClusterConfig belongs to its own workflows, not to a provider;
- the controller's ServiceAccount, ClusterRole and binding, and :data:`AGGREGATED_ROLE`, a ClusterRole
  labelled ``cluster.x-k8s.io/aggregate-to-manager: "true"`` that Cluster API core's manager role
  aggregates: what core needs on the infrastructure kinds (owner references, labels, the cascade);
- the Secret :data:`~capa_py.manifests.deployment.CREDENTIALS_SECRET` holding
  ``${AWS_B64ENCODED_CREDENTIALS}`` (a base64 AWS shared credentials file, as ``clusterawsadm bootstrap
  credentials encode-as-profile`` prints) under the key the Deployment mounts;
- the controller Deployment with capa-py's core controllers off (``--core-controllers=off``: Cluster API
  core reconciles Clusters and Machines), its metrics Service, and the validating webhooks with
  cert-manager's certificate.

Variables use clusterctl's syntax, ``${VAR}`` (required) and ``${VAR:=default}``: :data:`VARIABLES`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from capa_py import __version__
from capa_py.defaults import IMAGE_REPOSITORY
from capa_py.manifests.components import core_kinds
from capa_py.manifests.crds import (
    INFRASTRUCTURE_CONTRACTS,
    crd_for,
    custom_kinds,
    group_version,
    is_infrastructure_kind,
)
from capa_py.manifests.deployment import (
    CREDENTIALS_KEY,
    CREDENTIALS_SECRET,
    deployment,
    metrics_service,
)
from capa_py.manifests.rbac import NAMESPACE, object_metadata, rbac
from capa_py.manifests.webhooks import webhook_documents

PROVIDER_NAME = "capa-py"
PROVIDER_TYPE = "InfrastructureProvider"
PROVIDER_DIRECTORY = f"infrastructure-{PROVIDER_NAME}"
COMPONENTS_FILE = "infrastructure-components.yaml"
METADATA_FILE = "metadata.yaml"
METADATA_API_VERSION = "clusterctl.cluster.x-k8s.io/v1alpha3"
AGGREGATED_ROLE = "capa-py-aggregated-manager-role"
AGGREGATE_TO_MANAGER = "cluster.x-k8s.io/aggregate-to-manager"

CREDENTIALS_VARIABLE = "AWS_B64ENCODED_CREDENTIALS"
VARIABLES: dict[str, str | None] = {CREDENTIALS_VARIABLE: None}
"""The clusterctl variables of the components: name → default (``None``: required)."""

CORE_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
"""What Cluster API core's controllers do to an infrastructure object: set its owner reference and cluster
label, read its status, delete it with its owner (Cluster API's provider contract asks for all of them)."""


def release_series(version: str) -> list[dict[str, Any]]:
    """The ``releaseSeries`` of the metadata: this version's ``major.minor`` implements the newest contract
    the infrastructure CRDs are labelled for (the one clusterctl and Cluster API core of that contract
    expect)."""
    major, minor = _major_minor(version)
    return [{"major": major, "minor": minor, "contract": INFRASTRUCTURE_CONTRACTS[-1]}]


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.removeprefix("v").split("-")[0].split("+")[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"a release version is vMAJOR.MINOR.PATCH, not {version!r}")
    return int(parts[0]), int(parts[1])


def tag(version: str) -> str:
    """The version as clusterctl names its directory: ``v`` then ``major.minor.patch``."""
    _major_minor(version)
    return version if version.startswith("v") else f"v{version}"


def metadata(version: str = __version__, earlier: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The metadata of release ``version``: its release series and the ``earlier`` ones (other releases'
    series, as their metadata lists them), newest first. clusterctl reads the newest release's metadata for
    every release of the provider (``clusterctl upgrade plan`` fails with "does not match any release
    series" when the installed release's ``major.minor`` is missing there)."""
    series = {(s["major"], s["minor"]): s for s in earlier or []}
    for own in release_series(version):
        series[(own["major"], own["minor"])] = own
    return {
        "apiVersion": METADATA_API_VERSION,
        "kind": "Metadata",
        "releaseSeries": [series[key] for key in sorted(series, reverse=True)],
    }


def released_series(provider_directory: Path) -> list[dict[str, Any]]:
    """Every release series named by the metadata of the releases already in a repository."""
    found: list[dict[str, Any]] = []
    for path in sorted(provider_directory.glob(f"v*/{METADATA_FILE}")):
        document = yaml.safe_load(path.read_text()) or {}
        found += [
            {"major": int(s["major"]), "minor": int(s["minor"]), "contract": str(s["contract"])}
            for s in document.get("releaseSeries") or []
        ]
    return found


def infrastructure_kinds() -> list[Any]:
    """The kinds whose CRDs the provider ships: every custom kind but those no provider owns."""
    core = set(core_kinds())
    return [kind for kind in custom_kinds() if kind not in core]


def aggregated_role() -> dict[str, Any]:
    """Cluster API core's access to the infrastructure kinds, aggregated into its manager role."""
    groups: dict[str, list[str]] = {}
    for kind in infrastructure_kinds():
        if is_infrastructure_kind(kind):
            resources = groups.setdefault(group_version(kind)[0], [])
            resources.append(kind.PLURAL)
            if kind.HAS_STATUS:
                resources.append(f"{kind.PLURAL}/status")
    meta = object_metadata(AGGREGATED_ROLE)
    meta["labels"][AGGREGATE_TO_MANAGER] = "true"
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": [
            {"apiGroups": [group], "resources": sorted(resources), "verbs": list(CORE_VERBS)}
            for group, resources in sorted(groups.items())
        ],
    }


def credentials_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(CREDENTIALS_SECRET, NAMESPACE),
        "type": "Opaque",
        "data": {CREDENTIALS_KEY: f"${{{CREDENTIALS_VARIABLE}}}"},
    }


def release_image(version: str) -> str:
    """The controller image of a release: ``ghcr.io/capa-py/capa-py:<major.minor.patch>``."""
    return f"{IMAGE_REPOSITORY}:{tag(version).removeprefix('v')}"


def components(image: str) -> list[dict[str, Any]]:
    """The provider's components, in the order they can be applied."""
    first, *access = rbac()
    return [
        first,
        *(crd_for(kind) for kind in infrastructure_kinds()),
        *access,
        aggregated_role(),
        credentials_secret(),
        deployment(image, ["--core-controllers=off"]),
        metrics_service(),
        *webhook_documents(),
    ]


def render_components(image: str) -> str:
    return "".join(
        "---\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)
        for doc in components(image)
    )


def write_repository(root: Path, version: str = __version__, image: str | None = None) -> Path:
    """Write the provider's release ``version`` under ``root`` (its controller ``image``, by default the
    release's :func:`release_image`), its metadata listing the release series of the releases already
    there too; the version directory is returned."""
    directory = root / PROVIDER_DIRECTORY / tag(version)
    earlier = released_series(root / PROVIDER_DIRECTORY)  # before this release's own is (re)written
    directory.mkdir(parents=True, exist_ok=True)
    (directory / COMPONENTS_FILE).write_text(render_components(image or release_image(version)))
    (directory / METADATA_FILE).write_text(
        yaml.safe_dump(metadata(version, earlier), sort_keys=False, default_flow_style=False)
    )
    return directory
