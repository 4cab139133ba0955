"""Structured logging, configured once per process.

Console rendering when stderr is a terminal, JSON lines with ``--log-format json`` (or when not a TTY and
``auto`` is chosen). A processor drops values of keys that look like secrets so that credentials, tokens
and user data never reach a log sink, whoever calls the logger.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO, cast

import structlog

LogFormat = Literal["auto", "console", "json"]

_SECRET_MARKERS = (
    "password",
    "secret",
    "token",
    "credential",
    "access_key",
    "session_key",
    "userdata",
    "user_data",
    "authorization",
)
REDACTED = "**redacted**"


def _is_secret_key(key: str) -> bool:
    lowered = key.lower().replace("-", "_")
    # Counts of tokens or names of secrets are harmless; the values behind these keys are not.
    if lowered.endswith(("_count", "_name", "_names", "_ref")):
        return False
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact_secrets(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: replace the value of any key that names a secret."""
    for key in list(event_dict):
        if _is_secret_key(key):
            event_dict[key] = REDACTED
    return event_dict


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of the write (test runners swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(fmt: LogFormat = "auto", verbosity: int = 0) -> None:
    """Configure structlog and the stdlib root logger; safe to call more than once."""
    level = logging.WARNING
    if verbosity == 1:
        level = logging.INFO
    elif verbosity >= 2:
        level = logging.DEBUG
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=True)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_secrets,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr, force=True)
    # botocore and werkzeug are chatty at INFO; they only speak up for warnings.
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str | None = None, **bound: Any) -> Any:
    """A structlog logger bound to ``component=name`` and any extra context."""
    if name:
        bound = {"component": name, **bound}
    # A lazy proxy: the configuration is read at first use, so module-level loggers follow
    # configure_logging() even though they are created at import time.
    return structlog.get_logger(**bound)
