"""The AWS work of the AWSCluster and AWSMachine controllers, one service per part of the infrastructure.

Each service is a sequence of steps, functions of one scope, that reads top to bottom, marks its own
conditions and declares the deletion of the kinds it creates:

* :mod:`controllers.services.network`: the VPC, subnets and zones, the internet gateway, NAT gateways
  (and the wait for them), route tables;
* :mod:`controllers.services.securitygroups`: the cluster's security groups and their rules;
* :mod:`controllers.services.loadbalancer`: the API server's network load balancer, target group and
  listener (and the wait for them), and the control-plane endpoint;
* :mod:`controllers.services.sweep`: the sweep of stray resources tagged as the cluster's;
* :mod:`controllers.services.instances`: a machine's EC2 instance and its load-balancer registration.

The cluster's services share a :class:`~controllers.services.cluster_scope.ClusterScope`: the reconcile's
scope, the resource classes and what this pass has learnt. The controllers declare their ctrlkit graphs
from these steps at module level (:mod:`controllers.awscluster`, :mod:`controllers.awsmachine`).
"""
