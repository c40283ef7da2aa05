-- Flow control as RocketMQ 4.9.8 does it (README "Flow control"): a
-- broker whose store is slow answers SYSTEM_BUSY (2) with 4.9.8's
-- remarks instead of letting sends time out, keeps serving, loses nothing
-- it acknowledged; the limits change live; a replaced admission policy
-- decides; the project's producer moves to the healthy broker.
--
-- The store is made slow with the put_delay_ms fault injection point
-- (src/core/errinj.h: each commit log append sleeps holding its lock),
-- switched by a conf processor (code 7001) of the broker under test.
local net = require("rmq.net")
local codes = require("rmq.codes")
local core = require("rmq.core")
local producer = require("rmq.client.producer")
local server = require("support.server")
local admin = require("support.admin")
local rq = require("support.requests")
local prom = require("support.prom")
local client = require("rmq.console_live.client")

local req, R = codes.request, codes.response

local REJECT = "[REJECTREQUEST]system busy, start flow control for a while"
local TIMEOUT_CLEAN = "^%[TIMEOUT_CLEAN_QUEUE%]broker busy, start flow control for a while, "
    .. "period in queue: (%d+)ms, size of queue: (%d+)$"

local function send_req(topic, body, queue)
    return rq.send({ group = "FcGroup", topic = topic, qid = queue, born = 1796034593124, tags = "TagA",
                     body = body })
end

-- A SEND_MESSAGE_V2 whose header names the topic twice ("b": first,
-- then "b": last), written byte by byte (a Lua table cannot hold both);
-- the reply's header as a table.
local function dup_topic_send(addr, first, last)
    local cjson = require("cjson")
    local ext = ('"a":"FcGroup","b":%s,"c":"TBW102","d":"4","e":"0","f":"0","g":"1796034593124",'
        .. '"h":"0","i":"WAIT\\u0001true","j":"0","k":"false","m":"false","b":%s')
        :format(cjson.encode(first), cjson.encode(last))
    local hdr = ('{"code":%d,"extFields":{%s},"flag":0,"language":"JAVA","opaque":7,'
        .. '"serializeTypeCurrentRPC":"JSON","version":401}'):format(req.SEND_MESSAGE_V2, ext)
    local body = "dup"
    local t = assert(require("socket").connect(addr:match("^(.+):(%d+)$")))
    t:settimeout(10)
    assert(t:send(rq.frame(hdr, body)))
    local len = string.unpack(">I4", assert(t:receive(4)))
    local rest = assert(t:receive(len))
    t:close()
    local hl = string.unpack(">I4", rest) & 0xFFFFFF
    return cjson.decode(rest:sub(5, 4 + hl))
end

-- A broker with `extra` conf keys (a table of plain values, or Lua
-- source text for the rest of the conf table).
local function broker(extra, name)
    local lines = {}
    for k, v in pairs(type(extra) == "table" and extra or {}) do
        if k ~= "workers" and k ~= "namesrvAddr" then
            lines[#lines + 1] = ("%s = %s,"):format(k, server.serialize(v, ""))
        end
    end
    return server.start({ source = ([[
        return {
            role = "broker", brokerName = %q, workers = %d,
            storePathRootDir = %q, mappedFileSizeCommitLog = 1048576,
            namesrvAddr = %q,
            processors = {
                [7001] = function(ctx, cmd)
                    require("rmq.store").errinj("put_delay_ms", tonumber(cmd:get("ms")))
                    return { code = 0 }
                end,
            },
            %s
            %s
        }
    ]]):format(name or "broker-fc", type(extra) == "table" and extra.workers or 2, server.tmpdir() .. "/store-" .. (name or "fc"),
               type(extra) == "table" and extra.namesrvAddr or "127.0.0.1:1",
               table.concat(lines, "\n"), type(extra) == "string" and extra or "") })
end

local function put_delay(addr, ms)
    local r = admin.call(addr, { code = 7001, ext = { ms = ms } })
    assert.equal(0, r.code, r.remark)
end

local function update_config(addr, body)
    local r = admin.call(addr, { code = req.UPDATE_BROKER_CONFIG, body = body })
    assert.equal(0, r.code, r.remark)
end

-- Messages stored in queue 0 of topic.
local function stored(addr, topic)
    local r = admin.call(addr, { code = req.GET_MAX_OFFSET, ext = { topic = topic, queueId = 0 } })
    assert.equal(0, r.code, r.remark)
    return tonumber(r.ext.offset)
end

-- Runs fn(); stops the servers (each must exit 0) and fails with fn's
-- error and the first server's log if fn failed.
local function checked(servers, fn)
    local ok, err = pcall(fn)
    local log = servers[1]:log()
    for _, s in ipairs(servers) do
        assert.equal(0, s:stop())
    end
    assert(ok, tostring(err) .. "\n" .. log)
end

-- One slow put of `topic` (put_delay_ms = delay) and, `gap` ms after it
-- started, each of `cmds` on a connection of its own (connected right
-- after the slow one's: the broker deals connections to its workers in
-- turn); with gap nil, `cmds` go on the slow one's connection right
-- behind it, in the same write.  Asserts the slow one was stored;
-- returns the others' replies.
local function behind_slow_put(addr, topic, delay, gap, cmds)
    put_delay(addr, delay)
    local slow = assert(net.connect(addr))
    local conns, out = {}, {}
    for i = 1, #cmds do
        conns[i] = gap and assert(net.connect(addr)) or slow
    end
    net.spawn(function() out.slow = { slow:call(send_req(topic, "slow"), 10000) } end)
    if gap then
        net.sleep(gap)
    end
    for i, c in ipairs(conns) do
        net.spawn(function() out[i] = { c:call(cmds[i], 10000) } end)
    end
    assert(server.eventually(function()
        for i = 1, #cmds do
            if not out[i] then
                return false
            end
        end
        return out.slow ~= nil
    end, 8000))
    put_delay(addr, 0)
    for _, c in ipairs(conns) do
        if c ~= slow then
            c:close()
        end
    end
    slow:close()
    assert.equal(R.SUCCESS, assert(out.slow[1], out.slow[2]).code, out.slow[1].remark)
    local replies = {}
    for i = 1, #cmds do
        replies[i] = assert(out[i][1], out[i][2])
    end
    return table.unpack(replies)
end

describe("flow control", function()
    it("answers sends [REJECTREQUEST] while a put holds the commit log lock too long", function()
        local s = broker({ osPageCacheBusyTimeOutMills = 300 })
        checked({ s }, function()
            admin.create_topic(s.addr, "FcPut", 1)
            assert.equal(0, admin.call(s.addr, send_req("FcPut", "before")).code)
            -- One slow put (it holds the lock 2 s); then sends on two
            -- more connections, which the broker's two workers share
            -- round-robin: one is on the other worker and sees the put
            -- in progress, one waits behind the slow put on its worker.
            local function round()
                return behind_slow_put(s.addr, "FcPut", 2000, 700, { send_req("FcPut", "b1"), send_req("FcPut", "b2") })
            end
            -- The one on the other worker is refused; the one behind the
            -- slow put on its worker is read after it, in a new loop
            -- iteration, and served (its wait there is not known).
            local seen = {}
            for _, r in ipairs({ round() }) do
                seen[#seen + 1] = r.code == R.SYSTEM_BUSY and r.remark or r.code
            end
            table.sort(seen, function(x, y) return tostring(x) < tostring(y) end)
            assert.same({ R.SUCCESS, REJECT }, seen)
            -- Nothing busy was stored, everything acknowledged was; the
            -- broker serves again once the store is quick.
            assert.equal(3, stored(s.addr, "FcPut"))
            local r = admin.call(s.addr, send_req("FcPut", "after"))
            assert.equal(R.SUCCESS, r.code, r.remark)
            assert.equal(4, stored(s.addr, "FcPut"))
            -- The limit out of the way (live): both wait and are stored.
            update_config(s.addr, "osPageCacheBusyTimeOutMills=10000000\n")
            local r1, r2 = round()
            assert.equal(R.SUCCESS, r1.code, r1.remark)
            assert.equal(R.SUCCESS, r2.code, r2.remark)
            assert.equal(7, stored(s.addr, "FcPut"))
        end)
    end)

    it("answers requests that waited behind a slow put [TIMEOUT_CLEAN_QUEUE], with limits changed live", function()
        -- A send and a pull written right behind a 1.5 s put on its
        -- connection: read with it, they wait for it.
        local s = broker({ workers = 1, osPageCacheBusyTimeOutMills = 60000, waitTimeMillsInPullQueue = 300,
                           metricsExporterType = "PROM", metricsPromExporterPort = 0 })
        checked({ s }, function()
            admin.create_topic(s.addr, "FcWait", 1)
            -- The queue made first: a send to a queue that does not exist
            -- yet is held while the store makes it, its connection's next
            -- frames behind it, not read into the worker's queue.
            assert.equal(0, admin.call(s.addr, send_req("FcWait", "before")).code)
            -- Sends a slow put and, 150 ms later on two more connections,
            -- a send and a pull; returns their results.
            local function round()
                return behind_slow_put(s.addr, "FcWait", 1500, nil, { send_req("FcWait", "queued"),
                    rq.pull({ group = "FcG", topic = "FcWait", max = 1, sysflag = 0, expr = "TAG" }) })
            end
            local before = stored(s.addr, "FcWait")
            local send, pull = round()
            assert.equal(R.SYSTEM_BUSY, send.code, send.remark)
            local waited, size = send.remark:match(TIMEOUT_CLEAN)
            assert(waited, send.remark)
            assert.is_true(tonumber(waited) >= 1400 and tonumber(waited) < 5000, send.remark)
            assert.equal("0", size, send.remark)   -- the worker holds nothing else unanswered
            assert.equal(R.SYSTEM_BUSY, pull.code, pull.remark)
            assert(pull.remark:match(TIMEOUT_CLEAN), pull.remark)
            assert.equal(before + 1, stored(s.addr, "FcWait"))   -- the slow one only
            -- The worker's longest stretch without reading, on /metrics.
            local busy_max
            assert(server.eventually(function()
                busy_max = prom.value(prom.scrape(s.metrics_addr), "rmq_worker_busy_max_seconds", 'worker="0"')
                return busy_max and busy_max >= 1.4
            end, 4000), "rmq_worker_busy_max_seconds: " .. tostring(busy_max))
            assert.is_true(busy_max < 5)

            -- Fast failure off (live): the same wait is served.
            update_config(s.addr, "brokerFastFailureEnable=false\n")
            send, pull = round()
            assert.equal(R.SUCCESS, send.code, send.remark)
            assert.not_equal(R.SYSTEM_BUSY, pull.code, pull.remark)   -- served (this group has no subscription)
            assert.equal(before + 3, stored(s.addr, "FcWait"))

            -- On again with a longer send limit: sends served, pulls (300 ms) not.
            update_config(s.addr, "brokerFastFailureEnable=true\nwaitTimeMillsInSendQueue=5000\n")
            send, pull = round()
            assert.equal(R.SUCCESS, send.code, send.remark)
            assert.equal(R.SYSTEM_BUSY, pull.code, pull.remark)

            -- And back to 4.9.8's 200 ms.
            update_config(s.addr, "waitTimeMillsInSendQueue=200\n")
            send = round()
            assert.equal(R.SYSTEM_BUSY, send.code, send.remark)
            assert.equal(before + 6, stored(s.addr, "FcWait"))
        end)
    end)

    for _, native in ipairs({ true, false }) do
    it(("lets a replaced admission policy decide, and RocketMQ's rule when it fails (%s)")
        :format(native and "C send path" or "Lua send path"), function()
        -- A wait limit of 0: every send is past it, so the policy sees them all.
        local s = broker([[
            nativeProcessors = ]] .. tostring(native) .. [[,
            waitTimeMillsInSendQueue = 0,
            admissionPolicy = function(f)
                if f.topic == "FcClosed" then
                    return "busy", "topic FcClosed is closed for " .. f.kind
                elseif f.topic == "FcBroken" then
                    error("a bug in the policy")
                end
                return "admit"
            end,
        ]])
        checked({ s }, function()
            for _, t in ipairs({ "FcOpen", "FcClosed", "FcBroken" }) do
                admin.create_topic(s.addr, t, 1)
            end
            for i = 1, 5 do
                local r = admin.call(s.addr, send_req("FcOpen", "m" .. i))
                assert.equal(R.SUCCESS, r.code, r.remark)
                r = admin.call(s.addr, send_req("FcClosed", "m" .. i))
                assert.equal(R.SYSTEM_BUSY, r.code, r.remark)
                assert.equal("topic FcClosed is closed for send", r.remark)
                r = admin.call(s.addr, send_req("FcBroken", "m" .. i))
                assert.equal(R.SYSTEM_BUSY, r.code, r.remark)
                assert(r.remark:match(TIMEOUT_CLEAN), r.remark)   -- no traceback, no path
            end
            -- a topic given twice: the policy sees the one the send is
            -- served for, the last (as the processors and Java take it)
            local r = dup_topic_send(s.addr, "FcOpen", "FcClosed")
            assert.same({ R.SYSTEM_BUSY, "topic FcClosed is closed for send" }, { r.code, r.remark })
            r = dup_topic_send(s.addr, "FcClosed", "FcOpen")
            assert.equal(R.SUCCESS, r.code, r.remark)
            assert.equal(6, stored(s.addr, "FcOpen"))
            assert.equal(0, stored(s.addr, "FcClosed"))
            assert.equal(0, stored(s.addr, "FcBroken"))
            assert(server.eventually(function()
                return s:log():find("admission policy failed", 1, true) ~= nil
            end, 3000), "no log line for the failed policy")
        end)
    end)
    end

    it("follows the admission policy's code replaced through the live console", function()
        local s = broker([[ console = "unix", waitTimeMillsInSendQueue = 0, ]])
        local session = assert(client.open(s.ready_line:match("console=(unix:%S+)")))
        checked({ s }, function()
            admin.create_topic(s.addr, "FcSwap", 1)
            -- Two connections: one per worker.
            local conns = { assert(net.connect(s.addr)), assert(net.connect(s.addr)) }
            local function codes_now()
                local out = {}
                for i, c in ipairs(conns) do
                    out[i] = assert(c:call(send_req("FcSwap", "m"))).code
                end
                return table.concat(out, ",")
            end
            assert.equal("2,2", codes_now())   -- RocketMQ's rule with a 0 ms limit
            local okc, text = session:eval(("return replace('rmq.policy.admission', %q)"):format(
                "return { admit = function() return 'admit' end, remark = function() return '' end }"))
            assert.is_true(okc, text)
            assert.equal("0,0", codes_now())
            okc, text = session:eval("return reload('rmq.policy.admission')")   -- the file's code again
            assert.is_true(okc, text)
            assert.equal("2,2", codes_now())
            assert.equal(2, stored(s.addr, "FcSwap"))
            for _, c in ipairs(conns) do
                c:close()
            end
            session:close()
        end)
    end)

    it("does not refuse anything under normal load", function()
        local s = broker({})
        checked({ s }, function()
            admin.create_topic(s.addr, "FcLoad", 1)
            local done, busy, other = 0, 0, {}
            for _ = 1, 4 do
                local c = assert(net.connect(s.addr))
                net.spawn(function()
                    for i = 1, 250 do
                        local r = c:call(send_req("FcLoad", "load " .. i), 10000)
                        if r and r.code == R.SYSTEM_BUSY then
                            busy = busy + 1
                        elseif not r or r.code ~= R.SUCCESS then
                            other[#other + 1] = r and r.remark or "no reply"
                        end
                    end
                    c:close()
                    done = done + 1
                end)
            end
            assert(server.eventually(function() return done == 4 end, 30000))
            assert.equal(0, busy)
            assert.same({}, other)
            assert.equal(1000, stored(s.addr, "FcLoad"))
        end)
    end)

    it("is counted apart by rmq bench produce", function()
        local s = broker({ waitTimeMillsInSendQueue = 0 })   -- every send busy
        checked({ s }, function()
            admin.create_topic(s.addr, "FcBench", 4)
            local code, out = server.rmq(("bench produce -n 127.0.0.1:1 --broker %s -t FcBench -q 4 -c 4 -d 1 -s 64")
                :format(s.addr))
            assert.equal(2, code, out)
            local total, tps, busy = out:match("%[Complete%] Send Total: (%d+) | Send TPS: (%d+) .*"
                .. "| Send Failed: 0 | Response Failed: 0 | Send Busy: (%d+)")
            assert(total, out)
            assert.equal("0", tps, out)
            assert.is_true(tonumber(busy) > 0 and busy == total, out)
            for q = 0, 3 do
                assert.equal(0, tonumber(admin.call(s.addr, { code = req.GET_MAX_OFFSET,
                    ext = { topic = "FcBench", queueId = q } }).ext.offset))
            end
        end)
    end)

    it("moves the project's producer to the healthy broker", function()
        local ns = server.start({ role = "namesrv", listenPort = 0 })
        -- broker-a answers every send SYSTEM_BUSY (a wait limit of 0 and
        -- RocketMQ's rule); broker-b is healthy.
        local a = broker({ namesrvAddr = ns.addr, waitTimeMillsInSendQueue = 0 }, "broker-a")
        local b = broker({ namesrvAddr = ns.addr }, "broker-b")
        checked({ a, b, ns }, function()
            admin.create_topic(a.addr, "FcFail", 2)
            admin.create_topic(b.addr, "FcFail", 2)
            local function new(opts)
                opts.namesrvAddr, opts.producerGroup, opts.sendLatencyFaultEnable = ns.addr, "FcP", true
                local p = producer.new(opts)
                assert(server.eventually(function()
                    local info = p:publish_info("FcFail", true)
                    return info and #info.queues == 4
                end, 10000), "the route has not both brokers")
                return p
            end
            -- 4.9.8's rule: the busy send fails at once (no retry: 2 is
            -- not a retry code), the broker is avoided from then on.
            local p = new({})
            local failed = 0
            for i = 1, 20 do
                local t0 = core.mono_ms()
                local r, serr, code = p:send({ topic = "FcFail", body = "d" .. i })
                if r then
                    assert.equal("broker-b", r.queue.brokerName)
                else
                    assert.equal(R.SYSTEM_BUSY, code, serr)
                    assert.is_true(core.mono_ms() - t0 < 2000, "a busy broker answers at once")
                    failed = failed + 1
                end
            end
            assert.equal(1, failed)
            -- With SYSTEM_BUSY among the retry codes, the same send goes
            -- to broker-b at once.
            p = new({ retryResponseCodes = { 1, 2, 14, 16, 17, 204, 205 } })
            for i = 1, 20 do
                local r = assert(p:send({ topic = "FcFail", body = "r" .. i }))
                assert.equal("broker-b", r.queue.brokerName)
            end
            local on_b = 0
            for q = 0, 1 do
                assert.equal(0, tonumber(admin.call(a.addr, { code = req.GET_MAX_OFFSET,
                    ext = { topic = "FcFail", queueId = q } }).ext.offset))
                on_b = on_b + tonumber(admin.call(b.addr, { code = req.GET_MAX_OFFSET,
                    ext = { topic = "FcFail", queueId = q } }).ext.offset)
            end
            assert.equal(39, on_b)
        end)
    end)
end)
