"""schemathesis over capa serve's own OpenAPI v3 document: the operations of one kind (AWSCluster), with
requests generated from the parameters and bodies the document declares, sent to a running in-process
server. No answer is a server error, and every refusal is a ``Status``. Bounded (a few examples per
operation, the future resourceVersion's wait shortened, a watch's timeout one second) so it stays fast."""

from __future__ import annotations

import json
import os
import ssl
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from capa_py.apiserver import listoptions, start_in_thread
from capa_py.store import SQLiteStore

DOCUMENT = "/openapi/v3/apis/infrastructure.cluster.x-k8s.io/v1beta2"
EXAMPLES = max(1, int(os.environ.get("CAPA_FUZZ_EXAMPLES", "60")) // 12)
"""Per operation: 5 by default; ``CAPA_FUZZ_EXAMPLES=2000`` runs a longer search."""


@schemathesis.serializer("application/apply-patch+yaml")
def apply_patch_yaml(context: Any, value: Any) -> bytes:
    """A server-side apply body, as YAML."""
    return yaml.safe_dump(value).encode()


@dataclass(frozen=True)
class Served:
    """The server's URL, its admin's bearer token and the CA file that verifies it."""

    url: str
    token: str
    ca_file: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path: Path = tmp_path_factory.mktemp("schemathesis") / "state.db"
    with pytest.MonkeyPatch.context() as patch, SQLiteStore(path, poll_interval=0.02) as store:
        patch.setattr(listoptions, "TOO_LARGE_WAIT", 0.05)
        running = start_in_thread(store)
        try:
            yield Served(running.url, running.admin_token, str(running.files.ca_cert))
        finally:
            running.stop()


@pytest.fixture(scope="module")
def api_schema(served: Served) -> Any:
    request = urllib.request.Request(served.url + DOCUMENT, headers=served.headers)
    context = ssl.create_default_context(cafile=served.ca_file)
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        document = json.loads(response.read())
    return schemathesis.openapi.from_dict(document).include(path_regex=r"/awsclusters($|/)")


def check(served: Served, case: Any) -> None:
    if case.query and str(case.query.get("watch", "")).lower() not in ("", "0", "false"):
        case.query["timeoutSeconds"] = 1  # a watch ends after a second, not when the generator says
    response = case.call(base_url=served.url, timeout=30, headers=served.headers, verify=served.ca_file)
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400:
        status = response.json()
        assert status["kind"] == "Status"
        assert status["code"] == response.status_code


def test_no_generated_request_is_a_server_error(api_schema: Any, served: Served) -> None:
    """Each operation in turn (schemathesis' own pytest integration does not run under this pytest)."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) == 9  # list, create; get, replace, patch, delete; the status's get, replace, patch
    for operation in operations:

        @settings(
            max_examples=EXAMPLES,
            derandomize="CAPA_FUZZ_EXAMPLES" not in os.environ,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            check(served, case)

        run()
