-- rmq.proxy: the cluster-mode gRPC proxy (role = "proxy", conf/proxy.lua,
-- docs/grpc.md "Cluster mode").  A stateless RocketMQ 5 proxy: it serves
-- MessagingService on grpcServerPort and reaches the NameServers and
-- brokers over remoting.  All of it is C (src/grpc/service.c with the
-- src/grpc/upstream.c backend): no remoting request is served here, so
-- the role has no processors; its gRPC sessions' shadow connections are
-- this role's (ctx.role "proxy").
local M = {}

--- No remoting processors: a proxy serves gRPC only.
function M.processors(_conf)
    return {}
end

return M
