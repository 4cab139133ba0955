"""Which AWS operations a module of capa-py calls, read from its source (for the IAM declarations test).

A module names the operations it calls as string literals: the first argument of ``client.call("CreateVpc",
…)`` / ``client.pages(…)``, or an argument handed to a helper that makes the call (``ec2_items(self.aws.ec2,
"DescribeVpcs", …)``, a listing table's ``Ec2Listing("DescribeVpcs", …)``). The services are the clients the
module reaches (``.ec2``, ``.elbv2``, ``.tagging``, ``.client("iam")``); a literal that is an operation of
one of them (per botocore's models) is a call the module makes. Docstrings and comparisons are not calls.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from capa_py.aws.iam_actions import IAM_PREFIX, iam_actions

_PROPERTY_SERVICES = {
    "autoscaling": "autoscaling",
    "ec2": "ec2",
    "elbv2": "elbv2",
    "tagging": "resourcegroupstaggingapi",
}
_OPERATION = re.compile(r"^[A-Z][a-z]+[A-Z][A-Za-z0-9]*$")


@functools.cache
def operations_of(service: str) -> frozenset[str]:
    import botocore.session

    return frozenset(botocore.session.get_session().get_service_model(service).operation_names)


def services_reached(source: str) -> set[str]:
    properties = re.findall(r"\.(" + "|".join(_PROPERTY_SERVICES) + r")\b(?!\s*\()", source)
    services = {_PROPERTY_SERVICES[m] for m in properties}
    services |= set(re.findall(r"\.client\(\s*\"([a-z0-9-]+)\"\s*\)", source))
    return {s for s in services if s in IAM_PREFIX}


def _receiver_service(call: ast.Call) -> str | None:
    """The service of ``….ec2.call(…)``, ``….client("iam").call(…)``; None for any other receiver."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("call", "pages")):
        return None
    receiver = func.value
    if isinstance(receiver, ast.Attribute) and receiver.attr in _PROPERTY_SERVICES:
        return _PROPERTY_SERVICES[receiver.attr]
    if (
        isinstance(receiver, ast.Call)
        and isinstance(receiver.func, ast.Attribute)
        and receiver.func.attr == "client"
        and receiver.args
        and isinstance(receiver.args[0], ast.Constant)
    ):
        return str(receiver.args[0].value)
    return None


def _named_operations(tree: ast.AST) -> list[tuple[str, str | None]]:
    """Each literal handed to a call (or assigned to a name, ``operation = "A" if egress else "B"``) that
    looks like an operation name, with the service of the client it is called on when that is explicit."""
    named: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        values: list[tuple[ast.expr, str | None]] = []
        if isinstance(node, ast.Call):
            service = _receiver_service(node)
            values += [(arg, service if i == 0 else None) for i, arg in enumerate(node.args)]
            values += [(kw.value, None) for kw in node.keywords]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            values.append((node.value, None))
        for value, service in values:
            choices = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            for choice in choices:
                if (
                    isinstance(choice, ast.Constant)
                    and isinstance(choice.value, str)
                    and _OPERATION.match(choice.value)
                ):
                    named.append((choice.value, service))
    return named


def actions_called(path: Path) -> set[str]:
    """The IAM actions the AWS calls of the module at ``path`` need."""
    source = path.read_text()
    services = services_reached(source)
    if not services:
        return set()
    actions: set[str] = set()
    for operation, service in _named_operations(ast.parse(source)):
        for candidate in [service] if service is not None else sorted(services):
            if operation in operations_of(candidate):
                actions.update(iam_actions(candidate, operation))
    return actions


def declared_actions(path: Path) -> tuple[str, ...] | None:
    """The module's ``IAM_ACTIONS`` (None: it declares none), read without importing it."""
    tree = ast.parse(path.read_text())
    for stmt in tree.body:
        target = None
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            target, value = stmt.target.id, stmt.value
        elif (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        ):
            target, value = stmt.targets[0].id, stmt.value
        if target == "IAM_ACTIONS" and value is not None:
            return tuple(ast.literal_eval(value))
    return None


PACKAGES = ("capa_py", "resources", "controllers", "capa_app")


def modules(root: Path) -> dict[str, Path]:
    """Every module of capa-py's packages under ``root``, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


NOT_CALLS: dict[str, str] = {}
"""Modules whose operation-like literals are not calls, and why (none so far)."""


def declaration_problems(root: Path, policy_modules: set[str]) -> list[str]:
    """Every module under ``root`` whose ``IAM_ACTIONS`` differs from what its calls need, and every module
    declaring actions that no policy (``policy_modules``) collects."""
    problems: list[str] = []
    for name, path in modules(root).items():
        if name in NOT_CALLS:
            continue
        needed = actions_called(path)
        declared = declared_actions(path)
        if declared is None:
            if needed:
                problems.append(f"{name} calls AWS but declares no IAM_ACTIONS; it needs {sorted(needed)}")
            continue
        if list(declared) != sorted(set(declared)):
            problems.append(f"{name}: IAM_ACTIONS must be sorted and without repeats")
        missing = needed - set(declared)
        extra = set(declared) - needed
        if missing:
            problems.append(f"{name} calls AWS with actions its IAM_ACTIONS lacks: {sorted(missing)}")
        if extra:
            problems.append(f"{name} declares IAM_ACTIONS no call of it needs: {sorted(extra)}")
        if name not in policy_modules:
            problems.append(
                f"{name} declares IAM_ACTIONS but no policy collects them: add it to CONTROLLER_MODULES or "
                "OPERATOR_MODULES in capa_app/iam/policy.py"
            )
    return problems
