"""Typed views of the gRPC stubs that grpcio-tools generated (`_proto/lease/v1/lease_pb2_grpc.py`,
made when the package is built). The generated classes have no type hints, so each view declares
what every RPC takes and returns, for the blocking channel and for the asyncio one, and takes
the callables from the generated stub: the method paths and (de)serializers stay generated.
"""

from __future__ import annotations

import grpc
import grpc.aio

from ._proto.lease.v1 import lease_pb2 as pb
from ._proto.lease.v1 import lease_pb2_grpc as pb_grpc


class LeaseStub:
    """`lease.v1.LeaseService` and `lease.v1.LeaseAdminService` on a blocking channel."""

    Acquire: grpc.UnaryStreamMultiCallable[pb.AcquireRequest, pb.AcquireResponse]
    Renew: grpc.StreamStreamMultiCallable[pb.RenewRequest, pb.RenewResponse]
    Release: grpc.UnaryUnaryMultiCallable[pb.ReleaseRequest, pb.ReleaseResponse]
    Describe: grpc.UnaryUnaryMultiCallable[pb.DescribeRequest, pb.DescribeResponse]
    Watch: grpc.UnaryStreamMultiCallable[pb.WatchRequest, pb.WatchEvent]
    CheckToken: grpc.UnaryUnaryMultiCallable[pb.CheckTokenRequest, pb.CheckTokenResponse]
    List: grpc.UnaryUnaryMultiCallable[pb.ListRequest, pb.ListResponse]
    Revoke: grpc.UnaryUnaryMultiCallable[pb.RevokeRequest, pb.RevokeResponse]

    def __init__(self, channel: grpc.Channel) -> None:
        _copy_methods(self, channel)


class AioLeaseStub:
    """The same two services on a `grpc.aio` channel."""

    Acquire: grpc.aio.UnaryStreamMultiCallable[pb.AcquireRequest, pb.AcquireResponse]
    Renew: grpc.aio.StreamStreamMultiCallable[pb.RenewRequest, pb.RenewResponse]
    Release: grpc.aio.UnaryUnaryMultiCallable[pb.ReleaseRequest, pb.ReleaseResponse]
    Describe: grpc.aio.UnaryUnaryMultiCallable[pb.DescribeRequest, pb.DescribeResponse]
    Watch: grpc.aio.UnaryStreamMultiCallable[pb.WatchRequest, pb.WatchEvent]
    CheckToken: grpc.aio.UnaryUnaryMultiCallable[pb.CheckTokenRequest, pb.CheckTokenResponse]
    List: grpc.aio.UnaryUnaryMultiCallable[pb.ListRequest, pb.ListResponse]
    Revoke: grpc.aio.UnaryUnaryMultiCallable[pb.RevokeRequest, pb.RevokeResponse]

    def __init__(self, channel: grpc.aio.Channel) -> None:
        _copy_methods(self, channel)


def _copy_methods(view: LeaseStub | AioLeaseStub, channel: grpc.Channel | grpc.aio.Channel) -> None:
    """Sets each RPC the view declares from the generated stubs of both services; a view that
    declares an RPC the generated code lacks fails here, at construction."""
    generated = (pb_grpc.LeaseServiceStub(channel), pb_grpc.LeaseAdminServiceStub(channel))
    for rpc in type(view).__annotations__:
        source = next(stub for stub in generated if hasattr(stub, rpc))
        setattr(view, rpc, getattr(source, rpc))
