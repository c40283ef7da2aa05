-- rmq.client.conns, the one connection cache of the client roles
-- (transaction producer, consumer, request-reply), against a real
-- NameServer process: one connection per address, reconnect after a
-- close, and tasks that reconnect side by side end up on one connection
-- with the others closed.
local net = require("rmq.net")
local codes = require("rmq.codes")
local conns = require("rmq.client.conns")
local server = require("support.server")

describe("client connection cache", function()
    local ns

    setup(function()
        ns = server.start({ role = "namesrv", workers = 1 })
    end)

    teardown(function()
        assert.equal(0, (ns:stop()))
    end)

    local function works(c)
        local r = assert(c:call({ code = codes.request.GET_BROKER_CLUSTER_INFO }, 3000))
        return r.code == codes.response.SUCCESS
    end

    it("keeps one open connection an address and reconnects after a close", function()
        local connected = {}
        local cache = conns.new({ on_connect = function(addr, c) connected[#connected + 1] = { addr, c } end })
        assert.is_nil(cache:peek(ns.addr))
        local c1 = assert(cache:get(ns.addr, 3000))
        assert.equal(c1, cache:get(ns.addr, 3000))
        assert.equal(c1, cache:peek(ns.addr))
        assert.is_true(works(c1))
        assert.same({ { ns.addr, c1 } }, connected)

        c1:close()
        assert.is_nil(cache:peek(ns.addr))
        local c2 = assert(cache:get(ns.addr, 3000))
        assert.are_not.equal(c1, c2)
        assert.is_true(works(c2))
        assert.equal(2, #connected)
        cache:close_all()
        assert.is_true(c2.closed)
    end)

    it("keeps the first of connections made side by side and closes the rest", function()
        local kept = 0
        local cache = conns.new({ on_connect = function() kept = kept + 1 end })
        local got, done = {}, 0
        for i = 1, 8 do
            net.spawn(function()
                got[i] = assert(cache:get(ns.addr, 3000))
                done = done + 1
            end)
        end
        assert.truthy(server.eventually(function() return done == 8 end, 5000))
        for i = 2, 8 do
            assert.equal(got[1], got[i])
        end
        assert.equal(1, kept)
        assert.is_false(got[1].closed)
        assert.is_true(works(got[1]))
        cache:close_all()
    end)

    it("runs a last call on each open connection before closing them all", function()
        local cache = conns.new()
        local c = assert(cache:get(ns.addr, 3000))
        local seen = {}
        cache:close_all(function(addr, conn)
            seen[#seen + 1] = addr
            assert.is_true(works(conn))
        end)
        assert.same({ ns.addr }, seen)
        assert.is_true(c.closed)
        assert.is_nil(cache:peek(ns.addr))
        local n = 0
        for _ in cache:each() do n = n + 1 end
        assert.equal(0, n)
    end)

    it("says why when nothing listens", function()
        local cache = conns.new()
        local c, err = cache:get("127.0.0.1:1", 1000)
        assert.is_nil(c)
        assert.is_string(err)
    end)
end)
