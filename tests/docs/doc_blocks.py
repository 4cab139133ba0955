"""Shell blocks of the README and the docs pages, and the `capa` and `make` command lines in them."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
RUN_MARKER = re.compile(r"<!-- docs-test: run( after make run)? -->")
PUNCTUATION = set("();<>|&")


def pages() -> list[Path]:
    """The README and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The line of the opening fence (1-based)."""
    language: str
    lines: tuple[str, ...]
    run: str | None
    """None when the block is not marked to run; "" when marked; "make run" when marked to run after it."""

    def where(self, offset: int = 0) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line + 1 + offset}"


def blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^```(\w*)", lines[i])
        if not match:
            i += 1
            continue
        start, language = i, match.group(1)
        end = start + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        marker = RUN_MARKER.fullmatch(lines[start - 1].strip()) if start > 0 else None
        run = None if marker is None else ("make run" if marker.group(1) else "")
        yield Block(page, start + 1, language, tuple(lines[start + 1 : end]), run)
        i = end + 1


def command_lines(block: Block) -> Iterator[tuple[int, str]]:
    """The shell command lines of a block (continuations joined, heredoc bodies and console output left out),
    each with its offset in the block."""
    i = 0
    lines = block.lines
    while i < len(lines):
        first = i
        line = lines[i]
        if block.language == "console":
            if not line.startswith("$ "):
                i += 1
                continue
            line = line[2:]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i]
        heredoc = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", line)
        i += 1
        if heredoc:
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                i += 1
            i += 1
        yield first, line


def tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


KEYWORDS = {"do", "then", "else", "time", "exec", "!", "if", "while", "until"}


def invocations(line: str, program: str) -> Iterator[list[str]]:
    """The arguments of every invocation of ``program`` (or a path ending in it) in a shell line: a word in
    command position (first, or after an operator, a keyword or environment assignments)."""
    words = tokens(line)
    command_position = True
    for index, word in enumerate(words):
        if set(word) <= PUNCTUATION or word in KEYWORDS:
            command_position = True
            continue
        if command_position and re.match(r"^[A-Za-z_]\w*=", word):
            continue
        if command_position and (word == program or word.endswith(f"/{program}")):
            args = []
            for arg in words[index + 1 :]:
                if set(arg) <= PUNCTUATION:
                    break
                args.append(arg)
            yield args
        command_position = False


def _option(command: Any, name: str) -> Any | None:
    for param in command.params:
        if param.param_type_name == "option" and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def _takes_value(param: Any) -> bool:
    return not (getattr(param, "is_flag", False) or getattr(param, "count", False))


def check_capa(args: list[str], root: Any | None = None) -> str | None:
    """Why ``capa ARGS`` would not parse (an unknown command or option), or None when it would."""
    if root is None:
        from capa_app.cli.main import app

        root = typer.main.get_command(app)
    command, path = root, ["capa"]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return None
        if arg.startswith("-") and arg != "-":
            name = arg.split("=", 1)[0]
            param = _option(command, name)
            if param is None and re.fullmatch(r"-([a-zA-Z])\1+", name):  # -vv
                param = _option(command, name[:2])
            if param is None and name != "--help":
                return f"{' '.join(path)}: no such option {name}"
            if param is not None and _takes_value(param) and "=" not in arg:
                i += 1
        elif getattr(command, "commands", None):
            if arg not in command.commands:
                return f"{' '.join(path)}: no such command {arg!r}"
            command = command.commands[arg]
            path.append(arg)
        i += 1
    if getattr(command, "commands", None) and command is not root:
        return f"{' '.join(path)}: a subcommand is missing"
    return None


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.MULTILINE))


def make_run_recipe() -> list[str]:
    """The shell lines of ``make run``'s recipe, as they run from the repository's root."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert recipe, "the Makefile has no run target"
    state = re.search(r"^STATE\s*\?=\s*(\S+)", text, re.MULTILINE)
    assert state
    return [
        line.strip().replace("$(BIN)", ".venv/bin").replace("$(STATE)", state.group(1))
        for line in recipe.group(1).splitlines()
    ]


def _options(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def check_inline_capa(span: str, root: Any | None = None) -> str | None:
    """Why an inline ``capa ...`` synopsis names a command or option the CLI does not have, or None.

    A synopsis is not a command line (``capa get KIND [NAME] [-o table|wide]``, ``capa local
    status|start|stop``): the lowercase words before the first placeholder must be (alternatives of) commands,
    and every option must be one of the commands named so far (global options included)."""
    if root is None:
        from capa_app.cli.main import app

        root = typer.main.get_command(app)
    command, path, known = root, ["capa"], _options(root)
    for raw in span.replace("\\|", "|").split()[1:]:
        if raw in {"|", "&&", ";", "&"}:
            break
        word = raw.strip("[](),.…")
        if word.startswith("-"):
            for option in word.split("/"):
                name = option.split("=", 1)[0]
                if name not in known and name != "--help" and not re.fullmatch(r"-(\w)\1+", name):
                    return f"{' '.join(path)}: no such option {name}"
            continue
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            continue
        alternatives = word.split("|")
        if all(alternative in subcommands for alternative in alternatives):
            command = subcommands[alternatives[0]]
            path.append(alternatives[0])
            for alternative in alternatives:
                known |= _options(subcommands[alternative])
        elif all(re.fullmatch(r"[a-z][a-z-]*", alternative) for alternative in alternatives):
            return f"{' '.join(path)}: no such command {word!r}"
    return None


def inline_capa_spans(page: Path) -> Iterator[tuple[int, str]]:
    """Inline code spans starting ``capa `` outside fenced blocks, with their line numbers."""
    fence = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            for span in re.findall(r"`(capa [^`]+)`", line):
                yield number, span
