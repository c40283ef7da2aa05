-- Issue 21: the memory of a held-pull flood goes back once it ends, all
-- of it, while the broker goes on creating what it keeps for good.
-- The flood's records (a held pull's, ~600 bytes, and its wait's, ~300)
-- used to come from the allocator's shared slabs, where topics created
-- meanwhile put their own long-lived objects of the same sizes: after
-- the close each of those kept a whole slab (5 pages) in memory, 2-5 MB
-- in all (jemalloc's active bytes above its allocated ones; RssAnon 12
-- -> 15-17 MB after 200 x 1,000 pulls).  They now come from an arena of
-- their own (core/membudget.h, membudget_burst_calloc), so its slabs
-- empty together (docs/memory.md).
local net = require("rmq.net")
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local slow = require("support.slowreader")
local flood = require("support.flood")

local MiB = 1024 * 1024

local function call(c, cmd)
    return assert(c:call(cmd, 30000))
end

local function runtime_info(c)
    local r = call(c, { code = 28 })
    assert.equal(0, r.code, r.remark)
    return fastjson.decode(r.body).table
end

-- What jemalloc keeps in pages with something allocated in them beyond
-- what is allocated: slabs held by a few live objects (and its thread
-- caches).
local function slack(info)
    return tonumber(info.memoryActiveBytes) - tonumber(info.memoryAllocatedBytes)
end

describe("memory after a held-pull flood", function()
    it("gives the flood's slabs back although topics were created while it was held", function()
        local s = server.start({
            role = "broker", workers = 2, brokerName = "broker-a",
            storePathRootDir = server.tmpdir() .. "/store",
            mappedFileSizeCommitLog = 16 * MiB,
            namesrvAddr = "127.0.0.1:1",
            brokerSuspendMaxTimeMillis = 300000,
        })
        local ok, err = pcall(function()
            local c = assert(net.connect(s.addr))
            local topic = "FloodTopic"
            assert.equal(0, call(c, slow.cmd((slow.send_frame(0, topic, 0, "m")))).code)
            local info = runtime_info(c)
            if info.memoryAllocator ~= "jemalloc" then
                -- The sanitizer build keeps its own allocator: no slabs.
                print("\n    not jemalloc (" .. tostring(info.memoryAllocator) .. "): nothing to measure")
                return
            end
            -- The slack before, once the start's garbage is collected.
            local before
            server.eventually(function()
                local a = slack(runtime_info(c))
                net.sleep(1500)
                local b = slack(runtime_info(c))
                before = math.min(a, b)
                return math.abs(a - b) < 256 * 1024
            end, 60000)
            -- 40 connections x 400 long polls held on the empty queue 1,
            -- from another peer address.
            local f = flood.open(s.addr, 40, "127.0.0.2")
            f:queue_pulls(400, { topic = topic, queueId = 1, suspendMillis = 300000 })
            local created, i = 0, 0
            server.eventually(function()
                local backlog = f:pump()
                -- Meanwhile the broker makes what it keeps: topics.
                for _ = 1, 20 do
                    i = i + 1
                    local r = call(c, { code = 17, ext = {
                        topic = ("KeptT%05d"):format(i), defaultTopic = "TBW102", readQueueNums = "2",
                        writeQueueNums = "2", perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0",
                        order = "false" } })
                    if r.code == 0 then
                        created = created + 1
                    end
                end
                return backlog == 0 and created >= 400
                    and tonumber(runtime_info(c).memoryBudgetRequests) > 1000 * 5120
            end, 240000)
            local held = f.sent_frames - f.replies
            local peak = slack(runtime_info(c))
            local info_peak = runtime_info(c)
            f:close()
            local after, info_after
            server.eventually(function()
                info_after = runtime_info(c)
                after = slack(info_after)
                return tonumber(info_after.memoryBudgetRequests) < 64 * 1024 and after - before < 1.5 * MiB
            end, 60000)
            print(("\n    %d held pulls, %d topics created meanwhile: jemalloc active - allocated %.2f MB "
                   .. "before, %.2f held, %.2f after the close (allocated %.1f -> %.1f -> %.1f MB)")
                :format(held, created, before / 1e6, peak / 1e6, after / 1e6,
                        tonumber(info.memoryAllocatedBytes) / 1e6, tonumber(info_peak.memoryAllocatedBytes) / 1e6,
                        tonumber(info_after.memoryAllocatedBytes) / 1e6))
            assert.truthy(held >= 10000, "held " .. held .. ": " .. f:summary())
            assert.truthy(after - before < 1.5 * MiB,
                          ("the flood left %.2f MB of slabs pinned (active - allocated %.2f -> %.2f MB)")
                              :format((after - before) / 1e6, before / 1e6, after / 1e6))
            c:close()
        end)
        s:stop()
        assert(ok, err)
    end)
end)
