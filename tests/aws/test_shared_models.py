"""botocore's service models are read once per process: every client, whatever its region or identity,
and the offline checks of the API models share one loader and the model it parsed (a second parse of EC2's
model costs 14 MiB)."""

from __future__ import annotations

from botocore.credentials import Credentials

from capa_py.api.aws_checks import known_instance_types
from capa_py.aws.models import shared_loader
from capa_py.aws.session import AWSSettings, ClientPool

ENDPOINT = "http://127.0.0.1:1"
"""Never called: making clients sends nothing."""


def test_clients_of_every_region_and_identity_share_one_loader_and_model() -> None:
    settings = AWSSettings(region="eu-west-1", endpoint_url=ENDPOINT)
    default = ClientPool(settings)
    identity = ClientPool(settings, credentials=Credentials("AKIDEXAMPLE", "secret"))
    clients = [
        default.for_region().ec2.raw,
        default.for_region("us-east-2").ec2.raw,
        identity.for_region().ec2.raw,
    ]
    loaders = {id(c._loader) for c in clients}
    assert loaders == {id(shared_loader())}, "one botocore loader for the whole process"
    # The parsed model is the loader's cached one: reading it again is the same object, not a new parse.
    first = shared_loader().load_service_model("ec2", "service-2")
    assert shared_loader().load_service_model("ec2", "service-2") is first
    assert clients[0].meta.service_model.operation_model("CreateVpc").name == "CreateVpc"
    # boto3 appends its data directory to the loader of every session it makes: kept once.
    paths = shared_loader().search_paths
    assert len(paths) == len(set(paths))


def test_the_offline_instance_type_check_reads_the_clients_model() -> None:
    model = shared_loader().load_service_model("ec2", "service-2")
    assert known_instance_types() == frozenset(model["shapes"]["InstanceType"]["enum"])
    assert "t3.micro" in known_instance_types()
