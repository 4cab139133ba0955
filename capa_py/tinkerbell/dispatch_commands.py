"""What the workflow server sends on an agent's stream: StartWorkflow with the rendered actions (their
``envValueFrom`` Secrets read), and StopWorkflow."""

from __future__ import annotations

from collections.abc import Callable

from capa_py.api.core import Secret
from capa_py.api.tinkerbell import SecretKeySelector, Workflow
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell.dispatch_streams import WorkflowKey, key_of, workflow_id
from capa_py.tinkerbell.proto import workflow_pb2 as pb


class SecretUnavailable(Exception):
    """An ``envValueFrom`` Secret or key that cannot be read; the message names them, never a value."""


SecretReader = Callable[[str, SecretKeySelector], str]
"""Reads a Secret's key in a namespace (SecretUnavailable when it cannot)."""


def _no_secrets(namespace: str, ref: SecretKeySelector) -> str:
    raise SecretUnavailable(f"secret {namespace}/{ref.name} cannot be read here")


def store_secret_reader(store: ObjectStore) -> SecretReader:
    def read(namespace: str, ref: SecretKeySelector) -> str:
        try:
            value = store.get(Secret, ref.name, namespace).value(ref.key)
        except NotFound:
            raise SecretUnavailable(f"secret {namespace}/{ref.name} not found") from None
        except KeyError:
            raise SecretUnavailable(f"secret {namespace}/{ref.name} has no key {ref.key!r}") from None
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise SecretUnavailable(f"secret {namespace}/{ref.name} key {ref.key!r} is not UTF-8") from None

    return read


def start_command(workflow: Workflow, read_secret: SecretReader = _no_secrets) -> pb.GetWorkflowsResponse:
    """StartWorkflow with the rendered actions in order (action id = the action's name), each
    ``envValueFrom`` read (from the Workflow's namespace) into its env; SecretUnavailable otherwise."""
    namespace = key_of(workflow)[0]
    actions = []
    for name, status in workflow.ordered_actions():
        rendered = status.rendered
        env = dict(rendered.env)
        for var, source in rendered.env_value_from.items():
            env[var] = read_secret(namespace, source.secret_key_ref)
        action = pb.Workflow.Action(
            id=name,
            name=rendered.name,
            image=rendered.image,
            args=list(rendered.args),
            env=env,
            volumes=list(rendered.volumes),
        )
        if rendered.command is not None:
            action.cmd = rendered.command
        if rendered.network_namespace is not None:
            action.ns.network = rendered.network_namespace
        actions.append(action)
    message = pb.Workflow(workflow_id=workflow_id(key_of(workflow)), actions=actions)
    return pb.GetWorkflowsResponse(start_workflow=pb.GetWorkflowsResponse.StartWorkflow(workflow=message))


def stop_command(key: WorkflowKey) -> pb.GetWorkflowsResponse:
    return pb.GetWorkflowsResponse(
        stop_workflow=pb.GetWorkflowsResponse.StopWorkflow(workflow_id=workflow_id(key))
    )
