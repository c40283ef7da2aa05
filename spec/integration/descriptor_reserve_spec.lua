-- Descriptors kept for persistence (issue 21 item 9): a broker whose
-- RLIMIT_NOFILE is 256 is flooded with more connections than that.  The
-- connections fill what they may take (serverReservedDescriptors keeps
-- the last 32), and meanwhile state-changing admin on a connection made
-- before the flood (a new topic, an offset commit) and the schedule's
-- delay offsets still reach the disk, with no "Too many open files"
-- logged; once the flood closes, new connections are served again.
local net = require("rmq.net")
local server = require("support.server")
local rq = require("support.requests")

local NOFILE, FLOOD = 256, 400

local function send_ext(topic, props)
    return rq.send_ext({ group = "FdGroup", topic = topic, props = props })
end

local function fd_count(pid)
    local p = assert(io.popen(("ls /proc/%d/fd | wc -l"):format(pid)))
    local n = tonumber(p:read("a"))
    p:close()
    return n
end

describe("descriptors kept for persistence under a connection flood", function()
    local ns, b, store

    setup(function()
        store = server.tmpdir() .. "/store"
        ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        b = server.start({
            role = "broker", workers = 2, brokerName = "broker-fd",
            storePathRootDir = store, namesrvAddr = ns.addr,
            mappedFileSizeCommitLog = 4 * 1024 * 1024,
            mappedFileSizeConsumeQueue = 20 * 64,
            flushConsumerOffsetInterval = 500, flushDelayOffsetInterval = 500,
            messageDelayLevel = "1s 2s",
        }, nil, { nofile = NOFILE })
    end)

    teardown(function()
        if b then b:stop() end
        if ns then ns:stop() end
    end)

    it("persists topics, offsets and delay offsets, and serves again after", function()
        local c = assert(net.connect(b.addr))    -- the operator's, made before the flood
        local r = assert(c:call({ code = 310, ext = send_ext("FdTopic"), body = "before" }, 30000))
        assert.equal(0, r.code, r.remark)

        local flood, refused = {}, 0
        for _ = 1, FLOOD do
            local conn = net.connect(b.addr, { timeout = 2000 })
            if conn then
                flood[#flood + 1] = conn
            else
                refused = refused + 1
            end
        end
        -- (the broker accepts what the kernel queued on its own time)
        local open = server.eventually(function()
            local n = fd_count(b.pid)
            return n >= NOFILE - 32 - 8 and n
        end, 20000) or fd_count(b.pid)
        print(("  RLIMIT_NOFILE %d: %d connections opened (%d connects failed), the broker holds %d descriptors")
            :format(NOFILE, #flood, refused, open))
        -- The flood took every descriptor it may: all but the reserve.
        assert.is_true(open >= NOFILE - 32 - 8, "the flood did not fill the descriptors: " .. open)
        assert.is_true(open < NOFILE)
        assert.is_truthy(server.eventually(function()
            return server.read_file(b.err_path):find("serverReservedDescriptors", 1, true)
        end, 10000))

        -- State changes while the descriptors are full.
        r = assert(c:call({ code = 17, ext = {
            topic = "FdTopicNew", defaultTopic = "TBW102", readQueueNums = "2", writeQueueNums = "2",
            perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }, 30000))
        assert.equal(0, r.code, r.remark)
        r = assert(c:call({ code = 15, ext = { consumerGroup = "FdConsumer", topic = "FdTopic",
                                               queueId = "0", commitOffset = "1" } }, 30000))
        assert.equal(0, r.code, r.remark)
        r = assert(c:call({ code = 310, ext = send_ext("FdTopic", "WAIT\1true\2DELAY\0011"),
                            body = "delayed" }, 30000))
        assert.equal(0, r.code, r.remark)

        -- topics.json, or the journal beside it (rmq.configfile.journaled)
        assert.is_truthy(server.eventually(function()
            local p = store .. "/config/topics.json"
            return ((server.read_file(p) or "") .. (server.read_file(p .. ".journal") or ""))
                :find('"FdTopicNew"', 1, true)
        end, 20000), "topics.json never held FdTopicNew:\n" .. server.read_file(b.err_path):sub(-2000))
        -- (4.9.8's pretty JSON: integer keys unquoted, as fastjson writes them)
        assert.is_truthy(server.eventually(function()
            local text = server.read_file(store .. "/config/consumerOffset.json") or ""
            return text:find('"FdTopic@FdConsumer":{0:1', 1, true)
        end, 20000), "consumerOffset.json never held the commit:\n"
            .. tostring(server.read_file(store .. "/config/consumerOffset.json")))
        assert.is_truthy(server.eventually(function()
            local text = server.read_file(store .. "/config/delayOffset.json") or ""
            return (tonumber(text:match("[{,]%s*1%s*:%s*(%d+)")) or 0) >= 1
        end, 30000), "delayOffset.json never moved:\n" .. tostring(server.read_file(store .. "/config/delayOffset.json")))
        -- The flood is still there, and nothing failed to persist.
        assert.is_true(fd_count(b.pid) >= NOFILE - 32 - 8)
        local log, dropped = b:log()   -- every line queued so far (the main thread's too)
        assert.are.equal(0, dropped, "log lines were dropped: an absent line proves nothing")
        assert.is_nil(log:find("Too many open files", 1, true), log:match("[^\n]*Too many open files[^\n]*"))
        assert.is_nil(log:find("cannot persist", 1, true), log:match("[^\n]*cannot persist[^\n]*"))

        for _, conn in ipairs(flood) do
            conn:close()
        end
        c:close()
        -- Served again: a new connection sends.
        assert.is_truthy(server.eventually(function()
            local conn = net.connect(b.addr, { timeout = 2000 })
            if not conn then
                return false
            end
            local rr = conn:call({ code = 310, ext = send_ext("FdTopic"), body = "after" }, 10000)
            conn:close()
            return rr and rr.code == 0
        end, 30000))
        assert.is_false(b.proc.exited)
    end)
end)
