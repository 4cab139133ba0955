"""Fixtures for the tests that run only against LocalStack (``CAPA_TEST_AWS_ENDPOINT`` set).

* ``localstack`` (session): the :class:`~tests.localstack.endpoint.ExternalEndpoint`, checked once; without
  ``CAPA_TEST_AWS_ENDPOINT`` every test asking for it is skipped, with the reason.
* ``aws``: clients for a new, empty LocalStack account (LocalStack has no reset).
"""

from __future__ import annotations

import pytest

from capa_py.aws.session import AWSClients
from tests.localstack.endpoint import NEEDS_LOCALSTACK, ExternalEndpoint, endpoint_url


@pytest.fixture(scope="session")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> ExternalEndpoint:
    url = endpoint_url()
    if url is None:
        pytest.skip(NEEDS_LOCALSTACK)
    return ExternalEndpoint.connect(url, tmp_path_factory.mktemp("aws-env"))


@pytest.fixture
def aws(localstack: ExternalEndpoint) -> AWSClients:
    """Clients for a new LocalStack account: every test starts from an empty one."""
    return localstack.clients()
