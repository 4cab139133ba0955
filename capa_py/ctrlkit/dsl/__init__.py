"""The CtrlKit DSL: a parser that turns a ``.ctrlkit`` document into a typed, checked syntax tree.

A document declares, for one custom resource, the states a controller reads and the actions it runs; the
code generator (:mod:`capa_py.ctrlkit.codegen`) turns the tree into state getters, an implementation
protocol and action wrappers, so that writing a controller is writing the actions and composing them::

    bind batch/v1 k8s.io/api/batch/v1          // a group/version and the package holding its types
    alias Job batch/v1/Job                     // a short name for a group/version/kind

    // CronJobControllerManager declares the actions of the CronJob controller.
    decl CronJobControllerManager for CronJob {
        state {
            jobs []Job {                       // a list state; 'Job' alone is a single object
                labels/cronjob=${target.Name}  // one selector per line, read raw to the end of line
                owned
            }
        }
        action {
            // List all active jobs, and update the status.
            ListActiveJobsAndUpdateStatus(jobs)
        }
    }

Comment lines directly above a ``decl``, a state or an action are kept as its documentation.

The parser is hand-written so that every error points at the offending token: a :class:`DSLError` reads
``FILE:LINE:COL: message`` and its message says what was expected and what was found. :func:`parse`
checks the syntax and then the meaning (aliases use bound group/versions, decls and states use aliases,
actions take declared states, no name is declared twice).

The package's modules: the syntax tree and :class:`DSLError` (:mod:`~capa_py.ctrlkit.dsl.tree`), the scanner
(:mod:`~capa_py.ctrlkit.dsl.scanner`), the parser (:mod:`~capa_py.ctrlkit.dsl.parser`) and the checks of
meaning (:mod:`~capa_py.ctrlkit.dsl.checks`).
"""

from __future__ import annotations

from pathlib import Path

from capa_py.ctrlkit.dsl.checks import validate
from capa_py.ctrlkit.dsl.parser import Parser
from capa_py.ctrlkit.dsl.tree import (
    ActionDecl,
    Alias,
    Bind,
    Decl,
    Document,
    DSLError,
    KindRef,
    Node,
    SelectorLine,
    StateDecl,
    StateRef,
)

__all__ = [
    "ActionDecl",
    "Alias",
    "Bind",
    "Decl",
    "DSLError",
    "Document",
    "KindRef",
    "Node",
    "SelectorLine",
    "StateDecl",
    "StateRef",
    "parse",
    "parse_file",
    "validate",
]


def parse(text: str, filename: str = "<string>") -> Document:
    """Parse and check a document; raise :class:`DSLError` at the first problem."""
    return validate(Parser(text, filename).document())


def parse_file(path: str | Path) -> Document:
    """Parse and check the document in a file; errors name the file as given."""
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), str(path))
