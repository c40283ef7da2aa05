-- rmq.tools.audit: `rmq audit`, the bookkeeping of the proof scripts
-- (scripts/chaos.sh, partition.sh, soak.sh): did every message a broker
-- acknowledged reach a consumer?
--
--   rmq audit produce -n NAMESRV -t TOPIC -o FILE [-c TASKS] [-r RATE] [-s SIZE]
--                     [-d SECONDS] [--stop-file PATH] [--id ID] [--stats-every S]
--                     [--timeout MS] [--latency-fault]
--   rmq audit consume -n NAMESRV -t TOPIC -g GROUP -o FILE [--stop-file PATH] [-d SECONDS]
--   rmq audit check [--json] [--max-lost-listed N] FILE...
--
-- produce: TASKS tasks of the project's producer (rmq.client.producer,
-- sync sends with RocketMQ's retry rules) send messages numbered ID-1,
-- ID-2, ... (the number is the message's KEYS and starts its body), at
-- most RATE a second in total (0: as fast as the broker answers), until
-- SECONDS pass or PATH exists (--timeout: sendMsgTimeout, default 3000;
-- --latency-fault: sendLatencyFaultEnable).  Each outcome is one line of FILE:
--   A ID-SEQ MSGID BROKER QUEUE OFFSET STOREHOST   acknowledged (SEND_OK;
--                                        STOREHOST: ip:port of the broker
--                                        that stored it, from the offset
--                                        message id; "-" when unknown)
--   F ID-SEQ reason                      failed (not acknowledged)
-- and every --stats-every seconds a line on stdout:
--   STATS t=S sent=N ok=N failed=N p50=MS p99=MS max=MS (this interval;
--   latencies of acknowledged sends, 0.1 ms)
-- consume: the project's push consumer (rmq.client.consumer, clustering,
-- CONSUME_FROM_FIRST_OFFSET) writes one line per delivery:
--   R ID-SEQ MSGID BROKER QUEUE OFFSET
-- check: reads every FILE (A, F and R lines alike; a torn last line is
-- skipped) and prints
--   acknowledged=N received=N deliveries=N lost=N duplicates=N unacked_delivered=N failed=N
--   reordered=N moved=N
-- lost = acknowledged but never delivered; duplicates = deliveries beyond
-- the first of a message; unacked_delivered = delivered although its
-- send was never acknowledged (a reply lost with the connection: the
-- producer had to treat it as failed); reordered = first deliveries of
-- a queue (broker name and queue id) whose offset is below one
-- delivered before from that queue, in one record file; moved =
-- messages delivered at another broker name, queue or offset than the
-- one their acknowledgement named (a history rewritten under them, as a
-- failover that kept what it should have dropped would).  Exit status 1
-- when lost > 0.
local cjson = require("cjson")
local core = require("rmq.core")
local net = require("rmq.net")

local M = {}

local function exists(path)
    local f = path and io.open(path, "r")
    return f ~= nil and f:close()
end

local function percentile(sorted, p)
    if #sorted == 0 then
        return 0
    end
    local i = math.max(1, math.ceil(#sorted * p))
    return sorted[i]
end

-- The id of a delivered message: the producer's KEYS, else the number at
-- the head of the body (a message someone else sent has neither).
local function id_of(m)
    local k = m.keys or (m.properties and m.properties.KEYS)
    if k and k:match("^%S+%-%d+$") then
        return k
    end
    return m.body and m.body:match("^audit (%S+%-%d+) ")
end

M.id_of = id_of

--- "ip:port" of the broker that stored a message, from its offset
--- message id (4.x: 8 hex digits of IPv4, 8 of port, 16 of offset); "-"
--- when it is not one.
function M.store_host(offset_msg_id)
    local ip, port = tostring(offset_msg_id):match("^(%x%x%x%x%x%x%x%x)(%x%x%x%x%x%x%x%x)%x+$")
    if not ip then
        return "-"
    end
    local n = tonumber(ip, 16)
    return ("%d.%d.%d.%d:%d"):format(n >> 24, (n >> 16) & 255, (n >> 8) & 255, n & 255, tonumber(port, 16))
end

--- Produces until opts.seconds pass or opts.stop_file exists.
function M.produce(opts)
    local producer = require("rmq.client.producer")
    local out = assert(io.open(opts.out, "a"))
    local tasks = tonumber(opts.concurrency) or 4
    local rate = tonumber(opts.rate) or 0
    local size = tonumber(opts.size) or 128
    local seconds = tonumber(opts.seconds)
    local id = opts.id or tostring(core.pid())
    local every = tonumber(opts.stats_every) or 0
    local p = producer.new({ namesrvAddr = opts.namesrv, producerGroup = opts.group or "audit_producer",
                             sendMsgTimeout = tonumber(opts.timeout) or 3000,
                             pollNameServerInterval = 5000,
                             -- MQFaultStrategy: a broker that timed out is
                             -- avoided for a while (partition.sh).
                             sendLatencyFaultEnable = opts.latency_fault == true })
    local seq, stop = 0, false
    local t0 = core.mono_ms()
    local totals = { sent = 0, ok = 0, failed = 0 }
    local win = { lat = {}, sent = 0, ok = 0, failed = 0 }
    local running = 0
    local function one()
        seq = seq + 1
        local key = id .. "-" .. seq
        local head = "audit " .. key .. " "
        local body = head .. string.rep("x", math.max(0, size - #head))
        local s0 = core.mono_ms()
        local r, err, code = p:send({ topic = opts.topic, body = body, keys = key })
        local ms = core.mono_ms() - s0
        totals.sent, win.sent = totals.sent + 1, win.sent + 1
        if r and r.status == "SEND_OK" then
            totals.ok, win.ok = totals.ok + 1, win.ok + 1
            win.lat[#win.lat + 1] = ms
            out:write(("A %s %s %s %d %s %s\n"):format(key, r.msgId, r.queue.brokerName, r.queue.queueId,
                                                      tostring(r.queueOffset), M.store_host(r.offsetMsgId)))
        else
            totals.failed, win.failed = totals.failed + 1, win.failed + 1
            local why = r and r.status or ((code and ("code " .. code .. " ") or "") .. tostring(err))
            out:write(("F %s %s\n"):format(key, (why:gsub("%s+", "_"))))
        end
        out:flush()
        return r ~= nil
    end
    local function task(k)
        running = running + 1
        while not stop do
            local started = core.mono_ms()
            local ok = one()
            if rate > 0 then
                -- Each task sends rate/tasks a second.
                local gap = tasks * 1000 / rate - (core.mono_ms() - started)
                if gap > 0 then
                    net.sleep(math.floor(gap))
                end
            elseif not ok then
                net.sleep(100)  -- the broker is down: do not spin
            end
            if k == 1 and ((seconds and core.mono_ms() - t0 >= seconds * 1000) or exists(opts.stop_file)) then
                stop = true
            end
        end
        running = running - 1
    end
    net.run(function()
        for k = 1, tasks do
            net.spawn(task, k)
        end
        local last = core.mono_ms()
        while running > 0 or core.mono_ms() - t0 < 100 do
            net.sleep(50)
            if every > 0 and core.mono_ms() - last >= every * 1000 then
                last = core.mono_ms()
                table.sort(win.lat)
                print(("STATS t=%d sent=%d ok=%d failed=%d p50=%.1f p99=%.1f max=%.1f"):format(
                    math.floor((last - t0) / 1000), win.sent, win.ok, win.failed,
                    percentile(win.lat, 0.5), percentile(win.lat, 0.99), win.lat[#win.lat] or 0))
                io.stdout:flush()
                win = { lat = {}, sent = 0, ok = 0, failed = 0 }
            end
        end
    end)
    out:close()
    print(("produced sent=%d ok=%d failed=%d"):format(totals.sent, totals.ok, totals.failed))
    return 0
end

--- Consumes until opts.seconds pass or opts.stop_file exists.
function M.consume(opts)
    local consumer = require("rmq.client.consumer")
    local out = assert(io.open(opts.out, "a"))
    local seconds = tonumber(opts.seconds)
    local c = consumer.new({
        namesrvAddr = opts.namesrv, consumerGroup = opts.group,
        consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET",
        -- Brokers come and go in these runs: find them again quickly.
        heartbeatBrokerInterval = 1000, rebalanceInterval = 2000,
        pollNameServerInterval = 2000, persistConsumerOffsetInterval = 1000,
        suspendTimeoutMillis = 2000, pullTimeDelayMillsWhenException = 200,
    })
    c:subscribe(opts.topic, "*")
    local n = 0
    c:on_message(function(msgs)
        for _, m in ipairs(msgs) do
            local key = id_of(m)
            if key then
                n = n + 1
                out:write(("R %s %s %s %d %d\n"):format(key, m.msgId, m.brokerName or "-",
                                                       m.queueId, m.queueOffset))
            end
        end
        out:flush()
        return "CONSUME_SUCCESS"
    end)
    local code = 0
    net.run(function()
        local t0 = core.mono_ms()
        -- The first route lookup may meet a NameServer that is down.
        local ok, err
        for _ = 1, 100 do
            ok, err = pcall(c.start, c)
            if ok then
                break
            end
            net.sleep(200)
        end
        if not ok then
            io.stderr:write("rmq: audit consume: " .. tostring(err) .. "\n")
            code = 1
            return
        end
        while not exists(opts.stop_file) and not (seconds and core.mono_ms() - t0 >= seconds * 1000) do
            net.sleep(100)
        end
        c:shutdown()
    end)
    out:close()
    print(("consumed deliveries=%d"):format(n))
    return code
end

--- Reads record files: returns the tallies (and the lost ids, sorted).
function M.tally(files)
    local acked, failed, got = {}, {}, {}
    local t = { acknowledged = 0, received = 0, deliveries = 0, lost = 0, duplicates = 0,
                unacked_delivered = 0, failed = 0, reordered = 0, moved = 0 }
    local first_at = {}   -- key -> "BROKER QUEUE OFFSET" of its first delivery
    for _, path in ipairs(files) do
        local f = io.open(path, "r")
        local last = {}   -- "BROKER QUEUE" -> highest offset delivered first in this file
        if f then
            for line in f:lines("L") do
                if line:sub(-1) == "\n" then   -- a line still being written is skipped
                    local kind, key, rest = line:match("^(%u) (%S+) ?(.-)\n$")
                    if kind == "A" then
                        if not acked[key] then
                            acked[key] = rest
                            t.acknowledged = t.acknowledged + 1
                        end
                    elseif kind == "F" then
                        failed[key] = true
                    elseif kind == "R" then
                        t.deliveries = t.deliveries + 1
                        if got[key] then
                            t.duplicates = t.duplicates + 1
                        else
                            got[key] = true
                            t.received = t.received + 1
                            local broker, q, off = rest:match("^%S+ (%S+) (%S+) (%d+)")
                            if broker then
                                local qk, o = broker .. " " .. q, tonumber(off)
                                if last[qk] and o < last[qk] then
                                    t.reordered = t.reordered + 1
                                end
                                last[qk] = math.max(last[qk] or o, o)
                                first_at[key] = { broker, q, off }
                            end
                        end
                    end
                end
            end
            f:close()
        end
    end
    local lost = {}
    for key, where in pairs(acked) do
        if not got[key] then
            lost[#lost + 1] = key .. " " .. where
        end
    end
    table.sort(lost)
    t.lost = #lost
    for key in pairs(got) do
        if not acked[key] then
            t.unacked_delivered = t.unacked_delivered + 1
        else
            -- (a consumer that does not know the broker name writes "-")
            local broker, q, off = acked[key]:match("^%S+ (%S+) (%S+) (%S+)")
            local at = first_at[key]
            if broker and at and (q ~= at[2] or off ~= at[3] or (at[1] ~= "-" and at[1] ~= broker)) then
                t.moved = t.moved + 1
            end
        end
    end
    for key in pairs(failed) do
        if not acked[key] then
            t.failed = t.failed + 1
        end
    end
    return t, lost
end

function M.summary(t)
    return ("acknowledged=%d received=%d deliveries=%d lost=%d duplicates=%d unacked_delivered=%d failed=%d"
            .. " reordered=%d moved=%d")
        :format(t.acknowledged, t.received, t.deliveries, t.lost, t.duplicates, t.unacked_delivered, t.failed,
                t.reordered, t.moved)
end

function M.check(opts, files)
    local t, lost = M.tally(files)
    if opts.json then
        print(cjson.encode(t))
    else
        print(M.summary(t))
    end
    local listed = tonumber(opts.max_lost_listed) or 20
    for i = 1, math.min(listed, #lost) do
        io.stderr:write("lost: " .. lost[i] .. "\n")
    end
    return t.lost > 0 and 1 or 0
end

-- The `rmq audit` command (cli.lua's table of commands).
M.command = {
    usage = "rmq audit produce|consume -n NAMESRV -t TOPIC [-g GROUP] -o FILE [-c TASKS] [-r RATE] [-s SIZE]"
        .. " [-d SECONDS] [--stop-file PATH] [--id ID] [--stats-every S] [--timeout MS] [--latency-fault]\n"
        .. "       rmq audit check [--json] [--max-lost-listed N] FILE...",
    help = "record acknowledged sends and deliveries, then report lost and duplicated messages",
    spec = {
        namesrv = { "-n", "--namesrv", arg = true },
        topic = { "-t", "--topic", arg = true },
        group = { "-g", "--group", arg = true },
        out = { "-o", "--out", arg = true },
        concurrency = { "-c", "--concurrency", arg = true },
        rate = { "-r", "--rate", arg = true },
        size = { "-s", "--size", arg = true },
        seconds = { "-d", "--duration", arg = true },
        stop_file = { "--stop-file", arg = true },
        id = { "--id", arg = true },
        stats_every = { "--stats-every", arg = true },
        timeout = { "--timeout", arg = true },
        latency_fault = { "--latency-fault" },
        json = { "--json" },
        max_lost_listed = { "--max-lost-listed", arg = true },
    },
    run = function(opts, args)
        local what = table.remove(args, 1)
        local function need(...)
            for _, k in ipairs({ ... }) do
                if not opts[k] then
                    io.stderr:write(("rmq: audit %s: --%s is required\n"):format(what, k))
                    return false
                end
            end
            return true
        end
        opts.namesrv = opts.namesrv or os.getenv("NAMESRV_ADDR") or "127.0.0.1:9876"
        if what == "produce" then
            return need("topic", "out") and M.produce(opts) or 2
        elseif what == "consume" then
            if not opts.group then
                opts.group = "audit_consumer"
            end
            return need("topic", "out") and M.consume(opts) or 2
        elseif what == "check" then
            if #args == 0 then
                io.stderr:write("rmq: audit check: name the record files\n")
                return 2
            end
            return M.check(opts, args)
        end
        io.stderr:write("rmq: audit: produce, consume or check\n")
        return 2
    end,
}

return M
