-- The metric families past messages in/out and rpc latency, read from a
-- real broker's /metrics the way a user checks them: the message size
-- histogram after sends of known sizes, the DLQ counter after messages
-- exhaust their retries, the lag latency while a group is behind and 0
-- once it caught up, lag / inflight / ready as 5.x tells them apart, connections with N clients, the store's gauges
-- against what was written, the process's RSS and fds against /proc, and
-- each worker's loop lag; promtool accepts the whole output.
local net = require("rmq.net")
local cjson = require("cjson")
local socket = require("socket")
local prom = require("support.prom")
local server = require("support.server")
local rq = require("support.requests")
local codes = require("rmq.codes")

local req, R = codes.request, codes.response

local BASE = 'cluster="FamCluster",node_type="broker",node_id="broker-f"'

local function broker(native, extra)
    local conf = {
        role = "broker", workers = 2, brokerName = "broker-f", brokerClusterName = "FamCluster",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 4 * 1024 * 1024,
        namesrvAddr = "127.0.0.1:1",
        nativeProcessors = native,
        metricsExporterType = "PROM", metricsPromExporterPort = 0,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return server.start(conf)
end

local function send_req(topic, queue, body, reconsume, props)
    return rq.send({ group = "FamPG", topic = topic, qid = queue, born = 1796034593124,
                     props = props or "WAIT\1true\2TAGS\1TagA", body = body,
                     ext = { j = tostring(reconsume or 0) } })
end

local function send(c, topic, queue, body, reconsume, props)
    local r = assert(c:call(send_req(topic, queue, body, reconsume, props)))
    assert.equal(R.SUCCESS, r.code, r.remark)
    return r
end

local function scrape(s)
    return prom.scrape(s.metrics_addr)
end

local value = prom.value

local function promtool_check(s, text, name)
    return prom.promtool_check(s.dir, text, name)
end

-- UPDATE_CONSUMER_OFFSET on connection c.
local function commit_offset(c, group, topic, queue, offset)
    local r = assert(c:call({ code = req.UPDATE_CONSUMER_OFFSET,
                              ext = { consumerGroup = group, topic = topic, queueId = queue,
                                      commitOffset = offset } }))
    assert.equal(R.SUCCESS, r.code, r.remark)
end

for _, native in ipairs({ true, false }) do
    describe("metrics families (nativeProcessors = " .. tostring(native) .. ")", function()
        local s, c1, c2

        setup(function()
            s = broker(native)
            c1, c2 = assert(net.connect(s.addr)), assert(net.connect(s.addr))
        end)

        teardown(function()
            c1:close()
            c2:close()
            local status, signal = s:stop()
            assert(status == 0 and (signal or 0) == 0,
                   ("exit status %s, signal %s\n%s"):format(tostring(status), tostring(signal), s:log()))
        end)

        it("puts each message body in RocketMQ 5's size buckets, per topic", function()
            -- 3 x 100 B, 2 x 2000 B, 1 x 600 KiB over both workers.
            local sizes = { 100, 100, 100, 2000, 2000, 600 * 1024 }
            local total = 0
            for i, n in ipairs(sizes) do
                send(i % 2 == 0 and c2 or c1, "SizeT", 0, string.rep("s", n))
                total = total + n
            end
            local text = scrape(s)
            local t = BASE .. ',topic="SizeT"'
            local function bucket(le)
                return value(text, "rocketmq_message_size_bucket", t .. (',le="%s"'):format(le))
            end
            assert.equal(3, bucket("1024"), text)
            assert.equal(5, bucket("4096"))
            assert.equal(5, bucket("524288"))
            assert.equal(6, bucket("1048576"))
            assert.equal(6, bucket("4194304"))
            assert.equal(6, bucket("+Inf"))
            assert.equal(6, value(text, "rocketmq_message_size_count", t))
            assert.equal(total, value(text, "rocketmq_message_size_sum", t))
            -- Every append is timed, native or Lua (the first send, which
            -- creates the topic, is Lua's on either path).
            assert.equal(#sizes, value(text, "rmq_storage_put_latency_count", BASE), text)
            assert.equal(#sizes, value(text, "rmq_storage_put_latency_bucket", BASE .. ',le="+Inf"'))
        end)

        it("counts the messages that exhaust their retries into %DLQ%", function()
            local group = "DlqG"
            -- A consumer's send-back of a message already retried
            -- maxReconsumeTimes times: the message goes to %DLQ%DlqG.
            for _ = 1, 2 do
                local r = send(c1, "DlqT", 0, "dead", 3)
                local phy = tonumber(r.ext.msgId:sub(17, 32), 16)
                local b = assert(c2:call({ code = req.CONSUMER_SEND_MSG_BACK, ext = {
                    offset = phy, group = group, delayLevel = 0, originTopic = "DlqT",
                    maxReconsumeTimes = 3 } }))
                assert.equal(R.SUCCESS, b.code, b.remark)
            end
            -- One retried below the maximum: to %RETRY%, not counted.
            local r = send(c1, "DlqT", 0, "again", 0)
            local b = assert(c2:call({ code = req.CONSUMER_SEND_MSG_BACK, ext = {
                offset = tonumber(r.ext.msgId:sub(17, 32), 16), group = group, delayLevel = 0,
                maxReconsumeTimes = 3 } }))
            assert.equal(R.SUCCESS, b.code, b.remark)
            -- A 4.x client's fallback: a send to %RETRY%group past the
            -- group's retryMaxTimes (16) lands in the DLQ too.
            send(c1, "%RETRY%" .. group, 0, "dead too", 16, "RETRY_TOPIC\1DlqT\2WAIT\1true")
            local text = scrape(s)
            assert.equal(3, value(text, "rocketmq_send_to_dlq_messages_total",
                                  BASE .. ',topic="DlqT",consumer_group="DlqG"'), text)
            -- And they are there.
            local p = assert(c1:call({ code = req.GET_MAX_OFFSET, ext = { topic = "%DLQ%DlqG", queueId = 0 } }))
            assert.equal(3, tonumber(p.ext.offset))
        end)

        it("shows the lag latency while a group is behind, 0 once it caught up", function()
            local t0 = socket.gettime()
            for i = 1, 3 do
                send(c1, "LatT", 0, "l" .. i)
            end
            commit_offset(c2, "LatG", "LatT", 0, 1)
            socket.sleep(0.3)
            local text = scrape(s)
            local tg = BASE .. ',topic="LatT",consumer_group="LatG"'
            local lat = value(text, "rocketmq_consumer_lag_latency", tg)
            -- The oldest unconsumed (offset 1) was stored after t0 and at
            -- least 300 ms ago.
            assert.is_true(lat >= 300, text)
            assert.is_true(lat <= (socket.gettime() - t0) * 1000 + 50, text)
            commit_offset(c2, "LatG", "LatT", 0, 3)
            text = scrape(s)
            assert.equal(0, value(text, "rocketmq_consumer_lag_latency", tg), text)
        end)

        it("tells lag, inflight (pulled, not committed) and ready (not pulled) apart", function()
            for i = 1, 5 do
                send(c1, "FlightT", 0, "f" .. i)
            end
            local function pull(offset, max)
                local r = assert(c1:call(rq.pull({ group = "FlightG", topic = "FlightT", offset = offset,
                                                   max = max, expr = "TAG" })))
                assert.equal(R.SUCCESS, r.code, r.remark)
            end
            local tg = BASE .. ',topic="FlightT",consumer_group="FlightG",is_retry="false",is_system="false"'
            local function figures()
                local text = scrape(s)
                return { value(text, "rocketmq_consumer_lag_messages", tg),
                         value(text, "rocketmq_consumer_inflight_messages", tg),
                         value(text, "rocketmq_consumer_ready_messages", tg) }, text
            end
            commit_offset(c2, "FlightG", "FlightT", 0, 1)
            pull(1, 2)   -- offsets 1 and 2 pulled: the pull offset is 3
            local f, text = figures()
            assert.same({ 4, 2, 2 }, f, text)
            commit_offset(c2, "FlightG", "FlightT", 0, 3)
            assert.same({ 2, 0, 2 }, (figures()))
            pull(3, 32)
            assert.same({ 2, 2, 0 }, (figures()))
            commit_offset(c2, "FlightG", "FlightT", 0, 5)
            assert.same({ 0, 0, 0 }, (figures()))
        end)

        it("counts producer and consumer connections, by group, language and version", function()
            local function heartbeat(c, client_id, consumer_group, producer_group)
                local body = {
                    clientID = client_id,
                    consumerDataSet = setmetatable({}, cjson.array_mt),
                    producerDataSet = setmetatable({}, cjson.array_mt),
                }
                if consumer_group then
                    body.consumerDataSet = { {
                        groupName = consumer_group, consumeType = "CONSUME_PASSIVELY",
                        messageModel = "CLUSTERING", consumeFromWhere = "CONSUME_FROM_LAST_OFFSET",
                        unitMode = false,
                        subscriptionDataSet = { { topic = "ConnT", subString = "*",
                                                  tagsSet = setmetatable({}, cjson.array_mt),
                                                  codeSet = setmetatable({}, cjson.array_mt),
                                                  subVersion = 1 } },
                    } }
                end
                if producer_group then
                    body.producerDataSet = { { groupName = producer_group } }
                end
                local r = assert(c:call({ code = req.HEART_BEAT, body = cjson.encode(body) }))
                assert.equal(R.SUCCESS, r.code, r.remark)
            end
            local conns = {}
            for i = 1, 6 do
                conns[i] = assert(net.connect(s.addr))
            end
            for i = 1, 3 do
                heartbeat(conns[i], "127.0.0.1@c" .. i, "ConnG", nil)
            end
            heartbeat(conns[4], "127.0.0.1@p4", nil, "ConnPG")
            heartbeat(conns[5], "127.0.0.1@p5", nil, "ConnPG")
            heartbeat(conns[6], "127.0.0.1@c6", "CID_RMQ_SYS_Probe", nil)
            local text = scrape(s)
            assert.equal(3, value(text, "rocketmq_consumer_connections",
                                  BASE .. ',consumer_group="ConnG",language="java",version="v4_9_8",consume_mode="push",'
                                         .. 'protocol_type="remoting",is_system="false"'),
                         text)
            assert.equal(2, value(text, "rocketmq_producer_connections",
                                  BASE .. ',language="java",version="v4_9_8",protocol_type="remoting"'), text)
            -- RocketMQ's system group prefix.
            assert.equal(1, value(text, "rocketmq_consumer_connections",
                                  'consumer_group="CID_RMQ_SYS_Probe",language="java",version="v4_9_8",'
                                  .. 'consume_mode="push",protocol_type="remoting",is_system="true"'), text)
            -- A closed channel leaves its group.
            conns[1]:close()
            assert.truthy(server.eventually(function()
                return value(scrape(s), "rocketmq_consumer_connections", 'consumer_group="ConnG"') == 2
            end, 3000))
            for i = 2, 6 do
                conns[i]:close()
            end
        end)

        it("shows the store's gauges: bytes held equal the bytes written", function()
            local text = scrape(s)
            local local_ = 'storage_type="local",storage_medium="disk"'
            -- Every put so far was counted by topic: their sum is the
            -- commit log (send-backs are puts of their own, counted in
            -- %RETRY%/%DLQ% by the store only when sent, so add those).
            local written = 0
            for line in text:gmatch("[^\n]+") do
                local v = line:match("^rocketmq_throughput_in_total{.-} (%d+)$")
                if v then
                    written = written + tonumber(v)
                end
            end
            local held = value(text, "rmq_storage_commitlog_bytes", BASE)
            assert.is_true(held >= written and written > 0, text)
            assert.is_true(value(text, "rocketmq_storage_size", local_) > 0, text)
            local behind = value(text, "rocketmq_storage_flush_behind_bytes", local_)
            assert.is_true(behind >= 0 and behind <= held, text)
            assert.truthy(server.eventually(function()
                return value(scrape(s), "rocketmq_storage_dispatch_behind_bytes", local_) == 0
            end, 5000))
            local reserve = value(text, "rocketmq_storage_message_reserve_time", local_)
            assert.is_true(reserve >= 0 and reserve < 600 * 1000, text)
            local ratio = value(text, "rmq_storage_disk_used_ratio", BASE)
            assert.is_true(ratio >= 0 and ratio <= 100)
        end)

        it("shows the process's RSS, fds and uptime as /proc does, and each worker's loop lag", function()
            socket.sleep(1.2)   -- one loop lag probe per worker
            local text = scrape(s)
            local f = assert(io.open(("/proc/%d/statm"):format(s.pid)))
            local rss_pages = tonumber(f:read("a"):match("^%d+ (%d+)"))
            f:close()
            local p = io.popen("getconf PAGESIZE")
            local page = tonumber(p:read("l"))
            p:close()
            local rss = value(text, "rmq_process_resident_memory_bytes", BASE)
            assert.is_true(math.abs(rss - rss_pages * page) < 64 * 1024 * 1024, text)
            local fds = value(text, "rmq_process_open_fds", BASE)
            p = io.popen(("ls /proc/%d/fd | wc -l"):format(s.pid))
            local listed = tonumber(p:read("l"))
            p:close()
            assert.is_true(math.abs(fds - listed) <= 4, ("%d open, /proc lists %d"):format(fds, listed))
            assert.is_true(value(text, "rmq_process_max_fds", BASE) >= fds)
            assert.is_true(value(text, "rmq_uptime_seconds", BASE) >= 1, text)
            for w = 0, 1 do
                local lag = value(text, "rmq_worker_loop_lag_seconds", ('worker="%d"'):format(w))
                assert.is_number(lag, text)
                assert.is_true(lag >= 0 and lag < 5, text)
            end
            local ok, said = promtool_check(s, text, "families.txt")
            if ok == "absent" then
                pending("promtool not installed (Debian package prometheus): output not linted")
                return
            end
            assert.is_true(ok, said)
        end)
    end)
end

describe("metrics families on a NameServer", function()
    it("counts its brokers, topics and route lookups", function()
        local s = server.start({ role = "namesrv", workers = 2, kvConfigPath = server.tmpdir() .. "/kv.json",
                                 metricsExporterType = "PROM", metricsPromExporterPort = 0 })
        local ns = require("support.nsclient")
        local c = assert(net.connect(s.addr))
        -- Two broker names in one cluster, broker-a with a slave: 3 live
        -- addresses; 3 topics between them.
        local regs = {
            { name = "broker-a", id = 0, addr = "127.0.0.1:20911", topics = { { "NsT1" }, { "NsT2" } } },
            { name = "broker-a", id = 1, addr = "127.0.0.1:20921", topics = { { "NsT1" }, { "NsT2" } } },
            { name = "broker-b", id = 0, addr = "127.0.0.1:20931", topics = { { "NsT1" }, { "NsT3" } } },
        }
        for _, o in ipairs(regs) do
            o.cluster = "NsCluster"
            local r = assert(ns.register(c, o))
            assert.equal(R.SUCCESS, r.code, r.remark)
        end
        assert.truthy(ns.route(c, "NsT1"))
        assert.truthy(ns.route(c, "NsT3"))
        local none, r = ns.route(c, "NoSuchTopic")
        assert.is_nil(none)
        assert.equal(R.TOPIC_NOT_EXIST, r.code)
        local text = scrape(s)
        c:close()
        s:stop()
        local id = ('node_type="namesrv",node_id="%s"'):format(s.addr)
        assert.equal(3, value(text, "rmq_namesrv_topics", id), text)
        assert.equal(2, value(text, "rmq_namesrv_brokers", id))
        assert.equal(3, value(text, "rmq_namesrv_live_brokers", id))
        assert.equal(1, value(text, "rmq_namesrv_clusters", id))
        assert.equal(2, value(text, "rmq_namesrv_route_lookups_total", id .. ',result="found"'))
        assert.equal(1, value(text, "rmq_namesrv_route_lookups_total", id .. ',result="not_found"'))
        assert.is_true(value(text, "rmq_process_resident_memory_bytes", id) > 0)
        local ok, said = promtool_check(s, text, "namesrv.txt")
        assert.is_true(ok == "absent" or ok, said)
    end)
end)
