-- Memory given back after many admin requests (issue 21, "RSS back within
-- 10 % of its start 15 s after each attack"; docs/memory.md).  Thousands
-- of UPDATE_AND_CREATE_TOPIC and UPDATE_CONSUMER_OFFSET requests run in
-- the workers' Lua states; once they end, a broker whose other traffic is
-- answered in C allocated nothing more in Lua, so its incremental
-- collector never ran again and the requests' garbage stayed for good
-- (26,000 topics: 32 MB in one worker, 24 MB in the main state).  The
-- reference is the data alone: a second broker holding the same topics,
-- groups and offsets, started from a copy of the first one's config
-- files (never asked anything but its figures).  The first broker's Lua
-- heaps and RSS must come down to within 10 % (plus a little: the
-- allocator's metadata of the peak) of the second one's.
local net = require("rmq.net")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local load = require("support.load")
local slow = require("support.slowreader")
local http = require("support.http")

local SANITIZED = os.getenv("RMQ_SERVER_ASAN_OPTIONS") ~= nil
local MiB = 1024 * 1024

local function conf(dir, extra)
    local c = {
        role = "broker", workers = 2, brokerName = "broker-a",
        storePathRootDir = dir,
        mappedFileSizeCommitLog = 16 * MiB,
        namesrvAddr = "127.0.0.1:1",  -- no NameServer: clients go direct
        flushConsumerOffsetInterval = 1000,
        metricsExporterType = "PROM", metricsPromExporterPort = 0,
    }
    for k, v in pairs(extra or {}) do c[k] = v end
    return c
end

local function read(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("a")
    f:close()
    return s
end

-- GET_BROKER_RUNTIME_INFO's table (`rmq admin brokerStatus`).
local function runtime_info(addr)
    local r = assert(net.call(addr, { code = 28 }, 30000))
    assert.equal(0, r.code, r.remark)
    return fastjson.decode(r.body).table
end

-- memoryLuaHeapBytes ("main:123 worker0:456 ..."): name -> bytes.
local function heaps(info)
    local t = {}
    for name, bytes in (info.memoryLuaHeapBytes or ""):gmatch("(%S+):(%d+)") do
        t[name] = tonumber(bytes)
    end
    return t
end

-- RssAnon of a process, KiB: its heap without the commit log's mapped
-- pages (VmRSS counts those, and they grow with what is stored).
local function rss_anon_kb(pid)
    local s = read("/proc/" .. pid .. "/status") or ""
    return tonumber(s:match("RssAnon:%s*(%d+)")) or 0
end

-- Polls fn() until it returns true or `ms` of wall time pass (each poll
-- here takes a while: server.eventually counts only its own sleeps).
local function within(ms, fn)
    local deadline = core.mono_ms() + ms
    repeat
        if fn() then
            return true
        end
        net.sleep(250)
    until core.mono_ms() > deadline
    return fn()
end

local function fmt(h)
    local parts = {}
    for _, k in ipairs({ "main", "worker0", "worker1" }) do
        parts[#parts + 1] = ("%s %.1f"):format(k, (h[k] or 0) / MiB)
    end
    return table.concat(parts, ", ") .. " MiB"
end

describe("memory given back", function()
    it("after thousands of admin requests end: each Lua state's heap and the RSS come back to "
       .. "within 10 % of a broker holding the same data alone", function()
        local TOPICS, GROUPS = 8000, 2000
        local dir_a = server.tmpdir() .. "/store-a"
        local a = server.start(conf(dir_a))
        local b
        local ok, err = pcall(function()
            local start = heaps(runtime_info(a.addr))
            -- Reported for every state, in brokerStatus and /metrics.
            assert.truthy(start.main and start.worker0 and start.worker1, runtime_info(a.addr).memoryLuaHeapBytes)
            local status, scrape = http.request(a.metrics_addr, "GET", "/metrics")
            assert.equal(200, status)
            assert.truthy(scrape:find('rmq_lua_heap_bytes{[^}]*state="worker0"[^}]*} [1-9]'), scrape)
            -- (Under ASan the sanitizer's allocator serves malloc and
            -- glibc's mallinfo2 sees none of it: the figures are there, 0.)
            assert.truthy(scrape:find('rmq_allocator_bytes{[^}]*kind="resident"[^}]*} ' .. (SANITIZED and "%d" or "[1-9]")))
            local info0 = runtime_info(a.addr)
            if SANITIZED then
                print("\n    ASan build: allocator figures not checked (" .. tostring(info0.memoryAllocator) .. ")")
                assert.truthy(info0.memoryResidentBytes and info0.memoryAllocatedBytes)
            else
                assert.equal("jemalloc", info0.memoryAllocator)
                assert.truthy(tonumber(info0.memoryResidentBytes) > 0 and tonumber(info0.memoryAllocatedBytes) > 0,
                              info0.memoryResidentBytes)
            end

            -- The requests, 8 connections (so both workers serve them).
            local names = {}
            for i = 1, TOPICS do
                names[i] = ("ReturnT%05d"):format(i)
            end
            local peak
            local res = load.run(a.addr, 8, names, function(c, topic)
                local r = assert(c:call({ code = 17, ext = {
                    topic = topic, defaultTopic = "TBW102", readQueueNums = "1", writeQueueNums = "1",
                    perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }, 30000))
                return r.code == 0
            end, 600000)
            assert.equal(TOPICS, res.done, table.concat(res.errors, "; "))
            local groups = {}
            for i = 1, GROUPS do
                groups[i] = { g = ("ReturnG%05d"):format(i), t = names[i] }
            end
            local gres = load.run(a.addr, 8, groups, function(c, x)
                local r = assert(c:call({ code = 15, ext = { consumerGroup = x.g, topic = x.t, queueId = 0,
                                                            commitOffset = 0 } }, 30000))
                return r.code == 0
            end, 600000)
            assert.equal(GROUPS, gres.done, table.concat(gres.errors, "; "))
            -- What an operator's tools ask then, over one connection:
            -- brokerStatus and the whole topic table (each O(topics) in Lua).
            local admin = assert(net.connect(a.addr))
            for _ = 1, 10 do
                for _, code in ipairs({ 28, 21 }) do
                    local r = assert(admin:call({ code = code, ext = {} }, 30000))
                    assert.equal(0, r.code, r.remark)
                end
            end
            admin:close()
            peak = heaps(runtime_info(a.addr))
            local rss_peak = rss_anon_kb(a.pid)

            -- The data alone: the same config files under a second broker.
            local cfg_a = dir_a .. "/config"
            assert.truthy(within(60000, function()
                -- (new topics go to the journal first, rmq.configfile)
                local topics = (read(cfg_a .. "/topics.json") or "") .. (read(cfg_a .. "/topics.json.journal") or "")
                local offsets = read(cfg_a .. "/consumerOffset.json") or ""
                return topics:find(names[TOPICS], 1, true) and offsets:find(groups[GROUPS].g, 1, true)
            end), "the config files were not written")
            local dir_b = server.tmpdir() .. "/store-b"
            assert(os.execute(("mkdir -p %q && cp -r %q %q"):format(dir_b, cfg_a, dir_b .. "/config")))
            b = server.start(conf(dir_b))
            local ref, ref_rss
            -- Its figures once it has served nothing: taken after its
            -- states reported (a second) and its start-up garbage went.
            assert.truthy(within(60000, function()
                ref = heaps(runtime_info(b.addr))
                return ref.main and ref.worker0 and ref.worker1
            end))
            net.sleep(2000)
            ref = heaps(runtime_info(b.addr))
            ref_rss = rss_anon_kb(b.pid)

            -- The first broker gives its garbage back, while a client keeps
            -- sending to it (answered in C: no Lua allocation).
            local c = assert(net.connect(a.addr))
            local now, now_rss
            local back = within(60000, function()
                for _ = 1, 20 do
                    local r = assert(c:call(slow.cmd((slow.send_frame(0, "ReturnT00001", 0, "m"))), 30000))
                    assert.equal(0, r.code, r.remark)
                end
                net.sleep(200)
                now = heaps(runtime_info(a.addr))
                now_rss = rss_anon_kb(a.pid)
                for _, k in ipairs({ "main", "worker0", "worker1" }) do
                    if now[k] > ref[k] * 1.1 + 1 * MiB then
                        return false
                    end
                end
                return SANITIZED or now_rss <= ref_rss * 1.1 + 4 * 1024
            end)
            c:close()
            print(("\n    %d topics, %d groups created: Lua heaps at the end of the requests %s; "
                   .. "then %s; the data alone %s | RssAnon %d KiB at the end, then %d, the data alone %d%s")
                :format(TOPICS, GROUPS, fmt(peak), fmt(now), fmt(ref), rss_peak, now_rss, ref_rss,
                        SANITIZED and " (RSS not compared under ASan: its allocator keeps freed memory)" or ""))
            assert.truthy(back, ("not given back: heaps %s where the data alone takes %s; RssAnon %d KiB, "
                                 .. "the data alone %d KiB"):format(fmt(now), fmt(ref), now_rss, ref_rss))
        end)
        local sa = a:stop()
        local sb = b and b:stop() or 0
        assert(ok, err)
        assert.equal(0, sa)
        assert.equal(0, sb)
    end)
end)
