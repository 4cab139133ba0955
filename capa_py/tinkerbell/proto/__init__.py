"""The workflow service's protobuf (``workflow.proto``) and the code ``make proto`` generates from it.

``workflow_pb2`` holds the messages, ``workflow_pb2_grpc`` the ``WorkflowService`` stub and servicer base;
both are checked in and must not be edited by hand.
"""
