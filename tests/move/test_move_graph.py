"""What a move takes: each cluster's graph (found through specs, labels, owner references and claimed
Hardware), owners first; nothing of another cluster or of no cluster."""

from __future__ import annotations

from capa_py.api.aws_templates import AWSMachineTemplate
from capa_py.api.cluster import Cluster
from capa_py.move import discover
from capa_py.store.sqlite import SQLiteStore
from tests.api.test_api_templates import machine_template
from tests.move.scenario import UNRELATED, keys, populate

DEMO = {
    ("Cluster", "default", "demo"),
    ("AWSCluster", "default", "demo"),
    ("Secret", "default", "demo-bootstrap"),
    ("Secret", "default", "demo-kubeconfig"),
    *{
        (k, "default", f"demo-{m}")
        for k in ("Machine", "AWSMachine")
        for m in ("control-plane-0", "worker-0", "worker-1")
    },
}
LAB = {
    ("Cluster", "default", "lab"),
    ("TinkerbellCluster", "default", "lab"),
    ("Secret", "default", "lab-kubeconfig"),
    ("Secret", "default", "lab-extra"),
    ("Hardware", "default", "machine1"),
    ("Template", "default", "lab-cp-0"),
    ("Workflow", "default", "lab-cp-0"),
    *{
        (k, "default", f"lab-{m}")
        for k in ("Machine", "TinkerbellMachine")
        for m in ("cp-0", "worker-0", "worker-1")
    },
    *{("Secret", "default", f"lab-{m}-bootstrap") for m in ("cp-0", "worker-0", "worker-1")},
}


def test_a_named_cluster_brings_its_whole_graph_and_nothing_of_another_cluster(source: SQLiteStore) -> None:
    populate(source)

    assert keys(discover(source, cluster="lab")) == LAB
    assert keys(discover(source, cluster="demo")) == DEMO


def test_a_namespace_brings_every_cluster_but_no_object_of_no_cluster(source: SQLiteStore) -> None:
    populate(source)

    graph = keys(discover(source, namespace="default"))

    assert graph == DEMO | LAB
    assert not graph & UNRELATED


def test_owners_come_before_their_dependents(source: SQLiteStore) -> None:
    populate(source)

    graph = discover(source, namespace="default")

    position = {o.uid: i for i, o in enumerate(graph)}
    for obj in graph:
        for ref in obj.metadata.owner_references:
            if ref.uid in position:
                assert position[ref.uid] < position[obj.uid], f"{obj.ref()} comes before its owner {ref.name}"
    assert all(isinstance(o, Cluster) for o in graph[:2])


def test_an_unknown_cluster_has_an_empty_graph(source: SQLiteStore) -> None:
    populate(source)

    assert discover(source, cluster="nope") == []


def test_a_clusters_machine_templates_move_with_it_and_no_other_template(source: SQLiteStore) -> None:
    """A template of the cluster (its cluster-name label, or owned by the Cluster, as Cluster API's
    topology controller owns those it makes) moves; a template of no cluster stays."""
    populate(source)
    demo = source.get(Cluster, "demo", "default")
    labelled = AWSMachineTemplate.model_validate(machine_template(name="demo-workers"))
    labelled.metadata.labels["cluster.x-k8s.io/cluster-name"] = "demo"
    owned = AWSMachineTemplate.model_validate(machine_template(name="demo-control-plane"))
    owned.metadata.owner_references = [demo.owner_reference(controller=False)]
    for template in (labelled, owned, AWSMachineTemplate.model_validate(machine_template(name="shared"))):
        source.create(template)

    graph = keys(discover(source, cluster="demo"))

    assert graph == DEMO | {
        ("AWSMachineTemplate", "default", "demo-workers"),
        ("AWSMachineTemplate", "default", "demo-control-plane"),
    }
