-- A fake broker (spec/support/fake.lua says how a fake runs), for client
-- specs: it keeps messages in memory and speaks enough of the broker
-- protocol (send, pull with a short hold, heartbeat with
-- NOTIFY_CONSUMER_IDS_CHANGED, consumer list, offsets, send back) to
-- drive rmq's clients, and it can be told to misbehave (delay, refuse,
-- suggest another broker id).
--
--   local fake = require("support.fake_broker")
--   local cluster = fake.cluster{ brokers = { ["broker-a"] = {delay_ms=0, fail_code=nil,
--                                 with_slave=false}, ... }, topic = "T", queues = 4 }
--   cluster.namesrv_addr, cluster.brokers["broker-a"].addr (.slave.addr)
--   cluster:set("broker-a", {delay_ms=, fail_code= (or "none"), suggest=})
--   fake.stats(addr) -> {count=, pulls=, sent_back=, last_<k>= (ext of the
--                        last send), offset_<group@topic@qid>=, ...}
--   cluster:stop()
local net = require("rmq.net")
local core = require("rmq.core")
local message = require("rmq.message")
local cjson = require("cjson")

local M = {}

local fake = require("spec.support.fake")

local function record(m, phy)
    local props = m.props or ""
    local body_crc = core.crc32(m.body) & 0x7FFFFFFF
    local total = 91 + #m.body + #m.topic + #props
    return string.pack(">i4i4i4i4i4i8i8i4i8BBBBi4i8BBBBi4i4i8s4s1s2",
        total, -626843481, body_crc, m.queueId, m.flag, m.queueOffset, phy, m.sysFlag,
        m.born, 127, 0, 0, 1, 40000, m.stored, 127, 0, 0, 1, 10911, m.reconsume or 0, 0,
        m.body, m.topic, props)
end

function M.conf(knobs)
    knobs.delay_ms = knobs.delay_ms or 0
    local queues = {}      -- "topic@qid" -> list of records (1-based: offset + 1)
    local phy = 0
    local count, last, last_body = 0, nil, nil
    local groups = {}      -- group -> clientId -> ctx
    local offsets = {}     -- "group@topic@qid" -> offset
    local pulls, sent_back = 0, 0

    local function q(topic, qid)
        local k = topic .. "@" .. qid
        queues[k] = queues[k] or {}
        return queues[k]
    end

    local function store(topic, qid, body, flag, sys, props)
        local list = q(topic, qid)
        local m = { topic = topic, queueId = qid, body = body, flag = flag, sysFlag = sys,
                    props = props, queueOffset = #list, born = core.now_ms(), stored = core.now_ms() }
        local rec = record(m, phy)
        list[#list + 1] = { rec = rec, phy = phy, tags = message.property(props, "TAGS") }
        phy = phy + #rec
        return m.queueOffset, phy - #rec
    end

    local function send(ctx, cmd)
        count = count + 1
        last, last_body = cmd.ext, cmd.body
        if knobs.delay_ms > 0 then net.sleep(knobs.delay_ms) end
        if knobs.fail_code then
            return { code = knobs.fail_code, remark = "fake broker refuses" }
        end
        local e = cmd.ext
        local qid = tonumber(e.e or e.queueId) or 0
        local topic = e.b or e.topic
        local off, p = store(topic, qid, cmd.body, tonumber(e.h or e.flag) or 0,
            tonumber(e.f or e.sysFlag) or 0, message.edit_properties(e.i or e.properties or "", { "WAIT", false }))
        return { code = 0, ext = {
            msgId = ("7F00000100002A9F%016X"):format(p), queueId = qid, queueOffset = off,
            MSG_REGION = "DefaultRegion", TRACE_ON = "true" } }
    end

    local function pull(ctx, cmd)
        pulls = pulls + 1
        local e = cmd.ext
        local list = q(e.topic, tonumber(e.queueId))
        local off = tonumber(e.queueOffset)
        if (tonumber(e.sysFlag) & 1) == 1 then
            offsets[e.consumerGroup .. "@" .. e.topic .. "@" .. e.queueId] = tonumber(e.commitOffset)
        end
        -- Hold a pull with nothing new, briefly (specs stay fast).
        local held = 0
        while off >= #list and (tonumber(e.sysFlag) & 2) == 2 and held < (knobs.hold_ms or 200) do
            net.sleep(10)
            held = held + 10
        end
        local ext = { suggestWhichBrokerId = knobs.suggest or 0, minOffset = 0, maxOffset = #list }
        if off >= #list then
            ext.nextBeginOffset = off
            return { code = 19, remark = "OFFSET_OVERFLOW_ONE", ext = ext }
        end
        local want = {}
        local filtered = e.subscription and e.subscription ~= "*" and e.subscription ~= ""
        for t in (e.subscription or ""):gmatch("[^|%s]+") do want[t] = true end
        local parts, n = {}, 0
        local i = off
        while i < #list and n < tonumber(e.maxMsgNums) do
            local r = list[i + 1]
            if not filtered or (r.tags and want[r.tags]) then
                parts[#parts + 1] = r.rec
                n = n + 1
            end
            i = i + 1
        end
        ext.nextBeginOffset = i
        if n == 0 then
            return { code = 20, remark = "NO_MATCHED_MESSAGE", ext = ext }
        end
        return { code = 0, remark = "FOUND", ext = ext, body = table.concat(parts) }
    end

    local function notify(group)
        for _, c in pairs(groups[group] or {}) do
            if not c.closed then
                c:oneway({ code = 40, ext = { consumerGroup = group } })
            end
        end
    end

    local function heartbeat(ctx, cmd)
        local hb = cjson.decode(cmd.body)
        for _, cd in ipairs(hb.consumerDataSet or {}) do
            local g = groups[cd.groupName] or {}
            groups[cd.groupName] = g
            local changed = g[hb.clientID] == nil
            g[hb.clientID] = ctx
            if changed then notify(cd.groupName) end
        end
        return { code = 0 }
    end

    local function unregister(ctx, cmd)
        local g = groups[cmd.ext.consumerGroup]
        if g and g[cmd.ext.clientID] then
            g[cmd.ext.clientID] = nil
            notify(cmd.ext.consumerGroup)
        end
        return { code = 0 }
    end

    local function consumer_list(ctx, cmd)
        local ids = {}
        for id, c in pairs(groups[cmd.ext.consumerGroup] or {}) do
            if not c.closed then ids[#ids + 1] = id end
        end
        if #ids == 0 then
            return { code = 1, remark = "no consumer for this group, " .. cmd.ext.consumerGroup }
        end
        return { code = 0, body = cjson.encode({ consumerIdList = ids }) }
    end

    local function query_offset(ctx, cmd)
        local e = cmd.ext
        local o = offsets[e.consumerGroup .. "@" .. e.topic .. "@" .. e.queueId]
        if o == nil then
            if #q(e.topic, tonumber(e.queueId)) == 0 then
                return { code = 0, ext = { offset = 0 } }
            end
            return { code = 22, remark = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first" }
        end
        return { code = 0, ext = { offset = o } }
    end

    local function update_offset(ctx, cmd)
        local e = cmd.ext
        offsets[e.consumerGroup .. "@" .. e.topic .. "@" .. e.queueId] = tonumber(e.commitOffset)
        return { code = 0 }
    end

    local function stats()
        local ext = { count = count, pulls = pulls, sent_back = sent_back }
        for k, v in pairs(last or {}) do ext["last_" .. k] = v end
        if last_body and last and (tonumber(last.f) or 0) & 1 == 1 then
            local plain = core.inflate(last_body)
            ext.inflated_len = plain and #plain or -1
            ext.inflated_crc = plain and core.crc32(plain) or -1
        end
        for k, v in pairs(offsets) do ext["offset_" .. k] = v end
        return { code = 0, ext = ext }
    end

    return fake.conf({
        [310] = send, [320] = send, [10] = send,
        [11] = pull,
        [34] = heartbeat, [35] = unregister, [38] = consumer_list,
        [14] = query_offset, [15] = update_offset,
        [30] = function(ctx, cmd)
            return { code = 0, ext = { offset = #q(cmd.ext.topic, tonumber(cmd.ext.queueId)) } }
        end,
        [31] = function() return { code = 0, ext = { offset = 0 } } end,
        [36] = function() sent_back = sent_back + 1 return { code = 0 } end,
    }, knobs, stats)
end

-- {{{ The spec side

function M.stats(addr)
    return fake.dump(addr).ext
end

local Cluster = {}
Cluster.__index = Cluster

function Cluster:stop()
    for _, b in pairs(self.brokers) do
        b.server:stop()
        if b.slave then b.slave.server:stop() end
    end
    self.namesrv:stop()
end

--- Changes a broker's behaviour while it runs.
function Cluster:set(name, knobs)
    fake.set(self.brokers[name].addr, knobs)
end

--- Fake brokers (and slaves) behind a fake NameServer that routes
--- opts.topic, its %RETRY% topic and (unless template = false) TBW102
--- to all of them.
function M.cluster(opts)
    local c = setmetatable({ brokers = {} }, Cluster)
    local datas, queues = {}, {}
    local names = {}
    for name in pairs(opts.brokers) do
        names[#names + 1] = name
    end
    table.sort(names)
    for _, name in ipairs(names) do
        local knobs = opts.brokers[name]
        local s = fake.start("fake_broker", { delay_ms = knobs.delay_ms, fail_code = knobs.fail_code })
        c.brokers[name] = { server = s, addr = s.addr }
        local addrs = string.format('"0":"%s"', s.addr)
        if knobs.with_slave then
            local slave = fake.start("fake_broker", {})
            c.brokers[name].slave = { server = slave, addr = slave.addr }
            addrs = addrs .. string.format(',"1":"%s"', slave.addr)
        end
        datas[#datas + 1] = string.format(
            '{"brokerAddrs":{%s},"brokerName":"%s","cluster":"DefaultCluster"}', addrs, name)
        queues[#queues + 1] = string.format(
            '{"brokerName":"%s","perm":6,"readQueueNums":%d,"topicSysFlag":0,"writeQueueNums":%d}',
            name, opts.queues or 4, opts.queues or 4)
    end
    local body = string.format('{"brokerDatas":[%s],"filterServerTable":{},"queueDatas":[%s]}',
        table.concat(datas, ","), table.concat(queues, ","))
    local routes = { [opts.topic] = body, ["%RETRY%" .. (opts.group or "FxConsumerGroup")] = body }
    if opts.template ~= false then
        routes.TBW102 = body
    end
    c.namesrv = require("spec.support.fake_namesrv").start({ routes = routes })
    c.namesrv_addr = c.namesrv.addr
    return c
end

-- }}}

return M
