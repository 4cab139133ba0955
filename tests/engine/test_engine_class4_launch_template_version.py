"""Strategy class 4 on a resource whose API really is class 4: a launch template version.

``CreateLaunchTemplateVersion`` takes a ``ClientToken`` and no tags, and a version has no name
(``tests/resources/test_resource_traits.py`` checks this against botocore's model). moto 5.2 ignores the
token — a repeated create makes a second version — so these tests run against the harness server that
honours it (``tests/harness/moto_tokens.py`` wraps ``CreateLaunchTemplateVersion``), with the ``moto``
profile's lowering of ``client_token`` lifted for this kind only. The four edge cases of class 4, by fault
injection: (1) there is no tagging; (2) a failed status write is retried and the same token returns the same
version; (3) no delete is ever attempted; (4) after a crash the same token returns the version the
interrupted create made.
"""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.aws.errors import InvalidRequest
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import RetryableError
from capa_py.engine.profiles import MOTO
from capa_py.engine.tokens import client_token
from capa_py.engine.traits import StrategyClass
from resources.launch_template import LaunchTemplateVersion, LaunchTemplateVersionDesired
from tests.engine.support import Faults, Owner, SimulatedCrash, records
from tests.resources.builders import Builder

ROLE = "launch-template-version-pool-a"
KIND = LaunchTemplateVersion.kind


def token_engine() -> Engine:
    """The moto profile, but trusting the token for versions: the harness server honours it."""
    return Engine(MOTO.with_overrides({KIND: {"client_token": True}}, name="moto+version-tokens"))


def versions(aws: AWSClients, template_id: str) -> list[int]:
    items = aws.ec2.call("DescribeLaunchTemplateVersions", LaunchTemplateId=template_id)
    return sorted(int(v["VersionNumber"]) for v in items["LaunchTemplateVersions"])


@pytest.fixture
def desired(build_tokens: Builder) -> LaunchTemplateVersionDesired:
    return build_tokens.launch_template_version_desired(instance_type="m5.large")


def test_declared_traits_select_token_only_where_tokens_are_honoured(aws_tokens: AWSClients) -> None:
    resource = LaunchTemplateVersion(aws_tokens)
    assert token_engine().strategy(resource) == StrategyClass.TOKEN_NO_TAGS
    assert Engine(MOTO).strategy(resource) == StrategyClass.NO_TAGS_NO_TOKEN, (
        "plain moto ignores the token: the version falls back to an intent"
    )


def test_creates_one_untagged_version_with_the_owner_token_and_never_tags(
    aws_tokens: AWSClients, desired: LaunchTemplateVersionDesired, owner: Owner, faults: Faults
) -> None:
    create_tags = faults.fail(aws_tokens, "CreateTags")
    creates = faults.watch(aws_tokens, "CreateLaunchTemplateVersion")

    observed = token_engine().ensure(LaunchTemplateVersion(aws_tokens), ROLE, desired, owner.scope())

    assert create_tags.seen == 0, "class 4 has no tagging to fail"
    assert observed.id == f"{desired.template_id}:2"
    assert versions(aws_tokens, desired.template_id) == [1, 2]
    (params,) = creates.params
    assert params["ClientToken"] == client_token(owner.uid, ROLE)
    assert "TagSpecifications" not in params
    recorded = owner.status().resources[ROLE]
    assert (recorded.id, recorded.strategy) == (observed.id, "token-only")
    assert owner.status().intents == {}, "a token needs no intent"


def test_failed_status_write_is_retried_with_the_same_token_and_never_deletes(
    aws_tokens: AWSClients, desired: LaunchTemplateVersionDesired, owner: Owner, faults: Faults
) -> None:
    owner.store.fail_status_writes(records(ROLE))
    delete = faults.fail(aws_tokens, "DeleteLaunchTemplateVersions")
    delete_template = faults.fail(aws_tokens, "DeleteLaunchTemplate")

    with pytest.raises(RetryableError, match="recording failed"):
        token_engine().ensure(LaunchTemplateVersion(aws_tokens), ROLE, desired, owner.scope())
    assert (delete.seen, delete_template.seen) == (0, 0), "class 4 never deletes on a failed status write"
    assert versions(aws_tokens, desired.template_id) == [1, 2]

    owner.store.heal()
    observed = token_engine().ensure(LaunchTemplateVersion(aws_tokens), ROLE, desired, owner.scope())

    assert observed.id == f"{desired.template_id}:2", "the same token returns the same version"
    assert versions(aws_tokens, desired.template_id) == [1, 2], "no second version"
    assert owner.status().resources[ROLE].id == observed.id


def test_crash_after_create_gets_the_same_version_by_token_after_restart(
    aws_tokens: AWSClients, desired: LaunchTemplateVersionDesired, owner: Owner, faults: Faults
) -> None:
    faults.crash_after(aws_tokens, "CreateLaunchTemplateVersion")

    with pytest.raises(SimulatedCrash):
        token_engine().ensure(LaunchTemplateVersion(aws_tokens), ROLE, desired, owner.scope())
    assert versions(aws_tokens, desired.template_id) == [1, 2]
    assert owner.status().resources == {}
    assert owner.status().intents == {}, "a token needs no intent"
    faults.clear()

    observed = token_engine().ensure(LaunchTemplateVersion(aws_tokens), ROLE, desired, owner.scope())

    assert observed.id == f"{desired.template_id}:2"
    assert versions(aws_tokens, desired.template_id) == [1, 2], "exactly one new version"
    assert owner.status().resources[ROLE].id == observed.id


def test_same_token_with_other_launch_data_is_refused_not_a_second_version(
    aws_tokens: AWSClients, build_tokens: Builder, desired: LaunchTemplateVersionDesired
) -> None:
    token = client_token("pool-uid", ROLE)
    resource = LaunchTemplateVersion(aws_tokens)
    first = resource.create(desired, None, token)
    changed: Any = LaunchTemplateVersionDesired(desired.template_id, build_tokens.launch_data("c5.xlarge"))

    assert resource.create(desired, None, token).id == first.id
    with pytest.raises(InvalidRequest, match="IdempotentParameterMismatch"):
        resource.create(changed, None, token)
    assert versions(aws_tokens, desired.template_id) == [1, 2]


def test_plain_moto_ignores_the_version_token(aws: AWSClients, build: Builder) -> None:
    """Why the moto profile lowers the token: plain moto makes a second version for a repeated token."""
    desired = build.launch_template_version_desired()
    resource = LaunchTemplateVersion(aws)
    token = client_token("pool-uid", ROLE)

    assert resource.create(desired, None, token).id != resource.create(desired, None, token).id
