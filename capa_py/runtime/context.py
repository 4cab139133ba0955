"""What the running reconcile is, for code deep below it (AWS call metrics name their controller)."""

from __future__ import annotations

import contextvars

current_controller: contextvars.ContextVar[str] = contextvars.ContextVar("capa_controller", default="")
"""The controller whose reconcile runs in this context (set by the manager around each reconcile)."""
