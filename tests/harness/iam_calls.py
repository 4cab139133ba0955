"""The whole-suite IAM check: every AWS call the suite made is granted, every grant is used.

``CAPA_AWS_CALL_LOG`` (:mod:`capa_py.aws.calllog`) makes every process of the suite that uses capa-py's
clients — pytest's workers, and the CLI and controller processes tests start — log the operations it called.
At the end of a whole run that passed, :func:`check_calls` compares them with the policies ``capa iam
policy`` prints:

* a call whose IAM action the policy does not grant would fail with AccessDenied under that policy;
* an action the policy grants that no test called is either unneeded (least privilege says remove it) or
  untested; :data:`NEVER_CALLED` lists, with the reason, the grants no test can reach.

The calls are checked against the operator's policy (the controller's plus the audit's and ``capa iam``'s):
a log line does not say which code made the call. That the controller's own code needs only the controller's
policy is checked statically, module by module (``tests/aws/test_iam_declarations.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from capa_py.aws.iam_actions import iam_actions

NEVER_CALLED: dict[str, str] = {
    "iam:PassRole": "no API call: AWS checks it inside RunInstances when an instance profile is given",
    "iam:CreateServiceLinkedRole": "no API call of capa-py: AWS makes the Elastic Load Balancing, EC2 Spot "
    "and Auto Scaling service-linked roles on the caller's behalf, and moto has no service-linked roles",
}
"""Granted actions no test calls, and why."""


def check_calls(
    calls: Iterable[tuple[str, str]], granted: Iterable[str], never_called: Mapping[str, str] = NEVER_CALLED
) -> list[str]:
    """What is wrong: calls the policy does not grant, grants nothing called (beyond ``never_called``),
    and ``never_called`` entries that were called after all (stale reasons)."""
    granted = frozenset(granted)
    problems: list[str] = []
    called: set[str] = set()
    for service, operation in sorted(set(calls)):
        for action in iam_actions(service, operation):
            called.add(action)
            if action not in granted:
                problems.append(
                    f"{service}:{operation} was called, but the policy does not grant {action}: declare it "
                    "in IAM_ACTIONS of the module that calls it, and list that module in "
                    "capa_app/iam/policy.py"
                )
    for action in sorted(granted - called):
        if action not in never_called:
            problems.append(
                f"the policy grants {action}, but no test called it: remove it from the IAM_ACTIONS that "
                "declare it, test the call, or say why no test can in NEVER_CALLED"
            )
    for action in sorted(set(never_called) & called):
        problems.append(f"{action} is listed in NEVER_CALLED, but a test called it: remove it from the list")
    return problems


def is_whole_run(config: pytest.Config) -> bool:
    """Whether this run is the whole suite: no -k, -m, --lf, --deselect, and only the test paths."""
    option = config.option
    if getattr(option, "keyword", "") or getattr(option, "markexpr", ""):
        return False
    if (
        getattr(option, "lf", False)
        or getattr(option, "deselect", None)
        or getattr(option, "exitfirst", False)
    ):
        return False
    root = config.rootpath
    paths = {str((config.invocation_params.dir / arg).resolve()) for arg in config.args} or {
        str(root / "tests")
    }
    wanted = {str((root / path).resolve()) for path in config.getini("testpaths")}
    return paths == wanted
