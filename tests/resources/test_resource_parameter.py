"""The SSM Parameter Store parameter (a machine's bootstrap data chunk with ``ssm-parameter-store``) against
moto over HTTP: strategy class 1 (``PutParameter`` takes ``Tags``) without a client token and with a natural
key (the name). The engine's flow and its edge cases under fault injection run on both backends in
test_resource_bootstrap_chunks.py.

``PutParameter`` has no token on AWS either: what saves a repeated create is the lookup by tags, then by
name, before every create, and a repeat of a name that exists is refused (``ParameterAlreadyExists``)
rather than overwriting it (capa-py never sends ``Overwrite``).
"""

from __future__ import annotations

import pytest

from capa_py.aws.errors import AlreadyExists, NotFound
from capa_py.aws.session import AWSClients
from capa_py.engine.profiles import AWS, MOTO
from capa_py.engine.tags import managed_tags
from capa_py.engine.traits import StrategyClass
from resources.parameter import MAX_VALUE, Parameter, ParameterDesired

ROLE = "bootstrap-parameter-machine-0"
DESIRED = ParameterDesired("/cluster.x-k8s.io/0f5c-machine/0", "H4sIAAAAAAAA/chunkofbootstrapdata")


def _names(aws: AWSClients) -> list[str]:
    return sorted(p["Name"] for p in aws.client("ssm").pages("DescribeParameters", "Parameters"))


def test_a_parameter_is_class_one_without_a_token_and_with_a_key() -> None:
    assert Parameter.traits.strategy is StrategyClass.TAG_ON_CREATE
    assert not AWS.effective("parameter", Parameter.traits).client_token
    assert MOTO.effective("parameter", Parameter.traits).natural_key
    assert Parameter(None).fingerprint(DESIRED) == {"name": DESIRED.name}  # type: ignore[arg-type]
    assert "chunk" not in repr(DESIRED), "the value stays out of reprs (and so out of logs)"


def test_a_repeated_put_of_a_taken_name_is_refused_not_overwritten(aws: AWSClients) -> None:
    Parameter(aws).create(DESIRED, managed_tags("alpha", ROLE), None)
    with pytest.raises(AlreadyExists):
        Parameter(aws).create(ParameterDesired(DESIRED.name, "another value"), None, None)
    stored = aws.client("ssm").call("GetParameter", Name=DESIRED.name, WithDecryption=True)
    assert stored["Parameter"]["Value"] == DESIRED.value


def test_a_value_over_the_standard_tier_is_refused_before_any_call(aws: AWSClients) -> None:
    with pytest.raises(ValueError, match="longer than 4096"):
        Parameter(aws).create(ParameterDesired("/cluster.x-k8s.io/big/0", "x" * (MAX_VALUE + 1)), None, None)
    assert _names(aws) == []


def test_deleting_a_parameter_that_is_gone_is_not_found(aws: AWSClients) -> None:
    Parameter(aws).create(DESIRED, managed_tags("alpha", ROLE), None)
    Parameter(aws).delete(DESIRED.name)

    assert _names(aws) == []
    with pytest.raises(NotFound):
        Parameter(aws).delete(DESIRED.name)
