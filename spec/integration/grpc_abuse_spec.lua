-- Issue 23's bad input, from hostile HTTP/2 peers written here in Lua
-- (spec/support/h2raw.lua: raw frames on plain sockets, so thousands of
-- streams cost the spec little): idle streams by the ten thousand over
-- many connections and from several addresses, bounded per address and
-- in total by the memory budget (memoryBudgetPerPeerBytes,
-- memoryBudgetBytes: src/grpc/h2.h); rapid reset on one connection and
-- spread over many; and strings that are not UTF-8 (refused, never
-- stored).  After each, a well-behaved client (rmq's own gRPC client,
-- rmq.client.grpc) from another address is served.
local net = require("rmq.net")
local grpc = require("rmq.client.grpc")
local gn = require("support.grpc_node")
local h2 = require("support.h2raw")
local prom = require("support.prom")
local server = require("support.server")

local TOPIC = "GrpcAbuseTopic"
local MiB = 1024 * 1024
local PER_PEER, TOTAL = 8 * MiB, 12 * MiB
-- What h2.c charges an open stream: the bound in streams.
local STREAM_BYTES = 4096
-- ASan's shadow memory and quarantine make RSS meaningless.
local SANITIZED = os.getenv("RMQ_SERVER_ASAN_OPTIONS") ~= nil

local rss_kb = require("support.slowreader").rss_kb   -- VmRSS in KiB

-- nconn connections from address `from`, each opening `per` Telemetry
-- streams that never send a message (bidirectional calls: the request
-- timeout does not end them).
local function idle_flood(s, from, nconn, per)
    local f = { conns = {} }
    local block = h2.headers_block("Telemetry")
    for i = 1, nconn do
        local c = h2.connect(s.grpc_addr, from)
        for _ = 1, per do
            c:open("Telemetry", block)
        end
        f.conns[i] = c
    end
    function f.pump()
        local opened, ended, closed = 0, 0, 0
        for _, c in ipairs(f.conns) do
            c:pump()
            -- A connection the server closed holds none of its streams.
            opened, ended = opened + c.opened, ended + (c.closed and c.opened or c.nended)
            closed = closed + (c.closed and 1 or 0)
        end
        return opened, ended, closed
    end
    function f.close()
        for _, c in ipairs(f.conns) do
            c:close()
        end
    end
    return f
end

local function served(s, what)
    local c = assert(grpc.connect(s.grpc_addr))
    local route, err = c:query_route(TOPIC)
    assert(route, what .. ": QueryRoute: " .. tostring(err))
    local e, serr = c:send(TOPIC, "served while " .. what)
    c:close()
    assert(e, what .. ": SendMessage: " .. tostring(serr))
    return e
end

local function budget(s)
    local text = prom.scrape(s.metrics_addr)
    return {
        requests = prom.value(text, "rmq_memory_budget_used_bytes", 'kind="requests"'),
        peer_max = prom.value(text, "rmq_memory_budget_peer_max_bytes"),
        refused_peer = prom.value(text, "rmq_memory_budget_refused_total", 'limit="memoryBudgetPerPeerBytes"'),
        refused_total = prom.value(text, "rmq_memory_budget_refused_total", 'limit="memoryBudgetBytes"'),
    }, text
end

describe("the gRPC port under abuse", function()
    local s

    setup(function()
        s = gn.start({ grpcMaxConcurrentStreams = 1000, grpcMaxResetsPerSecond = 200,
                       memoryBudgetPerPeerBytes = PER_PEER, memoryBudgetBytes = TOTAL },
                     { metrics = true, topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("holds one address's idle streams to memoryBudgetPerPeerBytes, closes its flooding connections, serves others", function()
        local before = rss_kb(s.pid)
        -- 40 connections x 1,000 idle streams from 127.0.0.2: the stream
        -- limit of each connection (1,000) would allow them all.
        local a = idle_flood(s, "127.0.0.2", 40, 1000)
        local max_live = PER_PEER // STREAM_BYTES
        local opened, ended, closed
        local settled = server.eventually(function()
            opened, ended, closed = a.pump()
            -- Every stream past the budget has been answered (or its
            -- connection closed).
            return opened == 40000 and opened - ended <= max_live
        end, 180000)
        assert.is_truthy(settled, ("opened %d, ended %d"):format(opened, ended))
        assert.is_true(opened - ended > 0, "nothing held at all")
        -- Past the budget each stream was refused, and a connection that
        -- went on opening them was closed (64 refusals: a flood, not a
        -- client backing off).
        local b, text = budget(s)
        assert.is_true(b.peer_max <= PER_PEER, text)
        assert.is_true(b.refused_peer >= 64, text)
        assert.is_true(closed >= 1, "no flooding connection was closed")
        for _, c in ipairs(a.conns) do
            if c.closed then   -- each told why: GOAWAY ENHANCE_YOUR_CALM
                assert.equal(11, c.goaway)
            end
        end
        assert.matches("kept opening streams past memoryBudgetPerPeerBytes %(64 refused%); GOAWAY", s:log())
        -- Another address is served meanwhile.
        served(s, "127.0.0.2 holds its share")
        -- Bounded: 40,000 streams unbounded would be ~130 MB.
        assert.is_true(SANITIZED or rss_kb(s.pid) - before < 48 * 1024,
                       ("RSS grew from %d to %d KiB"):format(before, rss_kb(s.pid)))
        a.close()
        assert.is_truthy(server.eventually(function()
            return budget(s).requests == 0
        end, 30000), "the streams' budget was not given back: " .. prom.scrape(s.metrics_addr))
    end)

    it("holds every address's idle streams together to memoryBudgetBytes", function()
        -- 60 streams a connection: refused ones never make 64, so every
        -- connection stays and holds what it was given.
        local a = idle_flood(s, "127.0.0.2", 100, 60)
        local b = idle_flood(s, "127.0.0.3", 100, 60)
        local max_live = TOTAL // STREAM_BYTES
        local oa, ea, ob, eb
        local last, still = nil, 0
        local settled = server.eventually(function()
            oa, ea = a.pump()
            ob, eb = b.pump()
            -- Settled: everything sent and answered as far as it will be
            -- (the figure the same for a while).
            local now = ("%d/%d"):format(ea, eb)
            still = now == last and still + 1 or 0
            last = now
            return oa == 6000 and ob == 6000 and still >= 200 and
                   (oa - ea) + (ob - eb) <= max_live
        end, 180000)
        assert.is_truthy(settled, ("opened %d+%d, ended %d+%d"):format(oa, ob, ea, eb))
        -- Each address held to its own share, and both together to the total.
        assert.is_true(oa - ea <= PER_PEER // STREAM_BYTES and ob - eb <= PER_PEER // STREAM_BYTES)
        local fig, text = budget(s)
        assert.is_true(fig.refused_total >= 1, text)
        -- Spent up to the limit: less than a session (32 KiB) is left.
        assert.is_true(fig.requests <= TOTAL and fig.requests > TOTAL - 32768, text)
        -- The total is spent (less than a stream is left): a third
        -- address's new connection is not taken: GOAWAY
        -- ENHANCE_YOUR_CALM, then closed.
        local late = h2.connect(s.grpc_addr, "127.0.0.4")
        late:open("Telemetry")
        assert.is_truthy(server.eventually(function()
            late:pump()
            a.pump()
            b.pump()
            return late.closed
        end, 30000), "a connection past memoryBudgetBytes was taken")
        assert.equal(11, late.goaway)   -- ENHANCE_YOUR_CALM, written before the close
        a.close()
        b.close()
        assert.is_truthy(server.eventually(function()
            return budget(s).requests == 0
        end, 30000), "the streams' budget was not given back: " .. prom.scrape(s.metrics_addr))
        served(s, "the flood has gone")
    end)

    -- One connection from 127.0.0.2 opening 3,000 SendMessage streams,
    -- each followed by what `after(c, id)` queues (its RST_STREAM, or a
    -- frame the server resets the stream for): closed with GOAWAY
    -- ENHANCE_YOUR_CALM (the server writes it before it closes, and
    -- reads and drops our frames behind it, so no TCP reset takes it
    -- from us), the log saying why; another client is served.
    local function reset_flood(after, logged, what)
        local c = h2.connect(s.grpc_addr, "127.0.0.2")
        local block = h2.headers_block("SendMessage")
        for _ = 1, 3000 do
            after(c, c:open("SendMessage", block))
        end
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.closed
        end, 60000), "the connection was not closed")
        assert.equal(11, c.goaway)   -- ENHANCE_YOUR_CALM
        -- The last stream it took, not one it never saw.
        assert.is_true(c.goaway_last >= 1 and c.goaway_last < 6000, tostring(c.goaway_last))
        assert.matches(logged, s:log())
        c:close()
        served(s, what)
    end

    it("closes a rapid-reset connection with GOAWAY ENHANCE_YOUR_CALM and serves others", function()
        reset_flood(function(c, id) c:reset(id) end,
                    "reset more than 200 streams in a second %(grpcMaxResetsPerSecond, rapid reset%); GOAWAY",
                    "after a rapid reset")
    end)

    it("counts the resets a client makes the server do (MadeYouReset, CVE-2025-8671) as its own", function()
        -- each stream answered with a WINDOW_UPDATE of 0: the server
        -- resets it (PROTOCOL_ERROR), freeing its slot; the client sent
        -- no RST_STREAM at all
        reset_flood(function(c, id) c:window_update(id, 0) end,
                    "had the server reset more than 200 streams in a second %(grpcMaxResetsPerSecond",
                    "after server-made resets")
    end)

    it("serves others while resets are spread over many connections below the rate, memory flat", function()
        local before = rss_kb(s.pid)
        local conns = {}
        local block = h2.headers_block("SendMessage")
        -- 16 connections, each resetting 150 streams: under
        -- grpcMaxResetsPerSecond (200) per connection, so none is closed
        -- for it; each reset stream is freed at once.
        for i = 1, 16 do
            local c = h2.connect(s.grpc_addr, "127.0.0.2")
            for _ = 1, 150 do
                c:reset(c:open("SendMessage", block))
            end
            conns[i] = c
        end
        assert.is_truthy(server.eventually(function()
            local left = 0
            for _, c in ipairs(conns) do
                c:pump()
                left = left + c:backlog()
            end
            return left == 0
        end, 60000))
        served(s, "resets spread over 16 connections")
        assert.is_true(SANITIZED or rss_kb(s.pid) - before < 32 * 1024, "RSS grew by more than 32 MiB")
        for _, c in ipairs(conns) do
            c:close()
        end
    end)

    it("refuses strings that are not UTF-8 as a request that does not parse, and stores none", function()
        local c = assert(grpc.connect(s.grpc_addr))
        local bad = {
            tag = { tag = "tag\xff" },
            key = { keys = { "ok", "k\xc3" } },            -- a truncated sequence
            property = { properties = { ["p\xed\xa0\x80"] = "v" } },  -- a UTF-16 surrogate
            overlong = { tag = "\xc0\xaf" },
        }
        for what, o in pairs(bad) do
            local e, err = c:send(TOPIC, "not stored " .. what, o)
            assert.is_nil(e, what)
            assert.matches("gRPC status 3", err)   -- INVALID_ARGUMENT
            assert.matches("SendMessageRequest does not parse: string field %w+ is not valid UTF%-8", err)
        end
        -- Valid multi-byte UTF-8 is taken, and the connection serves on.
        assert(c:send(TOPIC, "stored", { tag = "t\xc3\xa9", keys = { "\xf0\x9f\x98\x80" } }))
        c:close()
        -- Nothing of the refused sends reached a queue: every body the
        -- topic holds is one of the good ones.
        local total = 0
        for q = 0, 3 do
            local r = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = tostring(q) } }, 5000))
            total = total + tonumber(r.ext.offset)
        end
        local msgs = gn.consume_all(s.listen_addr, TOPIC, "GrpcAbuseUtf8", total)
        assert.equal(total, #msgs)
        for _, m in ipairs(msgs) do
            assert.is_nil(m.body:find("not stored", 1, true), m.body)
        end
    end)
end)
