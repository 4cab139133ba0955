"""The renderer against Go itself: a fixed corpus and generated templates must render byte for byte as
Go's text/template does, and fail where Go fails, with Go's error message."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from capa_py.tinkerbell import TemplateError, render_text
from tests.tinkerbell.go_oracle import GoRenderer, GoResult
from tests.tinkerbell.render_corpus import CASES
from tests.tinkerbell.template_strategies import SOUP_DATA, template_cases, token_soup


def python_result(template: str, data: dict[str, Any]) -> GoResult:
    try:
        out = render_text(template, data)
    except TemplateError as exc:
        return GoResult(None, str(exc))
    return GoResult(out.encode("utf-8", "surrogateescape"), None)


def assert_same(template: str, data: dict[str, Any], go: GoResult, py: GoResult) -> None:
    if go.error is not None:
        assert py.error is not None, f"Go failed with {go.error!r} but Python rendered {py.output!r}"
        assert py.error == go.error, "error messages differ"
    else:
        assert py.error is None, f"Go rendered {go.output!r} but Python failed with {py.error!r}"
        assert py.output == go.output


@pytest.mark.parametrize(
    ("template", "data"),
    CASES,
    ids=[f"{i:03d}-{t[:40]}" for i, (t, _) in enumerate(CASES)],
)
def test_corpus_case_renders_as_go_does(go_renderer: GoRenderer, template: str, data: dict[str, Any]) -> None:
    assert_same(template, data, go_renderer.render(template, data), python_result(template, data))


@settings(
    max_examples=400,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=template_cases())
def test_generated_templates_render_as_go_does(
    go_renderer: GoRenderer, case: tuple[str, dict[str, Any]]
) -> None:
    template, data = case
    assert_same(template, data, go_renderer.render(template, data), python_result(template, data))


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(template=token_soup)
def test_template_syntax_soup_fails_or_renders_as_go_does(go_renderer: GoRenderer, template: str) -> None:
    result = go_renderer.render(template, SOUP_DATA)
    assert_same(template, SOUP_DATA, result, python_result(template, SOUP_DATA))
