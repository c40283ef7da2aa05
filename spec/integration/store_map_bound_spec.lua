-- Mapped consume-queue files are bounded (maxMappedConsumeQueueFiles,
-- src/store/mfpool.h), issue 21: every consume-queue file holding a
-- message used to stay mapped, one mapping each, so about 16,300 topics
-- of 4 queues exhausted vm.max_map_count (65,530) and then every send
-- failed with CREATE_MAPEDFILE_FAILED: the commit log could not map its
-- next file.  Now cold files are unmapped past the bound and mapped again
-- when read.  Here the bound is 64 and 1,200 queues get a message each:
-- the broker's mappings (/proc/PID/maps) grow by about the bound, not by
-- 1,200; every queue, the first ones long unmapped, still reads back its
-- own message; a queue spanning several files reads back in order; sends
-- keep succeeding; and after a kill -9 the store recovers it all.
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local load = require("support.load")
local rq = require("support.requests")

local MiB = 1024 * 1024
local BOUND = 64
local TOPICS, QUEUES = 300, 4
local LONG = 200           -- messages in one queue: 4 files of 64 entries

local function maps(pid)
    local n = 0
    for _ in io.lines("/proc/" .. pid .. "/maps") do
        n = n + 1
    end
    return n
end

local function topic_name(i)
    return ("MapBound%04d"):format(i)
end

local function send(topic, qid, body)
    return rq.send({ group = "MapBoundP", topic = topic, qid = qid, queues = QUEUES, body = body })
end

-- Every body of topic/qid from offset 0, and the reply that ended the walk.
local function bodies(c, topic, qid)
    return rq.bodies(c, { group = "MapBoundG", topic = topic, qid = qid })
end

describe("mapped consume-queue files under maxMappedConsumeQueueFiles", function()
    local b, store

    local function start()
        return server.start({
            role = "broker", workers = 2, brokerName = "broker-map",
            storePathRootDir = store, namesrvAddr = "127.0.0.1:1",
            mappedFileSizeCommitLog = 16 * MiB,
            mappedFileSizeConsumeQueue = 20 * 64,
            messageIndexEnable = false,
            maxMappedConsumeQueueFiles = BOUND,
            brokerFastFailureEnable = false,   -- scale, not latency
        })
    end

    setup(function()
        store = server.tmpdir() .. "/store"
        b = start()
    end)

    teardown(function()
        if b then b:stop() end
    end)

    it("keeps about the bound mapped, reads cold queues back, recovers after kill -9", function()
        local jobs = {}
        for i = 1, TOPICS do
            for q = 0, QUEUES - 1 do
                jobs[#jobs + 1] = { topic_name(i), q }
            end
        end
        -- Before: one queue written so the store's own files are there.
        local c0 = assert(require("rmq.net").connect(b.addr))
        local r = assert(c0:call(send("MapBoundLong", 0, "long-1"), 30000))
        assert.equal(0, r.code, r.remark)
        local before = maps(b.pid)

        local res = load.run(b.addr, 8, jobs, function(c, job)
            local rr = assert(c:call(send(job[1], job[2], job[1] .. "/" .. job[2]), 30000))
            assert(rr.code == 0, rr.remark)
        end, 300000)
        assert.same({}, res.errors)
        assert.equal(#jobs, res.done)
        for k = 2, LONG do
            r = assert(c0:call(send("MapBoundLong", 0, "long-" .. k), 30000))
            assert.equal(0, r.code, r.remark)
        end
        local after = maps(b.pid)
        print(("\n  /proc/PID/maps: %d lines before, %d after %d queues got a message (bound %d)")
            :format(before, after, #jobs, BOUND))
        -- Without the bound: one more mapping per queue (+1,200).
        assert.is_true(after - before < BOUND + 150,
            ("maps grew by %d with %d queues written"):format(after - before, #jobs))

        -- `again`: topics 1-20 got a second message in queue 0.
        local function check_all(c, again)
            -- The first topics were unmapped long ago: mapped again, read back.
            for i = 1, TOPICS, 7 do
                for q = 0, QUEUES - 1 do
                    local want = { topic_name(i) .. "/" .. q }
                    if again and i <= 20 and q == 0 then
                        want[2] = "again"
                    end
                    local got, last = bodies(c, topic_name(i), q)
                    assert.same(want, got, last.remark)
                end
            end
            local long = bodies(c, "MapBoundLong", 0)
            assert.equal(LONG, #long)
            for k = 1, LONG do
                assert.equal("long-" .. k, long[k])
            end
        end
        check_all(c0)
        local info = fastjson.decode(assert(c0:call({ code = 28 }, 30000)).body).table
        print(("  runtime info: consumeQueueFilesMapped=%s peak=%s unmaps=%s")
            :format(info.consumeQueueFilesMapped, info.consumeQueueFilesMappedPeak, info.consumeQueueFileUnmaps))
        assert.is_true(tonumber(info.consumeQueueFileUnmaps) > 0)
        assert.is_true(tonumber(info.consumeQueueFilesMapped) <= BOUND + 8)   -- + files pinned just now

        -- Sends keep succeeding, to old queues and new ones.
        for i = 1, 20 do
            r = assert(c0:call(send(topic_name(i), 0, "again"), 30000))
            assert.equal(0, r.code, r.remark)
            r = assert(c0:call(send("MapBoundNew" .. i, 1, "new"), 30000))
            assert.equal(0, r.code, r.remark)
        end
        assert.same({ topic_name(3) .. "/0", "again" }, (bodies(c0, topic_name(3), 0)))
        c0:close()

        -- kill -9: what was acknowledged is recovered, through lazy maps.
        b:kill()
        b = start()
        local c1 = assert(require("rmq.net").connect(b.addr))
        check_all(c1, true)
        assert.is_true(maps(b.pid) - before < BOUND + 150)
        c1:close()
    end)
end)
