-- A send to a queue that does not exist yet (issue 21's hashflood
-- attack: 8,192 auto-created topics) used to make the queue's directory
-- and first file on the worker serving the send: on a busy disk each
-- mkdir / create took up to 110 ms, and every other connection that
-- worker served waited with it.  Now the store's maker thread makes the
-- queue while the send is held (src/broker/send_processor.c,
-- store_request_queue in src/store/store.h); the worker serves its
-- other connections meanwhile, and the held send runs once its queue
-- is there.  Here the file system is made slow on purpose (errinj
-- cq_create_delay_ms: making a new queue sleeps first) on a broker with
-- one worker: another client's send on that worker is answered while
-- the new queue is still being made; sends pipelined behind a held one
-- on its connection keep their order; and what was acknowledged is
-- there after a kill -9.
local codec = require("rmq.codec")
local net = require("rmq.net")
local server = require("support.server")
local rq = require("support.requests")

local DELAY = 120000   -- ms a new queue takes to make, unless lowered sooner

local function send(topic, body, qid)
    return rq.send({ group = "NewQueueP", topic = topic, qid = qid, born = 1700000000000, body = body })
end

-- Every body of topic/qid from offset 0.
local function bodies(c, topic, qid)
    return (rq.bodies(c, { group = "NewQueueG", topic = topic, qid = qid }))
end

describe("a send to a new queue", function()
    local b, store

    local function start()
        return server.start({ source = ([[
            return {
                role = "broker", brokerName = "broker-newq", workers = 1,
                storePathRootDir = %q, namesrvAddr = "127.0.0.1:1",
                mappedFileSizeCommitLog = 1048576, messageIndexEnable = false,
                autoCreateTopicEnable = true,
                processors = {
                    [7001] = function(ctx, cmd)
                        require("rmq.store").errinj("cq_create_delay_ms", tonumber(cmd:get("ms")))
                        return { code = 0 }
                    end,
                },
            }
        ]]):format(store) })
    end

    local function create_delay(c, ms)
        local r = assert(c:call({ code = 7001, ext = { ms = tostring(ms) } }, 30000))
        assert.equal(0, r.code, r.remark)
    end

    setup(function()
        store = server.tmpdir() .. "/store"
        b = start()
    end)

    teardown(function()
        if b then
            b:stop()
        end
    end)

    it("does not hold up the worker's other clients while its queue is made", function()
        local other = assert(net.connect(b.addr))
        local r = assert(other:call(send("NewQOld", "old-1"), 30000))
        assert.equal(0, r.code, r.remark)
        create_delay(other, DELAY)
        local order = {}
        local slow = assert(net.connect(b.addr))
        local slow_reply
        net.spawn(function()
            slow_reply = { slow:call(send("NewQFresh", "fresh-1"), 30000) }
            order[#order + 1] = "new queue"
        end)
        -- The broker has read the new queue's send before the other one
        -- is sent (its topic exists once the send was read).
        assert(server.eventually(function()
            local t = assert(other:call({ code = 21, ext = {} }, 30000))
            return t.code == 0 and t.body:find("NewQFresh", 1, true) ~= nil
        end, 20000))
        r = assert(other:call(send("NewQOld", "old-2"), 30000))
        order[#order + 1] = "old queue"
        assert.equal(0, r.code, r.remark)
        -- The new queue is made now (the maker sees the point lowered).
        create_delay(other, 0)
        assert(server.eventually(function() return slow_reply ~= nil end, 30000))
        r = assert(slow_reply[1], slow_reply[2])
        assert.equal(0, r.code, r.remark)
        assert.equal("0", r.ext.queueOffset)
        -- Before: the worker slept in the new queue's mkdir, and the
        -- other send was answered after it.
        assert.same({ "old queue", "new queue" }, order)
        assert.same({ "fresh-1" }, bodies(other, "NewQFresh", 0))
        assert.same({ "old-1", "old-2" }, bodies(other, "NewQOld", 0))
        slow:close()
        other:close()
    end)

    it("keeps the order of sends pipelined behind a held one", function()
        local c = assert(net.connect(b.addr))
        create_delay(c, 500)
        -- One write: two sends to a new queue, one to an existing one,
        -- then two more to the new queue.
        local frames = {}
        local plan = { { "NewQPipe", "p-1" }, { "NewQPipe", "p-2" }, { "NewQOld", "old-3" },
                       { "NewQPipe", "p-3" }, { "NewQPipe", "p-4" } }
        for i, p in ipairs(plan) do
            local cmd = send(p[1], p[2])
            cmd.opaque = 100 + i
            frames[#frames + 1] = codec.encode(cmd)
        end
        local host, port = b.addr:match("^(.+):(%d+)$")
        local t = assert(require("socket").connect(host, tonumber(port)))
        t:settimeout(30)
        assert(t:send(table.concat(frames)))
        local opaques = {}
        for _ = 1, #plan do
            local reply = rq.read_reply(t)
            assert.equal(0, reply.code, reply.remark)
            opaques[#opaques + 1] = reply.opaque
        end
        t:close()
        create_delay(c, 0)
        assert.same({ 101, 102, 103, 104, 105 }, opaques)
        assert.same({ "p-1", "p-2", "p-3", "p-4" }, bodies(c, "NewQPipe", 0))
        assert.same({ "old-1", "old-2", "old-3" }, bodies(c, "NewQOld", 0))
        c:close()
    end)

    it("recovers every acknowledged send to new queues after a kill -9", function()
        local c = assert(net.connect(b.addr))
        create_delay(c, 50)
        local acked = {}
        for i = 1, 12 do
            local topic = ("NewQKill%02d"):format(i)
            local r = assert(c:call(send(topic, "k-" .. i, i % 4), 30000))
            assert.equal(0, r.code, r.remark)
            acked[#acked + 1] = { topic, i % 4, "k-" .. i }
        end
        c:close()
        -- The topics' configs are written by the main thread after the
        -- sends are answered (topics.json and its journal): a pull of a
        -- topic the broker does not know is refused, so wait for them.
        assert(server.eventually(function()
            local text = ""
            for _, name in ipairs({ "topics.json", "topics.json.journal" }) do
                local f = io.open(store .. "/config/" .. name)
                if f then
                    text = text .. f:read("a")
                    f:close()
                end
            end
            for _, a in ipairs(acked) do
                if not text:find('"' .. a[1] .. '"', 1, true) then
                    return false
                end
            end
            return true
        end, 30000))
        b:kill()
        b = start()
        c = assert(net.connect(b.addr))
        for _, a in ipairs(acked) do
            assert.same({ a[3] }, bodies(c, a[1], a[2]))
        end
        assert.same({ "fresh-1" }, bodies(c, "NewQFresh", 0))
        assert.same({ "p-1", "p-2", "p-3", "p-4" }, bodies(c, "NewQPipe", 0))
        c:close()
    end)
end)
