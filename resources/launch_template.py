"""Launch templates (``CreateLaunchTemplate``) and their versions (``CreateLaunchTemplateVersion``).

A machine pool's Auto Scaling group launches its instances from a launch template. The template is made
once, tagged in the same call, with a name unique in the account and region (``InvalidLaunchTemplateName.
AlreadyExistsException`` otherwise), so it is a class 1 resource with a natural key; its first version
carries the launch data. When the launch data changes, a new *version* is made:
``CreateLaunchTemplateVersion`` takes a ``ClientToken`` but no tags, and a version has no name — the first
class 4 resource capa-py ships. A version's id is ``<template id>:<version number>``.

Where the endpoint ignores tokens (moto, LocalStack: the profiles lower ``client_token``) a version falls to
class 5: the engine writes an intent before the create, and :meth:`LaunchTemplateVersion.describe_candidates`
offers the versions of the template whose launch data is the desired one, with their creation times.

Versions are not deleted one by one when a pool goes: deleting the template deletes them all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, tag_dict, tag_filters
from capa_py.engine.traits import Traits
from resources._common import (
    carries,
    client_token_param,
    ec2_create_tags,
    ec2_items,
    split_id,
    tag_specifications,
)

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:CreateLaunchTemplate",
    "ec2:CreateLaunchTemplateVersion",
    "ec2:DeleteLaunchTemplate",
    "ec2:DeleteLaunchTemplateVersions",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeLaunchTemplates",
)

VERSION_SEPARATOR = ":"


def canonical(data: Mapping[str, Any]) -> str:
    """Launch data as a stable string: two requests with equal data compare equal whatever their order."""
    return json.dumps(data, sort_keys=True, default=str)


def launch_data_fingerprint(data: Mapping[str, Any]) -> str:
    """A short digest of launch data, for intents and logs (never the data itself: it holds user data)."""
    import hashlib

    return hashlib.sha256(canonical(data).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LaunchTemplateDesired:
    name: str
    data: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """``LaunchTemplateData`` of the first version (kept out of ``repr``: it may carry user data)."""


@dataclass(frozen=True)
class LaunchTemplateVersionDesired:
    template_id: str
    data: Mapping[str, Any] = field(default_factory=dict, repr=False)


def _template(item: Mapping[str, Any]) -> Observed:
    return Observed(
        id=item["LaunchTemplateId"],
        tags=tag_dict(item.get("Tags")),
        created_at=item.get("CreateTime"),
        attributes={
            "name": item.get("LaunchTemplateName"),
            "latest_version": item.get("LatestVersionNumber"),
            "default_version": item.get("DefaultVersionNumber"),
        },
    )


def _version(item: Mapping[str, Any]) -> Observed:
    return Observed(
        id=f"{item['LaunchTemplateId']}{VERSION_SEPARATOR}{item['VersionNumber']}",
        created_at=item.get("CreateTime"),
        attributes={
            "template_id": item["LaunchTemplateId"],
            "version": int(item["VersionNumber"]),
            "data": item.get("LaunchTemplateData", {}),
        },
    )


COMPARED_KEYS = frozenset(
    {
        "ImageId",
        "InstanceType",
        "SecurityGroupIds",
        "UserData",
        "IamInstanceProfile",
        "KeyName",
        "BlockDeviceMappings",
    }
)
"""The members of ``LaunchTemplateData`` capa-py writes. Others an endpoint reports are not compared (moto
copies the template's own ``TagSpecifications`` into its first version's data)."""


def data_matches(reported: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the launch data a describe reports is the data ``wanted`` asks for, over the members capa-py
    writes (one absent on both sides matches)."""
    keys = COMPARED_KEYS | set(wanted)
    return all(
        canonical({"v": reported.get(key)}) == canonical({"v": wanted.get(key)}) for key in sorted(keys)
    )


class LaunchTemplate(ResourceClass[LaunchTemplateDesired]):
    """A launch template; :meth:`create` makes it with its first version."""

    kind = "launch-template"
    service = "ec2"
    create_operation = "CreateLaunchTemplate"
    traits = Traits(tag_on_create=True, client_token=True, natural_key=True, taggable=True)
    """CreateLaunchTemplate accepts TagSpecifications (tag_on_create) and ClientToken (client_token); the
    template name is unique in the region (natural_key); CreateTags tags it later (taggable)."""

    def create(
        self, desired: LaunchTemplateDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call(
            "CreateLaunchTemplate",
            **{
                "LaunchTemplateName": desired.name,
                "LaunchTemplateData": dict(desired.data),
                **tag_specifications("launch-template", tags),
                **client_token_param(token),
            },
        )
        observed = _template(response["LaunchTemplate"])
        if tags and not observed.tags:
            observed.tags = dict(tags)  # the create response does not list the tags it applied
        return observed

    def _describe(self, **params: Any) -> list[Observed]:
        return [
            _template(t)
            for t in ec2_items(self.aws.ec2, "DescribeLaunchTemplates", "LaunchTemplates", **params)
        ]

    def describe_by_id(self, resource_id: str) -> Observed | None:
        found = [o for o in self._describe(LaunchTemplateIds=[resource_id]) if o.id == resource_id]
        return found[0] if found else None

    def describe_by_tags(
        self, tags: Mapping[str, str], desired: LaunchTemplateDesired | None
    ) -> list[Observed]:
        return [o for o in self._describe(Filters=tag_filters(tags)) if carries(o.tags, tags)]

    def describe_by_key(self, desired: LaunchTemplateDesired) -> Observed | None:
        found = [
            o
            for o in self._describe(LaunchTemplateNames=[desired.name])
            if o.attributes["name"] == desired.name
        ]
        return found[0] if found else None

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def delete(self, resource_id: str) -> None:
        """Delete the template and every version of it."""
        self.aws.ec2.call("DeleteLaunchTemplate", LaunchTemplateId=resource_id)

    def key_of(self, desired: LaunchTemplateDesired) -> str:
        return desired.name

    def fingerprint(self, desired: LaunchTemplateDesired) -> dict[str, str]:
        return {"name": desired.name, "data": launch_data_fingerprint(desired.data)}


class LaunchTemplateVersion(ResourceClass[LaunchTemplateVersionDesired]):
    """One version of a launch template (``<template id>:<number>``)."""

    kind = "launch-template-version"
    service = "ec2"
    create_operation = "CreateLaunchTemplateVersion"
    traits = Traits(client_token=True)
    """CreateLaunchTemplateVersion takes a ClientToken (client_token) but no tags, and a version has no name
    of its own: strategy class 4."""

    def create(
        self, desired: LaunchTemplateVersionDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call(
            "CreateLaunchTemplateVersion",
            after_create=True,  # the template may be moments old
            LaunchTemplateId=desired.template_id,
            LaunchTemplateData=dict(desired.data),
            **client_token_param(token),
        )
        return _version(response["LaunchTemplateVersion"])

    def _versions(self, template_id: str, **params: Any) -> list[Observed]:
        items = ec2_items(
            self.aws.ec2,
            "DescribeLaunchTemplateVersions",
            "LaunchTemplateVersions",
            LaunchTemplateId=template_id,
            **params,
        )
        return [_version(v) for v in items]

    def describe_by_id(self, resource_id: str) -> Observed | None:
        template_id, number = split_id(resource_id, VERSION_SEPARATOR, self.kind)
        found = [o for o in self._versions(template_id, Versions=[number]) if o.id == resource_id]
        return found[0] if found else None

    def describe_candidates(self, desired: LaunchTemplateVersionDesired) -> list[Observed]:
        """Versions of the template carrying the desired launch data (made by an interrupted create, or
        the template's first version when the data has not changed since)."""
        return [
            o for o in self._versions(desired.template_id) if data_matches(o.attributes["data"], desired.data)
        ]

    def mismatches(self, observed: Observed, desired: LaunchTemplateVersionDesired) -> list[Mismatch]:
        found: list[Mismatch] = []
        if observed.attributes.get("template_id") != desired.template_id:
            found.append(
                Mismatch("launchTemplateId", desired.template_id, str(observed.attributes.get("template_id")))
            )
        if not data_matches(observed.attributes.get("data", {}), desired.data):
            found.append(
                Mismatch(
                    "launchTemplateData",
                    launch_data_fingerprint(desired.data),
                    launch_data_fingerprint(observed.attributes.get("data", {})),
                )
            )
        return found

    def parent_of(self, desired: LaunchTemplateVersionDesired) -> str | None:
        return desired.template_id

    def delete(self, resource_id: str) -> None:
        """Delete one version (AWS refuses to delete a template's default version: delete the template)."""
        template_id, number = split_id(resource_id, VERSION_SEPARATOR, self.kind)
        response = self.aws.ec2.call(
            "DeleteLaunchTemplateVersions", LaunchTemplateId=template_id, Versions=[number]
        )
        failed = response.get("UnsuccessfullyDeletedLaunchTemplateVersions", [])
        for item in failed:
            code = item.get("ResponseError", {}).get("Code", "")
            if "NotFound" in code:
                raise NotFound(
                    f"ec2:DeleteLaunchTemplateVersions: {resource_id}: {code}",
                    "ec2",
                    "DeleteLaunchTemplateVersions",
                    code,
                )

    def key_of(self, desired: LaunchTemplateVersionDesired) -> str:
        return f"{desired.template_id}@{launch_data_fingerprint(desired.data)}"

    def fingerprint(self, desired: LaunchTemplateVersionDesired) -> dict[str, str]:
        return {"template_id": desired.template_id, "data": launch_data_fingerprint(desired.data)}
