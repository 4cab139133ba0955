"""JSON merge patch as RFC 7386 defines it (its appendix A examples), and JSON patch errors."""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.apiserver.patch import JSON_PATCH, MERGE, apply_patch, merge_patch
from capa_py.apiserver.status import ApiError


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_follows_rfc_7386(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


def test_merge_patch_leaves_its_inputs_alone() -> None:
    target = {"a": {"b": 1}}
    patch = {"a": {"c": [1]}}
    merged = merge_patch(target, patch)
    merged["a"]["c"].append(2)
    assert target == {"a": {"b": 1}}
    assert patch == {"a": {"c": [1]}}


def test_patch_bodies_of_the_wrong_shape_are_refused() -> None:
    with pytest.raises(ApiError) as merge:
        apply_patch(MERGE, {"a": 1}, [1])
    assert merge.value.code == 400
    with pytest.raises(ApiError) as operations:
        apply_patch(JSON_PATCH, {"a": 1}, {"op": "add"})
    assert operations.value.code == 400
    with pytest.raises(ApiError) as missing:
        apply_patch(JSON_PATCH, {"a": 1}, [{"op": "remove", "path": "/b"}])
    assert missing.value.code == 422
    with pytest.raises(ApiError) as replaced_root:
        apply_patch(JSON_PATCH, {"a": 1}, [{"op": "replace", "path": "", "value": [1]}])
    assert replaced_root.value.code == 422
