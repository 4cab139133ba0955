"""The Secrets Manager secret (a machine's bootstrap data chunk): strategy class 1 (``CreateSecret`` takes
``Tags``) with a client request token on AWS and a natural key (the name). The engine's flow and its edge
cases under fault injection run on both backends in test_resource_bootstrap_chunks.py.

moto ignores ``ClientRequestToken`` (the ``moto`` profile turns tokens off); on AWS the token answers a
repeated create too.
"""

from __future__ import annotations

from capa_py.engine.profiles import AWS, MOTO
from capa_py.engine.traits import StrategyClass
from resources.secret import Secret, SecretDesired

ROLE = "bootstrap-secret-0"
DESIRED = SecretDesired("aws.cluster.x-k8s.io/0f5c-machine-0", b"\x1f\x8b chunk of bootstrap data")


def test_a_secret_is_class_one_with_a_token_and_a_key() -> None:
    assert Secret.traits.strategy is StrategyClass.TAG_ON_CREATE
    assert AWS.effective("secret", Secret.traits).client_token
    assert not MOTO.effective("secret", Secret.traits).client_token
    assert Secret(None).fingerprint(DESIRED) == {"name": DESIRED.name}  # type: ignore[arg-type]
    assert "chunk" not in repr(DESIRED), "the contents stay out of reprs (and so out of logs)"

