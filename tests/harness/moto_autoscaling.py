"""Give a moto server the Auto Scaling calls capa-py's machine pools make that moto 5.2.5 lacks or fakes.

* Instance refreshes: moto 5.2.5 has no ``StartInstanceRefresh``, ``DescribeInstanceRefreshes`` or
  ``CancelInstanceRefresh`` (a request answers that the action is not implemented). :func:`install` adds a
  small backend for them: refreshes are kept per group on moto's per-account, per-region Auto Scaling
  backend (so ``POST /moto-api/reset`` forgets them), newest first, each with its id, status, start time,
  preferences and desired configuration as the request gave them. A start on a group that has a refresh
  ``Pending``, ``InProgress`` or ``Cancelling`` is refused with ``InstanceRefreshInProgress`` (as the Auto
  Scaling API reference documents), and a start on a group that does not exist with ``ValidationError``.
  A refresh replaces nothing by itself: it stays ``Pending`` until a test moves it on with
  :func:`set_refresh_status` (a POST to :data:`CONTROL_PATH` on the server itself: no AWS operation
  does this, and botocore's model of Auto Scaling, which moto parses requests with, has no room for one).
* Lifecycle hooks: moto 5.2.5 keeps a hook's name, transition, heartbeat timeout and default result, drops
  ``NotificationTargetARN``, ``RoleARN`` and ``NotificationMetadata``, and answers fixed example ARNs for
  every hook. :func:`install` wraps ``PutLifecycleHook`` so that the hook keeps what the request gave (and
  nothing where the request gave nothing, as AWS reports it).

Importing this module changes nothing; :func:`install` patches moto's ``AutoScalingResponse`` in the current
process. ``tests/harness/moto_server.py`` runs every flavour of the test server with it installed (``python -m
tests.harness.moto_autoscaling --port N`` serves moto with only this installed).
"""

from __future__ import annotations

import argparse
import datetime
import threading
import uuid
from typing import Any

ACTIVE = ("Pending", "InProgress", "Cancelling")
"""The states in which AWS refuses another start."""
STATES = (
    "Pending",
    "InProgress",
    "Successful",
    "Failed",
    "Cancelling",
    "Cancelled",
    "RollbackInProgress",
    "RollbackFailed",
    "RollbackSuccessful",
)
_REFRESHES = "_capa_instance_refreshes"
_lock = threading.Lock()
_installed = False


def _refreshes(backend: Any, group: str) -> list[dict[str, Any]]:
    registry: dict[str, list[dict[str, Any]]] = vars(backend).setdefault(_REFRESHES, {})
    return registry.setdefault(group, [])


def _error(code: str, message: str) -> Exception:
    from moto.autoscaling.exceptions import AutoscalingClientError

    error_class = type(code, (AutoscalingClientError,), {"code": code})
    return error_class(message)  # type: ignore[no-any-return]


def _group_or_fail(response: Any) -> str:
    name = str(response._get_param("AutoScalingGroupName") or "")
    if name not in response.autoscaling_backend.autoscaling_groups:
        raise _error("ValidationError", f"AutoScalingGroup name not found - {name} does not exist")
    return name


def start_instance_refresh(response: Any) -> Any:
    from moto.core.responses import ActionResult

    group = _group_or_fail(response)
    params = response._get_params()
    with _lock:
        refreshes = _refreshes(response.autoscaling_backend, group)
        if any(r["Status"] in ACTIVE for r in refreshes):
            raise _error(
                "InstanceRefreshInProgress",
                f"An Instance Refresh is already in progress and blocks the execution of this Instance "
                f"Refresh for group {group}.",
            )
        refresh: dict[str, Any] = {
            "InstanceRefreshId": str(uuid.uuid4()),
            "AutoScalingGroupName": group,
            "Status": "Pending",
            "StatusReason": "Waiting for the test to move the refresh on.",
            "StartTime": datetime.datetime.now(datetime.UTC),
            "PercentageComplete": 0,
            "InstancesToUpdate": len(response.autoscaling_backend.autoscaling_groups[group].instance_states),
            "Strategy": params.get("Strategy") or "Rolling",
        }
        if params.get("Preferences"):
            refresh["Preferences"] = params["Preferences"]
        if params.get("DesiredConfiguration"):
            refresh["DesiredConfiguration"] = params["DesiredConfiguration"]
        refreshes.insert(0, refresh)
    return ActionResult({"InstanceRefreshId": refresh["InstanceRefreshId"]})


def describe_instance_refreshes(response: Any) -> Any:
    from moto.core.responses import ActionResult

    group = _group_or_fail(response)
    wanted = response._get_param("InstanceRefreshIds") or []
    with _lock:
        found = [
            dict(r)
            for r in _refreshes(response.autoscaling_backend, group)
            if not wanted or r["InstanceRefreshId"] in wanted
        ]
    return ActionResult({"InstanceRefreshes": found})


def cancel_instance_refresh(response: Any) -> Any:
    from moto.core.responses import ActionResult

    group = _group_or_fail(response)
    with _lock:
        active = [
            r
            for r in _refreshes(response.autoscaling_backend, group)
            if r["Status"] in ("Pending", "InProgress")
        ]
        if not active:
            raise _error(
                "ActiveInstanceRefreshNotFound",
                f"No in progress or pending Instance Refresh found for {group}.",
            )
        active[0]["Status"] = "Cancelling"
    return ActionResult({"InstanceRefreshId": active[0]["InstanceRefreshId"]})


CONTROL_PATH = "/_capa-test/instance-refresh-status"
"""Where a test moves a refresh on: a path of the server itself, no AWS operation (none does this)."""


def _move_refresh(query: dict[str, str]) -> tuple[int, str]:
    from moto.autoscaling.models import autoscaling_backends
    from moto.core.models import DEFAULT_ACCOUNT_ID

    status = query.get("status", "")
    if status not in STATES:
        return 400, f"not a refresh status: {status!r}"
    backend = autoscaling_backends[query.get("account", DEFAULT_ACCOUNT_ID)][query.get("region", "us-east-1")]
    with _lock:
        for refresh in _refreshes(backend, query.get("group", "")):
            if refresh["InstanceRefreshId"] == query.get("id"):
                refresh["Status"] = status
                refresh.pop("StatusReason", None)
                if status == "Successful":
                    refresh["PercentageComplete"] = 100
                return 200, "moved"
    return 404, f"no refresh {query.get('id')!r} for group {query.get('group')!r}"


def _with_control_path(call: Any) -> Any:
    def dispatch(app: Any, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") != CONTROL_PATH:
            return call(app, environ, start_response)
        from urllib.parse import parse_qsl

        code, text = _move_refresh(dict(parse_qsl(environ.get("QUERY_STRING", ""))))
        start_response(f"{code} {'OK' if code == 200 else 'Error'}", [("Content-Type", "text/plain")])
        return [text.encode()]

    return dispatch


def _keeping_hook_fields(put: Any) -> Any:
    def put_lifecycle_hook(response: Any) -> Any:
        result = put(response)
        name = response._get_param("LifecycleHookName")
        group = response._get_param("AutoScalingGroupName")
        hook = response.autoscaling_backend.lifecycle_hooks.get(f"{group}_{name}")
        if hook is not None:
            hook.notification_target_arn = response._get_param("NotificationTargetARN")
            hook.role_arn = response._get_param("RoleARN")
            hook.notification_metadata = response._get_param("NotificationMetadata")
        return result

    return put_lifecycle_hook


def install() -> None:
    """Add the instance refresh calls to moto's Auto Scaling responses and keep the lifecycle hook fields
    moto drops, in this process. Idempotent."""
    global _installed
    from moto.autoscaling.responses import AutoScalingResponse
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    with _lock:
        if _installed:
            return
        AutoScalingResponse.start_instance_refresh = start_instance_refresh  # type: ignore[attr-defined]
        AutoScalingResponse.describe_instance_refreshes = describe_instance_refreshes  # type: ignore[attr-defined]
        AutoScalingResponse.cancel_instance_refresh = cancel_instance_refresh  # type: ignore[attr-defined]
        DomainDispatcherApplication.__call__ = _with_control_path(DomainDispatcherApplication.__call__)  # type: ignore[method-assign]
        AutoScalingResponse.put_lifecycle_hook = _keeping_hook_fields(AutoScalingResponse.put_lifecycle_hook)  # type: ignore[method-assign]
        _installed = True


def set_refresh_status(url: str, region: str, group: str, refresh_id: str, status: str) -> None:
    """Move refresh ``refresh_id`` of ``group`` (in ``region``) to ``status`` on the moto server at
    ``url``."""
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"region": region, "group": group, "id": refresh_id, "status": status})
    request = urllib.request.Request(f"{url}{CONTROL_PATH}?{query}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 200:
            raise RuntimeError(f"moving refresh {refresh_id} answered HTTP {answer.status}")


def serve(port: int) -> None:
    from moto.server import main as moto_main

    install()
    moto_main(["--host", "127.0.0.1", "--port", str(port)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="moto server with instance refreshes (loopback only)")
    parser.add_argument("--port", type=int, required=True)
    serve(parser.parse_args(argv).port)


if __name__ == "__main__":
    main()
