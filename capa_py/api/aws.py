"""Cluster API Provider AWS kinds (``infrastructure.cluster.x-k8s.io/v1beta2``).

Spec fields carry the names Cluster API Provider AWS gives them, so manifests move between the two. The
status adds what capa-py's strategy engine records: every AWS resource it created (``resources``, keyed by
role) and the intents it wrote before creates that have no tag, token or natural key (``intents``).

The kinds live in :mod:`capa_py.api.aws_cluster` and :mod:`capa_py.api.aws_machine`, what they share in
:mod:`capa_py.api.aws_common`, and the checks of what AWS refuses in :mod:`capa_py.api.aws_checks`; every
name is also exported here.
"""

from __future__ import annotations

from capa_py.api.aws_checks import (
    MAX_PREFIX,
    MAX_TAGS,
    MAX_USER_TAGS,
    MIN_PREFIX,
    OWN_TAGS,
    block_size_issue,
    check_cidr,
    check_tags,
    known_instance_types,
    known_regions,
)
from capa_py.api.aws_cluster import (
    DEFAULT_BASTION_INSTANCE_TYPE,
    APIServerDNSSpec,
    AWSCluster,
    AWSClusterSpec,
    AWSClusterStatus,
    AWSLoadBalancerSpec,
    Bastion,
    BastionStatus,
    LoadBalancerStatus,
    NetworkSpec,
    NetworkStatus,
    S3Bucket,
    SecurityGroupStatus,
    SubnetSpec,
    SubnetStatus,
    VPCSpec,
)
from capa_py.api.aws_common import (
    AWSCLUSTER_FINALIZER,
    AWSMACHINE_FINALIZER,
    INFRA_API_VERSION,
    IntentRecord,
    RecordedResource,
)
from capa_py.api.aws_machine import (
    AMIReference,
    AWSMachine,
    AWSMachineSpec,
    AWSMachineStatus,
    AWSResourceReference,
    CloudInit,
    Ignition,
    InstanceState,
    SpotMarketOptions,
    Volume,
)

__all__ = [
    "AWSCLUSTER_FINALIZER",
    "AWSMACHINE_FINALIZER",
    "DEFAULT_BASTION_INSTANCE_TYPE",
    "INFRA_API_VERSION",
    "MAX_PREFIX",
    "MAX_TAGS",
    "MAX_USER_TAGS",
    "MIN_PREFIX",
    "OWN_TAGS",
    "AMIReference",
    "AWSCluster",
    "AWSClusterSpec",
    "AWSClusterStatus",
    "APIServerDNSSpec",
    "AWSLoadBalancerSpec",
    "AWSMachine",
    "AWSMachineSpec",
    "AWSMachineStatus",
    "AWSResourceReference",
    "Bastion",
    "BastionStatus",
    "CloudInit",
    "Ignition",
    "InstanceState",
    "IntentRecord",
    "LoadBalancerStatus",
    "NetworkSpec",
    "NetworkStatus",
    "RecordedResource",
    "S3Bucket",
    "SecurityGroupStatus",
    "SpotMarketOptions",
    "SubnetSpec",
    "SubnetStatus",
    "VPCSpec",
    "Volume",
    "block_size_issue",
    "check_cidr",
    "check_tags",
    "known_instance_types",
    "known_regions",
]
