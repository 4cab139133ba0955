"""Load balancer and target group names derived from a cluster name are always names AWS accepts."""

from __future__ import annotations

import re

import pytest

from controllers.services.loadbalancer import aws_name

_ELB_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?$")


@pytest.mark.parametrize(
    "cluster",
    ["demo", "my.cluster", "a.b.c.d", "internal-prod", "x" * 63, "long.dotted.name.for.a.cluster.example"],
)
@pytest.mark.parametrize("suffix", ["apiserver", "apiserver-tg"])
def test_derived_names_are_valid_elb_names(cluster: str, suffix: str) -> None:
    name = aws_name(cluster, suffix)
    assert _ELB_NAME.match(name), f"{name!r} (from {cluster!r}) is not a valid load balancer name"
    assert not name.lower().startswith("internal-"), name
    assert aws_name(cluster, suffix) == name, "derived names must be deterministic"


def test_names_that_are_already_valid_are_unchanged() -> None:
    assert aws_name("demo", "apiserver") == "demo-apiserver"
    assert aws_name("demo", "apiserver-tg") == "demo-apiserver-tg"


def test_long_names_keep_their_known_form() -> None:
    # Names of existing load balancers must not move: a 32+ character name keeps its truncated-hash form.
    assert aws_name("a-very-long-cluster-name-indeed", "apiserver") == "a-very-long-cluster-name-cb9fc4"


def test_sanitised_names_stay_unique_per_cluster() -> None:
    assert aws_name("my.cluster", "apiserver") != aws_name("my-cluster", "apiserver")
    assert aws_name("my.cluster", "apiserver").startswith("my-cluster-apiserver-")
