"""Checkpoints: how far a workflow got, and the context values later tasks need, on disk.

One JSON file per workflow run, ``<state dir>/workflows/<workflow id>.json``, rewritten atomically (a
temporary file in the same directory, flushed, then renamed over the old one) after every completed task,
so a process killed at any moment leaves either the previous or the new checkpoint, never a torn one.
A checkpoint names the task list it was recorded for: if the constructor decides differently on the next
run, the checkpoint is refused rather than resumed against another list.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from capa_py.workflow.task import CHECKPOINT_METADATA_KEY, Context

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class CheckpointError(ValueError):
    """A checkpoint cannot be used: it belongs to another task list, or it is unreadable."""


class Checkpoint(BaseModel):
    workflow: str
    workflow_id: str
    tasks: list[str]
    completed: int = 0
    """How many tasks of ``tasks`` (in order) completed, hooks included."""
    context: dict[str, Any] = {}


def checkpoint_path(state_dir: Path, workflow_id: str) -> Path:
    if not _ID.match(workflow_id):
        raise ValueError(f"workflow id {workflow_id!r}: use letters, digits, '.', '_' and '-' only")
    return state_dir / "workflows" / f"{workflow_id}.json"


def load(path: Path) -> Checkpoint | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return Checkpoint.model_validate_json(text)
    except ValidationError as exc:
        raise CheckpointError(f"{path}: not a workflow checkpoint ({exc.error_count()} errors)") from exc


def save(path: Path, checkpoint: Checkpoint) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(checkpoint.model_dump_json(indent=2))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _checkpointed_fields(context_type: type[Context]) -> dict[str, Any]:
    hints = typing.get_type_hints(context_type)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(context_type)
        if f.metadata.get(CHECKPOINT_METADATA_KEY)
    }


def dump_context(ctx: Context) -> dict[str, Any]:
    """The checkpointed fields of ``ctx`` as JSON values."""
    return {
        name: TypeAdapter(hint).dump_python(getattr(ctx, name), mode="json")
        for name, hint in _checkpointed_fields(type(ctx)).items()
    }


def restore_context(ctx: Context, values: dict[str, Any]) -> None:
    """Set the checkpointed fields of ``ctx`` from a checkpoint's saved values."""
    for name, hint in _checkpointed_fields(type(ctx)).items():
        if name not in values:
            continue
        try:
            setattr(ctx, name, TypeAdapter(hint).validate_python(values[name]))
        except ValidationError as exc:
            raise CheckpointError(f"checkpoint context.{name}: {exc.errors()[0]['msg']}") from exc
