"""Fields whose values capa-py cannot honour are refused when the manifest loads, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.api.loader import ManifestError, load_manifests

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"


def _load_with(tmp_path: Path, old: str, new: str) -> None:
    text = EXAMPLE.read_text()
    assert old in text
    manifest = tmp_path / "edited.yaml"
    manifest.write_text(text.replace(old, new, 1))
    load_manifests([manifest])


def test_an_api_server_port_other_than_6443_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"spec.clusterNetwork.apiServerPort: .*only 6443 is supported"):
        _load_with(tmp_path, "  clusterNetwork:\n", "  clusterNetwork:\n    apiServerPort: 443\n")


def test_an_api_server_port_of_6443_is_accepted(tmp_path: Path) -> None:
    _load_with(tmp_path, "  clusterNetwork:\n", "  clusterNetwork:\n    apiServerPort: 6443\n")


def test_a_provisioned_iops_volume_without_iops_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"spec.rootVolume: .*iops is required for volume type io2"):
        _load_with(tmp_path, "    type: gp3\n", "    type: io2\n")
