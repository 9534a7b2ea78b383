"""DescribeCluster (key 60): the live agents as brokers, as Metadata lists them (those having
the request's listener, at their endpoint there). Its authorized operations, asked for, are
the cluster's bitfield (0 without DESCRIBE on it), as AuthHelper.computeDescribeClusterResponse."""

from __future__ import annotations

from kio.schema.describe_cluster import v0, v1
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32
from kio.static.protocol import Entity, RequestHeader

from ..authz import NOT_COMPUTED
from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..session import SESSION

Request = (v0.DescribeClusterRequest | v1.DescribeClusterRequest)
"""kio's DescribeClusterRequest of each version served (0-1)."""


BROKERS = 1  # endpoint_type: brokers (2, controllers: there are none to describe)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    endpoint = int(request.endpoint_type) if isinstance(request, v1.DescribeClusterRequest) \
        else BROKERS  # v0 describes brokers only
    if endpoint != BROKERS:
        return b("DescribeClusterResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.unsupported_endpoint_type,
                 error_message="siltstream has no controllers: describe brokers",
                 endpoint_type=i8(endpoint), cluster_id=ctx.cluster_id(),
                 controller_id=i32(-1), brokers=(),
                 cluster_authorized_operations=i32(NOT_COMPUTED))
    operations = ctx.authz.cluster_operations(request.include_cluster_authorized_operations)
    brokers = await ctx.run(ctx.live_brokers, SESSION.get().listener)
    return b("DescribeClusterResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
             error_message=None, endpoint_type=i8(BROKERS), cluster_id=ctx.cluster_id(),
             controller_id=i32(brokers[0].node_id if brokers else -1),
             brokers=tuple(b("DescribeClusterBroker", broker_id=i32(br.node_id), host=br.host,
                             port=i32(br.port), rack=None) for br in brokers),
             cluster_authorized_operations=i32(operations))
