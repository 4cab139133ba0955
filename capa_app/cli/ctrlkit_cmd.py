"""``capa ctrlkit``: generate controller code from a CtrlKit document, and draw a composed workflow.

``gen FILE [-o OUT.py]`` parses a ``.ctrlkit`` document and writes the generated Python module (to stdout
without ``-o``); a document error is printed as ``FILE:LINE:COL: message``, compiler style, so editors
can jump to it. ``graph MODULE:ATTRIBUTE [--format mermaid|dot]`` imports a workflow (an Action, or a
function of no arguments returning one) and prints it as a Mermaid flowchart or a Graphviz digraph.

Exit codes follow the main CLI's: 0 success, 2 invalid input (a DSL error, a file that cannot be read, a
target that cannot be imported or is not a workflow). The commands are thin: the work is in
:mod:`capa_py.ctrlkit.dsl`, :mod:`capa_py.ctrlkit.codegen` and :mod:`capa_py.ctrlkit.graph`.
"""

from __future__ import annotations

import importlib
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from capa_py.ctrlkit.action import Action

EXIT_INVALID = 2

app = typer.Typer(
    name="ctrlkit",
    help="Generate controller code from CtrlKit documents and draw composed workflows.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class GraphFormat(StrEnum):
    MERMAID = "mermaid"
    DOT = "dot"


def _invalid(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(EXIT_INVALID)


@app.command("gen")
def gen_command(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="The CtrlKit document (.ctrlkit) to generate from.")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the module here (default: standard output)."),
    ] = None,
) -> None:
    """Generate a Python module from a CtrlKit document.

    The module holds each manager's state getters, the protocol of its actions and the action wrappers.
    """
    from capa_py.ctrlkit.codegen import generate
    from capa_py.ctrlkit.dsl import DSLError, parse

    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _invalid(f"error: cannot read {file}: {exc}")
    try:
        source = generate(parse(text, str(file)), file.name)
    except DSLError as exc:
        _invalid("\n".join(str(error) for error in (exc, *exc.others)))
    if output is None:
        typer.echo(source, nl=False)
        return
    try:
        output.write_text(source, encoding="utf-8")
    except OSError as exc:
        _invalid(f"error: cannot write {output}: {exc}")


def load_workflow(target: str) -> Action:
    """The Action named by ``module:attribute`` (dotted attributes allowed), calling it if it is a factory.

    Raises ValueError with a message for the user when the target cannot be imported or is not a workflow.
    """
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(
            f"expected TARGET as 'module:attribute' (e.g. 'myapp.workflows:cronjob'), found {target!r}"
        )
    # Like `python -m`, let modules of the working directory be named (for the import and the factory call).
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return _resolve(target, module_name, attribute)
    finally:
        if added:
            sys.path.remove(cwd)


def _resolve(target: str, module_name: str, attribute: str) -> Action:
    from capa_py.ctrlkit.action import Action

    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    value: object = module
    resolved = module_name
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"cannot find {target!r}: {resolved} has no attribute {part!r}") from None
        resolved = f"{resolved}.{part}"
    if not isinstance(value, Action) and callable(value):
        try:
            value = value()
        except Exception as exc:
            raise ValueError(f"calling {target}() failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(value, Action):
        raise ValueError(
            f"expected {target!r} to be an Action or a function of no arguments returning one, "
            f"found {type(value).__name__}"
        )
    return value


@app.command("graph")
def graph_command(
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET", help="The workflow as MODULE:ATTRIBUTE: an Action, or a function returning one."
        ),
    ],
    output_format: Annotated[
        GraphFormat, typer.Option("--format", "-f", help="Mermaid flowchart or Graphviz DOT.")
    ] = GraphFormat.MERMAID,
) -> None:
    """Draw a composed workflow as a Mermaid flowchart or a Graphviz digraph."""
    from capa_py.ctrlkit.graph import to_dot, to_mermaid

    try:
        workflow = load_workflow(target)
    except ValueError as exc:
        _invalid(f"error: {exc}")
    try:
        rendered = to_dot(workflow) if output_format is GraphFormat.DOT else to_mermaid(workflow)
    except ValueError as exc:  # a workflow with a cycle
        _invalid(f"error: {exc}")
    typer.echo(rendered, nl=False)
