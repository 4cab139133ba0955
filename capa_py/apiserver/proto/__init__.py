"""The protobuf messages ``capa serve`` reads and writes, and the code ``make proto`` generates from them.

``openapi_v2_pb2`` (from ``openapi_v2.proto``) encodes ``/openapi/v2`` when a client asks for
``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``; ``kubernetes_pb2`` (from ``kubernetes.proto``)
decodes ``application/vnd.kubernetes.protobuf`` request bodies. Both are checked in and must not be edited by
hand.
"""
