"""Every command line the README and the docs show is one the CLI accepts.

Each ``capa ...`` invocation inside a shell block (```bash, ```sh, ```console) must parse against the real
typer app: an unknown command or option fails, naming the page and the line. Every ``make`` target named in a
block or in inline code must exist in the Makefile. Blocks marked ``<!-- docs-test: run -->`` (cheap and
self-contained: no kubectl, no peers) run for real in a temporary directory (``slow``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.doc_blocks import (
    ROOT,
    SHELL_LANGUAGES,
    Block,
    blocks,
    check_capa,
    check_inline_capa,
    command_lines,
    inline_capa_spans,
    invocations,
    make_run_recipe,
    make_targets,
    pages,
)


def _shell_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page) if block.language in SHELL_LANGUAGES]


def test_the_pages_show_capa_commands() -> None:
    lines = [line for block in _shell_blocks() for _, line in command_lines(block)]
    found = [args for line in lines for args in invocations(line, "capa")]
    assert len(found) > 50


def test_every_capa_command_in_a_shell_block_parses() -> None:
    problems = []
    for block in _shell_blocks():
        for offset, line in command_lines(block):
            for args in invocations(line, "capa"):
                problem = check_capa(args)
                if problem:
                    problems.append(f"{block.where(offset)}: {problem}: {line.strip()}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("capa get clusters -o wide", None),
        ("capa -vv --state s.db apply -f x.yaml --aws-endpoint=local --no-wait", None),
        ("kubectl apply -f <(capa manifests crds) && capa local stop", None),
        ("capa gett clusters", "capa: no such command 'gett'"),
        ("capa apply -f x.yaml --aws-endpont local", "capa apply: no such option --aws-endpont"),
        ("capa tink agent --id lab-1 --tokenfile t", "capa tink agent: no such option --tokenfile"),
        ("capa local", "capa local: a subcommand is missing"),
    ],
)
def test_the_check_refuses_what_the_cli_refuses(line: str, problem: str | None) -> None:
    """The check is the CLI's: what it refuses, the CLI refuses too (exit 2), and what it accepts parses."""
    results = [check_capa(args) for args in invocations(line, "capa")]
    assert problem in results if problem else results and not any(results)
    if problem:
        args = next(args for args in invocations(line, "capa") if check_capa(args))
        cli = subprocess.run(
            [sys.executable, "-m", "capa_app.cli", *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        assert cli.returncode == 2, cli.stdout + cli.stderr


def test_every_capa_synopsis_in_the_prose_names_real_commands_and_options() -> None:
    """Inline ``capa ...`` code (a synopsis or a command) names commands and options the CLI has."""
    problems, seen = [], 0
    for page in pages():
        for number, span in inline_capa_spans(page):
            seen += 1
            problem = check_inline_capa(span)
            if problem:
                problems.append(f"{page.relative_to(ROOT)}:{number}: {problem}: `{span}`")
    assert not problems, "\n".join(problems)
    assert seen > 100


@pytest.mark.parametrize(
    ("span", "problem"),
    [
        ("capa local status\\|start\\|stop", None),
        ("capa apply -f FILE [--wait/--no-wait] [-o table\\|json]", None),
        ("capa manifests all | kubectl apply -f -", None),
        ("capa local status\\|restart", "capa local: no such command 'status|restart'"),
        ("capa apply -f FILE [--wait/--no-wiat]", "capa apply: no such option --no-wiat"),
        ("capa get KIND [--selector S] [--sort-by F]", "capa get: no such option --sort-by"),
    ],
)
def test_the_synopsis_check(span: str, problem: str | None) -> None:
    assert check_inline_capa(span) == problem


def test_every_make_target_named_exists() -> None:
    targets = make_targets()
    problems = []
    for block in _shell_blocks():
        for offset, line in command_lines(block):
            for args in invocations(line, "make"):
                for target in (a for a in args if not a.startswith("-") and "=" not in a):
                    if target not in targets:
                        problems.append(f"{block.where(offset)}: no make target {target!r}")
    for page in pages():
        for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in re.findall(r"`make ([a-z][\w-]*)", text):
                if target not in targets:
                    problems.append(f"{page.relative_to(ROOT)}:{number}: no make target {target!r}")
    assert not problems, "\n".join(problems)


def _runnable() -> list[Block]:
    return [block for page in pages() for block in blocks(page) if block.run is not None]


def test_some_blocks_are_marked_to_run() -> None:
    assert {block.page.name for block in _runnable()} >= {"README.md", "workflows.md"}


@pytest.mark.slow
@pytest.mark.parametrize("block", _runnable(), ids=lambda block: block.where())
def test_marked_block_runs(block: Block, tmp_path: Path) -> None:
    """The block runs in a copy of the examples, with a local AWS endpoint of its own; every line succeeds."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    env = {
        **os.environ,
        "CAPA_LOCAL_AWS_DIR": str(tmp_path / "local-aws"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("CAPA_STATE", None)
    env.pop("KUBECONFIG", None)
    before = make_run_recipe() if block.run == "make run" else []
    script = "\n".join(["set -euo pipefail", *before, *block.lines])
    try:
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
    finally:
        subprocess.run(
            [str(tmp_path / ".venv" / "bin" / "capa"), "local", "stop"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            check=False,
            timeout=60,
        )
    assert result.returncode == 0, f"{block.where()}\n{result.stdout}\n{result.stderr}"
