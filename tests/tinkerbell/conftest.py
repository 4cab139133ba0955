"""Fixtures of the Tinkerbell tests."""

from tests.tinkerbell.go_oracle import go_renderer  # noqa: F401 - Go as the oracle for template rendering
