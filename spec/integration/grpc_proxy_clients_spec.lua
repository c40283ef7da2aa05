-- Cluster mode (role proxy): a gRPC consumer's membership of its group on
-- the brokers behind the proxy ends with its connection, as a remoting
-- consumer's does when its channel closes.  The proxy forwards each
-- client's heartbeat over its one pooled connection per broker, so a
-- broker sees every client of the proxy on that connection; a RocketMQ
-- 5.x Java broker, when a group's last heartbeat is channelExpiredTimeout
-- (120 s) old, closes that whole connection, and every call of every
-- other client on it failed "connection lost" (found running the Java
-- SDK's examples through rmq's proxy in front of a 5.3.3 broker:
-- docs/grpc.md, "Compatibility with the Java 5.x SDK").  So the proxy
-- sends UNREGISTER_CLIENT for a client's consumer group when the client's
-- connection ends, killed or not.
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local children = require("support.children")
local gn = require("support.grpc_node")
local server = require("support.server")

describe("the gRPC proxy and the brokers' client registrations", function()
    local ns, b, px
    local servers = {}

    setup(function()
        local c = gn.start_proxy({ brokers = { "clients-b1" } })
        ns, b, px, servers = c.ns, c.brokers[1], c.px, c.servers
    end)

    teardown(function()
        gn.stop_all(servers)
    end)

    -- The client ids the broker lists for group (none: an empty list).
    local function members(group)
        local r = assert(net.call(b.addr, { code = codes.request.GET_CONSUMER_LIST_BY_GROUP,
                                            ext = { consumerGroup = group } }, 5000))
        if r.code ~= 0 then
            return {}
        end
        return cjson.decode(r.body).consumerIdList
    end

    it("unregisters a killed consumer's group from the brokers when its connection ends", function()
        local T, G = "ProxyClientsT", "ProxyClientsG"
        gn.create_topic(b, T)
        assert.truthy(server.eventually(function()
            local q = net.call(ns.addr, { code = codes.request.GET_ROUTEINFO_BY_TOPIC, ext = { topic = T } }, 5000)
            return q ~= nil and q.code == 0
        end, 60000))
        local dir = server.tmpdir()
        local p = assert(children.spawn({ file = "node", args = { "simple_consumer.js" }, cwd = gn.DIR,
                                      stdout = dir .. "/c.out", stderr = dir .. "/c.err",
                                      env = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"), "HOME=" .. dir,
                                              "ENDPOINT=" .. px.grpc_addr, "TOPIC=" .. T, "GROUP=" .. G,
                                              "COUNT=8" } }))
        local function why()
            return ("consumer: %s %s\nproxy: %s"):format(server.read_file(dir .. "/c.out"):sub(-1500),
                server.read_file(dir .. "/c.err"):sub(-1500), px:log():sub(-1500))
        end
        -- Registered through the proxy (its Telemetry settings' group,
        -- forwarded as a heartbeat) while it runs...
        local ok = server.eventually(function() return #members(G) == 1 end, 60000)
        p:kill(9)
        p:wait(10000)
        assert.truthy(ok, why())
        -- ...and, killed (no NotifyClientTermination), gone once its
        -- connection closed: not 120 s later by the broker's expiry.
        ok = server.eventually(function() return #members(G) == 0 end, 60000)
        assert.truthy(ok, why())
    end)
end)
