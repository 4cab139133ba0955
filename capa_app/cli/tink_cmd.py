"""``capa tink``: Tinkerbell helpers that need no controller.

``capa tink render -f template.yaml --hardware hardware.yaml [--data KEY=VALUE]...`` renders a Template
for a Hardware exactly as the workflow controller prepares a Workflow (:mod:`capa_py.tinkerbell.prepare`)
and prints the actions that would run, in order, with the template-level env and volumes merged in. A
template that does not render prints the field and Go's error (with its position) and exits 2.

:func:`report_workflow_outcomes` is what ``capa delete --wait`` prints of the Workflows it deleted: the
state each ended in, read from the Events the controller recorded (the objects themselves are gone).

``capa tink hegel [--bind 127.0.0.1] [--port 50061] [--trusted-proxies CIDR[,CIDR...]]`` serves the
Hegel metadata endpoints (:mod:`capa_py.tinkerbell.hegel`) over the selected store until SIGTERM or SIGINT;
port 0 picks a free port. It prints ``hegel: URL`` once it serves.

``capa tink server [--bind 127.0.0.1] [--port 42113] [--tls-cert F --tls-key F [--tls-client-ca F]]
[--allow-unauthenticated-agents] [--rejection-backoff 10s] [--rejection-backoff-max 5m]`` serves the gRPC
workflow service (:mod:`capa_py.tinkerbell.server`) over the selected store until SIGTERM or SIGINT; port
0 picks a free port. It prints ``tink server: HOST:PORT`` once it serves. Agents must prove their Hardware
(:mod:`capa_py.tinkerbell.agentauth`); ``--allow-unauthenticated-agents`` believes the id of an agent that
presents nothing, for Hardware without ``spec.agentCredentialsRef`` only.

``capa tink agent-credentials HARDWARE [-n NAMESPACE] [--token-file FILE]`` issues a new agent token for
a Hardware: it writes it to the Secret ``spec.agentCredentialsRef`` names (creating
``HARDWARE-agent-credentials`` and setting the reference when there is none; for a Hardware not created
yet, that Secret, for the Hardware to reference; an older token stops working), then writes the token
to ``--token-file`` (mode 0600) and prints how to start the agent, or, without ``--token-file``, prints
the token alone on stdout (the instructions go to stderr).

``capa tink agent --id AGENT_ID ...`` runs the Tinkerbell agent (:mod:`capa_app.cli.tink_agent_cmd`).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

import typer

from capa_app.cli.common import EXIT_INVALID, fail, globals_of, load_files, stdout
from capa_app.cli.output import render_json, render_yaml
from capa_app.cli.tink_agent_cmd import agent
from capa_app.cli.tink_flags import checked_hegel_flags, checked_server_flags, parse_data

if TYPE_CHECKING:
    from capa_py.api.meta import KubeObject
    from capa_py.api.tinkerbell import Hardware, Template
    from capa_py.store.protocol import ObjectStore

app = typer.Typer(
    help="Tinkerbell helpers: render a template for a hardware, serve Hegel metadata, serve the workflow "
    "service.",
    no_args_is_help=True,
)
app.command("agent")(agent)

TLS_CLIENT_CA_HELP = (
    "PEM CA every agent's client certificate must be signed by (mutual TLS; needs --tls-cert). The "
    "certificate's CN or a DNS SAN <hardware>.<namespace> proves that Hardware."
)
ALLOW_UNAUTHENTICATED_HELP = (
    "Believe the agent id of an agent that presents no credentials (upstream Tinkerbell's behaviour), for "
    "Hardware without spec.agentCredentialsRef only. Off: such agents are refused UNAUTHENTICATED."
)
TRUSTED_PROXIES_HELP = (
    "CIDR[,CIDR...] of proxies whose X-Forwarded-For is believed (the right-most untrusted address is "
    "the caller); from anyone else the header is ignored."
)


def _one(path: Path, kind: type[KubeObject], option: str) -> Any:
    objects = load_files([path])
    found = [o for o in objects if isinstance(o, kind)]
    if len(found) != 1:
        kinds = ", ".join(o.KIND for o in objects) or "nothing"
        fail(f"{option} {path}: expected exactly one {kind.KIND}, found {kinds}", EXIT_INVALID)
    return found[0]


@app.command("render")
def render(
    template_file: Annotated[
        Path, typer.Option("-f", "--filename", help="The Template manifest (YAML or JSON).", metavar="FILE")
    ],
    hardware_file: Annotated[
        Path, typer.Option("--hardware", help="The Hardware manifest to render for.", metavar="FILE")
    ],
    data: Annotated[
        list[str] | None,
        typer.Option(
            "--data",
            help="A templateData entry, KEY=VALUE (repeatable). Values are strings, as if the Workflow's "
            "spec.templateData held them quoted; 'Hardware' is reserved.",
            metavar="KEY=VALUE",
        ),
    ] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="yaml or json.")] = "yaml",
) -> None:
    """Print the actions a Template renders to for a Hardware (exit 2 with the error if it does not)."""
    from capa_py.api.tinkerbell import Hardware, Template
    from capa_py.tinkerbell.prepare import RenderFailed, render_workflow_actions

    if output not in ("yaml", "json"):
        raise typer.BadParameter("must be yaml or json", param_hint="-o/--output")
    try:
        template_data = parse_data(data or [])
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    template: Template = _one(template_file, Template, "-f")
    hardware: Hardware = _one(hardware_file, Hardware, "--hardware")
    try:
        actions = render_workflow_actions(template, hardware, template_data)
    except RenderFailed as exc:
        fail(f"{template_file}: {exc}", EXIT_INVALID)
    document = {"actions": [a.model_dump(by_alias=True, exclude_none=True, mode="json") for a in actions]}
    sys.stdout.write(render_json(document) + "\n" if output == "json" else render_yaml(document))


class _Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> None: ...


ServerT = TypeVar("ServerT", bound=_Stoppable)


def serve_until_signalled(
    ctx: typer.Context,
    start: Callable[[ObjectStore], ServerT],
    where: str,
    announce: Callable[[ServerT], str],
) -> None:
    """Start a server over the selected store, print ``announce(server)``, serve until SIGTERM or SIGINT,
    then stop it, close the store and print ``stopped``; a bind that fails exits 1 naming ``where``."""
    store = globals_of(ctx).store()
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            running = start(store)
        except OSError as exc:
            fail(f"cannot serve on {where}: {exc.strerror or exc}")
        print(announce(running), flush=True)
        try:
            while not stop.wait(0.5):
                pass
        finally:
            running.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        store.close()
    print("stopped", flush=True)


@app.command("hegel")
def hegel(
    ctx: typer.Context,
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on; 0 picks a free one.")] = 50061,
    trusted_proxies: Annotated[
        str | None, typer.Option("--trusted-proxies", help=TRUSTED_PROXIES_HELP, metavar="CIDR[,CIDR...]")
    ] = None,
) -> None:
    """Serve Hegel instance metadata (instance-id, hostname, local-ipv4, user-data) until interrupted."""
    from capa_py.tinkerbell.hegel import start_in_thread

    trusted = checked_hegel_flags("--port", port, trusted_proxies)
    serve_until_signalled(
        ctx,
        lambda store: start_in_thread(store, bind, port, trusted),
        f"{bind}:{port}",
        lambda running: f"hegel: {running.url}",
    )


@app.command("server")
def server(
    ctx: typer.Context,
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on; 0 picks a free one.")] = 42113,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="PEM certificate (with --tls-key); none: plaintext.")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.")] = None,
    tls_client_ca: Annotated[
        Path | None, typer.Option("--tls-client-ca", help=TLS_CLIENT_CA_HELP, metavar="PEM")
    ] = None,
    allow_unauthenticated_agents: Annotated[
        bool, typer.Option("--allow-unauthenticated-agents", help=ALLOW_UNAUTHENTICATED_HELP)
    ] = False,
    rejection_backoff: Annotated[
        str,
        typer.Option(
            "--rejection-backoff",
            help="A workflow its agent rejected is not offered again for this long, doubled per rejection.",
        ),
    ] = "10s",
    rejection_backoff_max: Annotated[
        str, typer.Option("--rejection-backoff-max", help="The longest a rejected workflow is held back.")
    ] = "5m",
) -> None:
    """Serve the gRPC workflow service (GetWorkflows, PublishEvent) to Tinkerbell agents until interrupted."""
    from capa_py.tinkerbell.server import start_in_thread

    options = checked_server_flags(
        "--",
        bind,
        port,
        tls_cert,
        tls_key,
        rejection_backoff,
        rejection_backoff_max,
        tls_client_ca,
        allow_unauthenticated_agents,
    )
    serve_until_signalled(
        ctx,
        lambda store: start_in_thread(
            store,
            options.bind,
            options.port,
            options.tls,
            options.backoff,
            allow_unauthenticated_agents=options.allow_unauthenticated_agents,
        ),
        f"{options.bind}:{options.port}",
        lambda running: f"tink server: {running.address}",
    )


@app.command("agent-credentials")
def agent_credentials(
    ctx: typer.Context,
    hardware_name: Annotated[str, typer.Argument(metavar="HARDWARE", help="The Hardware's name.")],
    namespace: Annotated[
        str, typer.Option("-n", "--namespace", help="The Hardware's namespace.")
    ] = "default",
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="Write the token to this file (mode 0600) instead of printing it.",
            metavar="FILE",
        ),
    ] = None,
) -> None:
    """Issue a new token for a Hardware's agent (an older one stops working) and say how to pass it."""
    import os

    from capa_py.api.meta import validate_dns_subdomain
    from capa_py.api.tinkerbell import Hardware
    from capa_py.store.errors import NotFound
    from capa_py.tinkerbell.agentauth import TOKEN_ENV, TOKEN_KEY, issue_token

    try:
        validate_dns_subdomain(hardware_name)
    except ValueError as exc:
        fail(f"HARDWARE {hardware_name!r}: {exc}", EXIT_INVALID)
    store = globals_of(ctx).store()
    try:
        try:
            found: Hardware | None = store.get(Hardware, hardware_name, namespace)
        except NotFound:
            found = None
        secret, token = issue_token(store, found, hardware_name, namespace)
    finally:
        store.close()
    where = f"secret {namespace}/{secret.metadata.name} key {TOKEN_KEY!r}"
    if found is None:
        sys.stderr.write(
            f"hardware {namespace}/{hardware_name} does not exist yet: give it "
            f"spec.agentCredentialsRef: {{name: {secret.metadata.name}}}\n"
        )
    if token_file is not None:
        try:
            descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(token + "\n")
            os.chmod(token_file, 0o600)
        except OSError as exc:
            fail(f"--token-file {token_file}: {exc.strerror or exc} (the token is in {where})")
        print(f"agent token of hardware {namespace}/{hardware_name} written to {token_file} ({where})")
        print(f"start the agent with: capa tink agent --id {hardware_name} --token-file {token_file}")
        return
    sys.stdout.write(token + "\n")
    sys.stderr.write(
        f"agent token of hardware {namespace}/{hardware_name} ({where}); pass it to the agent in a file "
        f"(capa tink agent --id {hardware_name} --token-file FILE) or in ${TOKEN_ENV}, never as an "
        "argument\n"
    )


def report_workflow_outcomes(store: ObjectStore, targets: Sequence[KubeObject]) -> None:
    """For each deleted Workflow among ``targets`` that is gone, print how it ended (its last Event)."""
    from capa_py.api.tinkerbell import Workflow
    from capa_py.runtime.events import events_for
    from capa_py.store.helpers import get_or_none

    for target in targets:
        if not isinstance(target, Workflow):
            continue
        if get_or_none(store, Workflow, target.name, target.metadata.namespace) is not None:
            continue
        ended = [e for e in events_for(store, target) if e.reason == "Canceled"]
        if ended:
            stdout.print(f"workflow/{target.name} {ended[-1].message}", markup=False, highlight=False)


__all__ = ["app", "report_workflow_outcomes"]
