"""The protobuf form of OpenAPI v2 (``openapi_v2.proto``) and the code ``make proto`` generates from it.

``openapi_v2_pb2`` holds the messages ``/openapi/v2`` is encoded with when a client asks for
``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``; it is checked in and must not be edited by
hand.
"""
