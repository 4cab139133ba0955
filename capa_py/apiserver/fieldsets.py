"""Field sets: which fields of an object a manager owns, and their ``FieldsV1`` wire form.

A path names one node of an object: a sequence of path elements, each in its wire spelling:

* ``f:<name>``: a field of a map or a struct (``f:spec``, ``f:metadata``);
* ``k:<json>``: an item of an associative list, by its keys (``k:{"name":"nginx"}``; keys sorted by name,
  compact JSON);
* ``v:<json>``: an item of a set, by its value (``v:"example.com/finalizer"``);
* ``i:<n>``: an item of a list by its index.

A field set is the set of paths a manager owns (its members). ``FieldsV1`` nests them: each element maps to
the nested set of its children, ``{}`` when the node is a member without children, and ``".": {}`` marks a
node that is itself a member and also has children::

    {"f:data": {".": {}, "f:a": {}}}   # owns .data itself and .data.a

Member sets and ``FieldsV1`` documents map one to one (:func:`encode`, :func:`decode`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

Element = str
Path = tuple[Element, ...]
FieldSet = frozenset[Path]

EMPTY: FieldSet = frozenset()
_RANK = {"f": 0, "k": 1, "v": 2, "i": 3}


def canonical_json(value: Any) -> str:
    """JSON as the API server writes it in keys and values: compact, object keys sorted, non-ASCII kept,
    ``<``, ``>`` and ``&`` escaped."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def field(name: str) -> Element:
    return f"f:{name}"


def key(fields: dict[str, Any]) -> Element:
    return f"k:{canonical_json(fields)}"


def value(item: Any) -> Element:
    return f"v:{canonical_json(item)}"


def index(position: int) -> Element:
    return f"i:{position}"


def decode_key(element: Element) -> dict[str, Any]:
    """The key fields a ``k:`` element names."""
    decoded = json.loads(element[2:])
    return decoded if isinstance(decoded, dict) else {}


def parse_element(text: str) -> Element:
    """An element as read from ``FieldsV1``, in canonical spelling; ValueError when it is not one."""
    prefix, sep, rest = text.partition(":")
    if not sep or prefix not in _RANK:
        raise ValueError(f"unknown path element {text!r}")
    if prefix == "f":
        return text
    if prefix == "i":
        if not rest.isdigit():
            raise ValueError(f"index element {text!r} must hold a number")
        return index(int(rest))
    try:
        decoded = json.loads(rest)
    except json.JSONDecodeError as exc:
        raise ValueError(f"path element {text!r} is not JSON: {exc}") from exc
    if prefix == "k":
        if not isinstance(decoded, dict) or not decoded:
            raise ValueError(f"key element {text!r} must hold a JSON object")
        return key(decoded)
    return value(decoded)


def sort_key(element: Element) -> tuple[int, Any]:
    """Field names first, then keys, then values, then indices (each in order among themselves)."""
    prefix, _, rest = element.partition(":")
    return (_RANK[prefix], int(rest) if prefix == "i" else rest)


def element_string(element: Element) -> str:
    """An element as conflict messages print it: ``.name``, ``[name="x"]``, ``[="x"]``, ``[0]``."""
    prefix, _, rest = element.partition(":")
    if prefix == "f":
        return f".{rest}"
    if prefix == "k":
        fields = json.loads(rest)
        return "[" + ",".join(f"{k}={canonical_json(v)}" for k, v in sorted(fields.items())) + "]"
    if prefix == "v":
        return f"[={rest}]"
    return f"[{rest}]"


def path_string(path: Path) -> str:
    return "".join(element_string(e) for e in path) or "."


# -- the tree form --------------------------------------------------------------------------------------


class _Node:
    __slots__ = ("children", "member")

    def __init__(self) -> None:
        self.member = False
        self.children: dict[Element, _Node] = {}


def _tree(paths: Iterable[Path]) -> _Node:
    root = _Node()
    for path in paths:
        node = root
        for element in path:
            node = node.children.setdefault(element, _Node())
        node.member = True
    return root


def _encode_node(node: _Node) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if node.member and node.children:
        out["."] = {}
    for element in sorted(node.children, key=sort_key):
        out[element] = _encode_node(node.children[element])
    return out


def encode(paths: Iterable[Path]) -> dict[str, Any]:
    """The ``FieldsV1`` document of a field set (the empty path, the whole object, cannot be encoded and
    is left out)."""
    return _encode_node(_tree(p for p in paths if p))


def decode(document: Any) -> FieldSet:
    """The field set of a ``FieldsV1`` document; ValueError when it is malformed."""
    if not isinstance(document, dict):
        raise ValueError("fieldsV1 must be a JSON object")
    paths: set[Path] = set()

    def walk(node: dict[str, Any], prefix: Path) -> None:
        for text, child in node.items():
            if text == ".":
                if not prefix:
                    raise ValueError("fieldsV1 may not mark the whole object with '.'")
                paths.add(prefix)
                continue
            if not isinstance(child, dict):
                raise ValueError(f"fieldsV1 entry {text!r} must hold a JSON object")
            path = (*prefix, parse_element(text))
            if child:
                walk(child, path)
            else:
                paths.add(path)

    walk(document, ())
    return frozenset(paths)


def iterate(paths: Iterable[Path]) -> Iterator[Path]:
    """The paths in the order the API server lists them: at each level the members first, then the
    children, each by :func:`sort_key`."""

    def walk(node: _Node, prefix: Path) -> Iterator[Path]:
        ordered = sorted(node.children, key=sort_key)
        for element in ordered:
            if node.children[element].member:
                yield (*prefix, element)
        for element in ordered:
            child = node.children[element]
            if child.children:
                yield from walk(child, (*prefix, element))

    yield from walk(_tree(paths), ())


def under(path: Path, prefixes: Iterable[Path]) -> bool:
    """Whether ``path`` is one of ``prefixes`` or lies below one of them."""
    return any(path[: len(p)] == p for p in prefixes)
