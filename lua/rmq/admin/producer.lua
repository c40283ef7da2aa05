-- The producer family of `rmq admin`: producerConnection, as 4.9.8's
-- mqadmin (ProducerConnectionSubCommand): GET_PRODUCER_CONNECTION_LIST
-- (204) at the first broker of the topic's route.
--
--   producer.connection(ctx, {producerGroup=, topic=}) -> {connections = {{clientId=, clientAddr=, ...}}}
local codes = require("rmq.codes")
local remote = require("rmq.admin.remote")
local rpc = require("rmq.admin.rpc")

local M = {}

function M.connection(ctx, o)
    for _, bd in ipairs((rpc.route_brokers(ctx, o.topic))) do
        local addr = rpc.select_addr(bd)
        if addr then
            local t = rpc.json(ctx, addr, { code = codes.request.GET_PRODUCER_CONNECTION_LIST,
                                            ext = { producerGroup = o.producerGroup } })
            return { brokerAddr = addr, connections = require("rmq.admin").array(rpc.connections(t.connectionSet)) }
        end
    end
    error(remote.failed(nil, ("no broker serves topic %s"):format(o.topic)), 0)
end

M.commands = {
    {
        name = "producerConnection", desc = "Query producer's socket connection and client version",
        options = {
            { "g", "producerGroup", arg = true, required = true, desc = "producer group name" },
            { "t", "topic", arg = true, required = true, desc = "topic name" },
        },
        run = M.connection,
        format = function(r)
            local rows = {}
            for i, c in ipairs(r.connections) do
                rows[i] = { ("%04d"):format(i), c.clientId, c.clientAddr, c.language, c.versionDesc }
            end
            return require("rmq.admin").table({ "#", "#ClientId", "#ClientAddr", "#Language", "#Version" }, rows)
        end,
    },
}

return M
