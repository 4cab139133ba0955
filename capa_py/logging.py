"""Structured logging, configured once per process.

Console rendering when stderr is a terminal, JSON lines with ``--log-format json`` (or when not a TTY and
``auto`` is chosen). A processor drops values of keys that look like secrets so that credentials, tokens
and user data never reach a log sink, whoever calls the logger.

structlog (which loads rich's tracebacks) is imported when logging is configured or a logger is first
used, not when a module creates its logger: a process that never logs (``capa --help``) never loads it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO, cast

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
    import structlog

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


class _Logger:
    """structlog's logger for ``bound``, made (importing structlog) the first time it is used."""

    def __init__(self, bound: dict[str, Any]) -> None:
        self._bound = bound
        self._logger: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._logger is None:
            import structlog

            # A lazy proxy: the configuration is read at first use, so module-level loggers follow
            # configure_logging() even though they are created at import time.
            self._logger = structlog.get_logger(**self._bound)
        return getattr(self._logger, name)


def get_logger(name: str | None = None, **bound: Any) -> Any:
    """A structlog logger bound to ``component=name`` and any extra context."""
    if name:
        bound = {"component": name, **bound}
    return _Logger(bound)
