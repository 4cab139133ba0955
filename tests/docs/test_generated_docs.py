"""The generated pages are what the generator writes now: the CLI reference (from the typer app), the spec
reference (from the CRDs) and the ctrlkit diagrams inside the pages. A command, option, field or graph step
that changes without ``make docs-gen`` fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from capa_app.cli.main import app
from capa_app.docsgen import (
    CLI_PAGE,
    GRAPH_REGION,
    SPEC_PAGE,
    cli_reference,
    generated,
    graph_mermaid,
    on_page_markdown,
    pages_with_graphs,
    spec_reference,
    stale,
)
from capa_py.manifests.crds import crds
from tests.docs.doc_blocks import ROOT

GRAPHS = {
    "controllers.graphs:awscluster_create",
    "controllers.graphs:awscluster_delete",
    "controllers.tinkerbell_capi:machine_create_graph",
    "controllers.tinkerbell_capi:machine_delete_graph",
    "controllers.tinkerbell:preparation_graph",
    "controllers.tinkerbell:supervision_graph",
}


def _commands(command: object, path: str) -> list[tuple[str, object]]:
    found = [(path, command)]
    for name, sub in (getattr(command, "commands", None) or {}).items():
        found += _commands(sub, f"{path} {name}")
    return found


def test_the_cli_reference_is_current() -> None:
    assert (ROOT / CLI_PAGE).read_text(encoding="utf-8") == cli_reference(), "run `make docs-gen`"


def test_the_cli_reference_has_every_command_and_option() -> None:
    page = (ROOT / CLI_PAGE).read_text(encoding="utf-8")
    commands = _commands(typer.main.get_command(app), "capa")
    assert len(commands) > 20
    for path, command in commands:
        assert f"\n## {path}\n" in page, path
        for param in command.params:  # type: ignore[attr-defined]
            for opt in param.opts if param.param_type_name == "option" else ():
                assert f"`{opt}" in page or f", {opt}" in page, f"{path} {opt}"


def test_the_spec_reference_is_current() -> None:
    assert (ROOT / SPEC_PAGE).read_text(encoding="utf-8") == spec_reference(), "run `make docs-gen`"


def test_the_spec_reference_has_every_kind() -> None:
    page = (ROOT / SPEC_PAGE).read_text(encoding="utf-8")
    for crd in crds():
        assert f"\n## {crd['spec']['names']['kind']}\n" in page
    assert "| `spec.network.vpc.availabilityZoneSelection` | string | one of `Ordered`, `Random`" in page


def test_the_graphs_in_the_pages_are_current() -> None:
    shown = set()
    for page in pages_with_graphs(ROOT):
        text = (ROOT / page).read_text(encoding="utf-8")
        for match in GRAPH_REGION.finditer(text):
            shown.add(match.group("target"))
            body = match.group("body")
            assert body == f"```mermaid\n{graph_mermaid(match.group('target'))}```\n", (
                f"{page}: {match.group('target')} is stale: run `make docs-gen`"
            )
    assert shown >= GRAPHS


def test_the_graphs_are_what_capa_ctrlkit_graph_prints() -> None:
    for target in sorted(GRAPHS):
        cli = subprocess.run(
            [sys.executable, "-m", "capa_app.cli", "ctrlkit", "graph", target],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        assert cli.stdout == graph_mermaid(target)


def test_nothing_generated_is_stale() -> None:
    assert stale(ROOT) == []
    assert set(generated(ROOT)) >= {CLI_PAGE, SPEC_PAGE}


@pytest.mark.parametrize("change", ["edit a graph", "edit the CLI reference", "remove the spec reference"])
def test_a_stale_page_is_found_and_rewritten(change: str, tmp_path: Path) -> None:
    """The check finds a hand-edited generated part, and the generator puts it back."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    events = tmp_path / "docs" / "events.md"
    if change == "edit a graph":
        events.write_text(events.read_text().replace('["ReconcileVpc"]', '["Vpc"]', 1))
        expected = [Path("docs/events.md")]
    elif change == "edit the CLI reference":
        cli = tmp_path / CLI_PAGE
        cli.write_text(cli.read_text().replace("--aws-endpoint", "--endpoint", 1))
        expected = [CLI_PAGE]
    else:
        (tmp_path / SPEC_PAGE).unlink()
        expected = [SPEC_PAGE]
    assert stale(tmp_path) == expected
    generator = [sys.executable, "-m", "capa_app.docsgen", "--root", str(tmp_path)]
    check = subprocess.run([*generator, "--check"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert check.returncode == 1
    assert str(expected[0]) in check.stderr
    subprocess.run(generator, capture_output=True, check=True, cwd=ROOT)
    assert stale(tmp_path) == []


def test_pipes_in_table_code_spans_are_unescaped_for_mkdocs_only() -> None:
    page = "\n".join(
        [
            "| `a\\|b` | text \\| more `c` |",
            "`x\\|y` outside a table",
        ]
    )
    assert on_page_markdown(page) == "| `a|b` | text \\| more `c` |\n`x\\|y` outside a table"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # Not --quiet: mkdocs counts the warnings --strict fails on only when they are logged.
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """mkdocs --strict: every page is in the navigation, every link and anchor resolves."""
    build = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert build.returncode == 0, build.stdout + build.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


@pytest.mark.parametrize("link", ["[a page](nope.md)", "[an anchor](concepts.md#nope)"])
def test_a_broken_link_fails_the_build(link: str, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    config = (ROOT / "mkdocs.yml").read_text()
    config = config.replace("  - capa_app/docsgen.py", f"  - {ROOT / 'capa_app' / 'docsgen.py'}")
    (tmp_path / "mkdocs.yml").write_text(config)
    page = tmp_path / "docs" / "security.md"
    page.write_text(page.read_text() + f"\n{link}\n")
    build = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert build.returncode == 1
    assert "security.md" in build.stderr
