"""The controllers' reconcile workflows as ctrlkit graphs, for readers:

    capa ctrlkit graph controllers.graphs:awscluster_create
    capa ctrlkit graph controllers.graphs:awscluster_delete --format dot
    capa ctrlkit graph controllers.graphs:awsmachine_create
    capa ctrlkit graph controllers.graphs:awsmachine_delete

The workflows are the ones the controllers run, declared at module level from the services' steps: a
step is given its scope only when the workflow runs, so drawing one needs no store and no AWS clients.
"""

from __future__ import annotations

from capa_py.ctrlkit.action import Action
from controllers import awscluster, awsmachine


def awscluster_create() -> Action:
    return awscluster.CREATE


def awscluster_delete() -> Action:
    return awscluster.DELETE


def awsmachine_create() -> Action:
    return awsmachine.CREATE


def awsmachine_delete() -> Action:
    return awsmachine.DELETE
