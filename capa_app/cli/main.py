"""The ``capa`` command line: a thin layer over the library.

Exit codes: 0 success; 1 the operation failed; 2 invalid input (bad manifest, unknown kind, bad flag) — and
invalid input never changes the store; 130 interrupted (Ctrl-C). Global options go before the subcommand
(``capa --state s.db get clusters``, ``capa --kubeconfig kubeconfig get awsclusters``).

Every failure reaches the user as one ``error: …`` line and its exit code, never a traceback: :func:`run`
turns a store, SQLite or operating-system failure no command expected into that line (exit 1), and any
other exception too, its traceback logged at debug level (``-vv``).
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from capa_app.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    Globals,
    OutputOption,
    check_output,
    fail,
    globals_of,
    say_no_store,
    stderr,
    stdout,
)
from capa_py import __version__
from capa_py.defaults import DEFAULT_STATE
from capa_py.logging import configure_logging, get_logger

_log = get_logger("cli")

RESUMABLE = ("apply", "delete")
"""Commands that pick up where an interrupted run of theirs stopped when run again."""
_invoked: list[str] = []

app = typer.Typer(
    name="capa",
    help="capa-py: reconcile AWS infrastructure from Cluster API style declarations.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        stdout.print(f"capa {__version__}", highlight=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def main(
    ctx: typer.Context,
    state: Annotated[
        Path, typer.Option("--state", envvar="CAPA_STATE", help="Path of the embedded SQLite store.")
    ] = DEFAULT_STATE,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig", help="Use the Kubernetes API server this kubeconfig names as the store."
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="sqlite (the --state file, the default) or kube (--kubeconfig, else KUBECONFIG, "
            "~/.kube/config or the in-cluster service account).",
        ),
    ] = None,
    log_format: Annotated[
        str, typer.Option("--log-format", help="Log rendering: auto, console or json.")
    ] = "auto",
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="More logs (-v, -vv).")] = 0,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    if log_format not in ("auto", "console", "json"):
        raise typer.BadParameter("must be auto, console or json", param_hint="--log-format")
    if store not in (None, "sqlite", "kube"):
        raise typer.BadParameter("must be sqlite or kube", param_hint="--store")
    if store == "sqlite" and kubeconfig is not None:
        raise typer.BadParameter("--kubeconfig selects the kube store, not sqlite", param_hint="--store")
    configure_logging(log_format, verbose)  # type: ignore[arg-type]
    if ctx.invoked_subcommand:
        _invoked.append(ctx.invoked_subcommand)
    ctx.obj = Globals(
        state=state,
        log_format=log_format,  # type: ignore[arg-type]
        verbosity=verbose,
        kubeconfig=kubeconfig,
        store_kind="kube" if kubeconfig is not None else (store or "sqlite"),
    )


@app.command()
def get(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="Kind: clusters, machines, awsclusters, awsmachines, secrets.")],
    name: Annotated[str | None, typer.Argument(help="Name of one object.")] = None,
    namespace: Annotated[str | None, typer.Option("-n", "--namespace", help="Namespace.")] = None,
    all_namespaces: Annotated[bool, typer.Option("-A", "--all-namespaces", help="Every namespace.")] = False,
    selector: Annotated[str | None, typer.Option("-l", "--selector", help="Label selector.")] = None,
    output: OutputOption = "table",
) -> None:
    """Show objects from the store (``-o wide`` adds the columns kubectl shows only then)."""
    from capa_app.cli.output import print_objects
    from capa_py.api.registry import REGISTRY, UnknownKind
    from capa_py.store.errors import Invalid, NotFound, StoreError

    check_output(output, wide=True)
    wide = output == "wide"
    output = "table" if wide else output
    try:
        model = REGISTRY.resolve(kind)
    except UnknownKind as exc:
        fail(str(exc), EXIT_INVALID)
    opened = globals_of(ctx).existing_store()
    if opened is None:
        # A read never creates a store: a missing one is empty.
        say_no_store(globals_of(ctx).state)
        if name is not None:
            fail(f'{model.PLURAL} "{name}" not found')
        if output != "table":
            print_objects(sys.stdout, [], output, all_namespaces=all_namespaces)
        elif not all_namespaces:
            stderr.print(f"No resources found in {namespace or 'default'} namespace.", highlight=False)
        return
    with opened as store:
        try:
            if name is not None:
                obj = store.get(model, name, namespace or "default")
                print_objects(sys.stdout, [obj], output, single=True, wide=wide)
                return
            ns = None if all_namespaces else (namespace or "default")
            objects = store.list(model, namespace=ns, label_selector=selector)
        except NotFound:
            fail(f'{model.PLURAL} "{name}" not found')
        except Invalid as exc:
            fail(str(exc), EXIT_INVALID)
        except StoreError as exc:  # an API server that stopped answering, or refused the request
            fail(str(exc))
        if output == "table" and not objects and not all_namespaces:
            stderr.print(f"No resources found in {ns} namespace.", highlight=False)
            return
        print_objects(sys.stdout, objects, output, all_namespaces=all_namespaces, wide=wide)


def _mount_subcommands() -> None:
    from capa_app.cli import (
        audit_cmd,
        aws_commands,
        cluster_cmd,
        controller_cmd,
        ctrlkit_cmd,
        iam_cmd,
        manifests_cmd,
        move_cmd,
        serve_cmd,
        tink_cmd,
    )

    aws_commands.register(app)
    audit_cmd.register(app)
    manifests_cmd.register(app)
    move_cmd.register(app)
    cluster_cmd.register(app)
    serve_cmd.register(app)
    controller_cmd.register(app)
    iam_cmd.register(app)
    app.add_typer(ctrlkit_cmd.app, name="ctrlkit", help="The ctrlkit DSL code generator and workflow graphs.")
    app.add_typer(
        tink_cmd.app,
        name="tink",
        help="Tinkerbell helpers: render a template for a hardware, serve Hegel metadata.",
    )


_mount_subcommands()


def _say(message: str) -> None:
    stderr.print(message, markup=False, highlight=False)


def interrupted_message(command: str | None) -> str:
    """What an interrupted command says last: how to resume, for a command that can."""
    if command in RESUMABLE:
        return "interrupted: run the same command again to continue; it picks up where it stopped"
    return "interrupted"


def run() -> None:
    """Console-script entry point: every failure ends as one line and its exit code."""
    interrupted = False

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        signal.default_int_handler(signum, frame)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    _invoked.clear()
    try:
        app()
    except SystemExit as exc:
        if interrupted and exc.code == 130:
            _say(interrupted_message(_invoked[0] if _invoked else None))
        raise
    except KeyboardInterrupt:
        _say(interrupted_message(_invoked[0] if _invoked else None))
        sys.exit(130)
    except sqlite3.Error as exc:
        _log.debug("SQLite failure", exc_info=True)
        _say(f"error: the store failed: {exc}")
        sys.exit(1)
    except OSError as exc:
        _log.debug("system failure", exc_info=True)
        where = f": {exc.filename}" if exc.filename else ""
        _say(f"error: {exc.strerror or exc}{where}")
        sys.exit(1)
    except Exception as exc:
        from capa_py.store.errors import StoreError  # imported here: --help never loads the store

        # A store failure no command expected (an API server gone mid-command).
        if isinstance(exc, StoreError):
            _log.debug("store failure", exc_info=True)
            _say(f"error: {exc}")
            sys.exit(1)
        # A failure no part of capa-py expected: still one line.
        _log.debug("unexpected failure", exc_info=True)
        summary = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _say(
            f"error: {type(exc).__name__}{': ' + summary if summary else ''} (run with -vv for the traceback)"
        )
        sys.exit(1)
    finally:
        signal.signal(signal.SIGINT, previous)
