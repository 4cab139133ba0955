"""``spec.spotMarketOptions`` on an AWSMachine (Cluster API Provider AWS's field): its presence asks for a
Spot Instance; ``maxPrice`` must be a price AWS would take (a decimal above 0.001 US dollars an hour)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from capa_py.api.aws import AWSMachine
from capa_py.api.loader import ManifestError, load_manifest_text


def _machine(spot: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSMachine",
            "metadata": {"name": "m", "namespace": "default"},
            "spec": {"instanceType": "t3.medium", "ami": {"id": "ami-785db401"}, "spotMarketOptions": spot},
        }
    )


@pytest.mark.parametrize(
    ("spot", "price"), [({}, None), ({"maxPrice": "0.05"}, "0.05"), ({"maxPrice": "2"}, "2")]
)
def test_spot_options_load_with_or_without_a_price(spot: dict[str, str], price: str | None) -> None:
    machine = load_manifest_text(_machine(spot))[0]
    assert isinstance(machine, AWSMachine)
    assert machine.spec.spot_market_options is not None
    assert machine.spec.spot_market_options.max_price == price


@pytest.mark.parametrize(
    ("price", "message"),
    [
        ("cheap", "not a price in US dollars: 'cheap'"),
        ("0.001", "must be more than 0.001"),
        ("-1", "must be more than 0.001"),
        ("NaN", "must be more than 0.001"),
    ],
)
def test_a_price_aws_would_refuse_is_refused_naming_the_field(price: str, message: str) -> None:
    with pytest.raises(ManifestError) as refused:
        load_manifest_text(_machine({"maxPrice": price}))
    assert "spec.spotMarketOptions.maxPrice" in str(refused.value), str(refused.value)
    assert message in str(refused.value), str(refused.value)


def test_an_unknown_spot_field_is_refused() -> None:
    with pytest.raises(ManifestError) as refused:
        load_manifest_text(_machine({"interruptionBehavior": "stop"}))
    assert "spec.spotMarketOptions.interruptionBehavior" in str(refused.value), str(refused.value)


def test_an_empty_spot_options_object_is_kept_on_the_wire_as_a_go_pointer_is() -> None:
    """``spotMarketOptions: {}`` asks for Spot Instances at up to the On-Demand price: stored and served, the
    empty object stays (other empty objects are dropped, as Go's omitempty drops them)."""
    machine = load_manifest_text(_machine({}))[0]
    wire = machine.to_dict()
    assert wire["spec"]["spotMarketOptions"] == {}
    again = AWSMachine.from_dict(wire)
    assert again.spec.spot_market_options is not None
    assert "rootVolume" not in wire["spec"]
