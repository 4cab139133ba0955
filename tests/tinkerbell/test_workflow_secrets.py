"""Secret values in templates: an env value read from a Secret (``envValueFrom: {NAME: {secretKeyRef:
{name, key}}}``) reaches the agent in its StartWorkflow and never the Workflow's status, which shows
where the value comes from. Before, the only way to give an action a secret was a literal env value,
rendered into ``status.actions`` for anyone who can read Workflows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api.core import Secret
from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import (
    Action,
    EnvVarSource,
    SecretKeySelector,
    Template,
    TemplateSpec,
)
from capa_py.tinkerbell.prepare import render_template
from tests.tinkerbell.scripted_server import poll_until
from tests.tinkerbell.server_world import World, hardware, workflow

MAC = "aa:bb:cc:dd:ee:01"
PASSWORD = "registry-pa55word-value"
CLOUD_KEY = "cloud-key-value-xyz"


def from_secret(name: str, key: str) -> EnvVarSource:
    return EnvVarSource(secret_key_ref=SecretKeySelector(name=name, key=key))


def secret_template() -> Template:
    return Template(
        metadata=ObjectMeta(name="tpl", namespace="default"),
        spec=TemplateSpec(
            actions=[
                Action(
                    name="pull",
                    image="registry.example/pull:v1",
                    env={"REGISTRY_USER": "robot", "REGISTRY_PASSWORD": "overridden by the Secret"},
                    env_value_from={"REGISTRY_PASSWORD": from_secret("registry", "password")},
                ),
                Action(name="cloud", image="registry.example/cloud:v1", env={"CLOUD_KEY": "literal"}),
            ],
            env_value_from={"CLOUD_KEY": from_secret("cloud", "key")},
        ),
    )


def secret(name: str, **values: str) -> Secret:
    made = Secret(metadata=ObjectMeta(name=name, namespace="default"), string_data=dict(values))
    made.normalise()
    return made


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    w.apply(hardware("hw1", MAC), secret_template())
    yield w
    w.close()


def test_secret_values_reach_the_agent_and_status_shows_only_where_they_come_from(world: World) -> None:
    world.apply(secret("registry", password=PASSWORD), secret("cloud", key=CLOUD_KEY))
    prepared = world.submit("wf", "hw1")
    stored = json.dumps(prepared.model_dump(by_alias=True, mode="json"))
    assert PASSWORD not in stored, "no Secret value in the Workflow"
    assert CLOUD_KEY not in stored
    pull = prepared.status.actions["pull"].rendered
    assert pull.env == {"REGISTRY_USER": "robot"}, "a name taken from a Secret is not a literal too"
    assert pull.env_value_from == {
        "REGISTRY_PASSWORD": from_secret("registry", "password"),
        "CLOUD_KEY": from_secret("cloud", "key"),
    }
    cloud = prepared.status.actions["cloud"].rendered
    assert cloud.env == {"CLOUD_KEY": "literal"}, "the action's literal wins over the template's Secret"
    assert cloud.env_value_from == {}

    sent = world.connect("hw1").started()
    by_id = {a.id: dict(a.env) for a in sent.actions}
    assert by_id == {
        "pull": {"REGISTRY_USER": "robot", "REGISTRY_PASSWORD": PASSWORD, "CLOUD_KEY": CLOUD_KEY},
        "cloud": {"CLOUD_KEY": "literal"},
    }
    scheduled = world.wait_state("wf", "Scheduled")
    assert PASSWORD not in json.dumps(scheduled.model_dump(by_alias=True, mode="json"))


def test_the_template_level_secret_applies_to_actions_without_their_own(world: World) -> None:
    rendered = render_template(
        Template(
            metadata=ObjectMeta(name="t", namespace="default"),
            spec=TemplateSpec(
                actions=[Action(name="only", image="i")], env_value_from={"TOKEN": from_secret("s", "k")}
            ),
        ),
        {},
    )
    assert rendered[0].env == {}
    assert rendered[0].env_value_from == {"TOKEN": from_secret("s", "k")}


def test_a_workflow_whose_secret_is_missing_is_held_pending_and_sent_once_it_exists(world: World) -> None:
    world.apply(secret("cloud", key=CLOUD_KEY))  # "registry" is missing
    world.submit("wf", "hw1")
    agent = world.connect("hw1")
    dispatcher = world.server.dispatcher
    poll_until(lambda: len(dispatcher.sessions()) == 1, "the agent to connect")
    dispatcher.evaluate(("default", "hw1"))  # what a change of its workflows would do
    assert world.state("wf") == "Pending"
    world.apply(secret("registry", other="no password key"))
    dispatcher.evaluate(("default", "hw1"))
    assert world.state("wf") == "Pending"
    world.apply(secret("registry", password=PASSWORD))  # the server watches Secrets: sent at once
    sent = agent.started()
    assert sent.workflow_id == "default/wf"
    assert dict(sent.actions[0].env)["REGISTRY_PASSWORD"] == PASSWORD


def test_template_checks_name_a_bad_env_value_from() -> None:
    bad = secret_template()
    bad.spec.actions[0].env_value_from = {"1BAD": from_secret("", "")}
    issues = {issue.path: issue.message for issue in bad.semantic_issues()}
    at = 'spec.actions[0].envValueFrom["1BAD"]'
    assert "not an environment variable name" in issues[at]
    assert issues[f"{at}.secretKeyRef.name"] == "required"
    assert issues[f"{at}.secretKeyRef.key"] == "required"


def test_a_workflow_reads_secrets_of_its_own_namespace_only(world: World) -> None:
    """The Template may live elsewhere: the Secret is the Workflow's namespace's, as a Pod's would be."""
    lab = [secret("registry", password="lab-password"), secret("cloud", key="lab-cloud-key")]
    for made in lab:
        made.metadata.namespace = "lab"
    world.apply(*lab, secret("registry", password=PASSWORD), secret("cloud", key=CLOUD_KEY))
    world.apply(hardware("hw-lab", "aa:bb:cc:dd:ee:07", namespace="lab"))
    wf = workflow("wf", "hw-lab", namespace="lab")
    world.apply(wf)
    world.prepare("wf", "lab")
    sent = world.connect("hw-lab").started()
    assert sent.workflow_id == "lab/wf"
    env = dict(sent.actions[0].env)
    assert (env["REGISTRY_PASSWORD"], env["CLOUD_KEY"]) == ("lab-password", "lab-cloud-key")
