-- Broker, slave: keeps topic configs, consumer offsets, delay offsets and
-- subscription groups in step with the master (RocketMQ 4.9.8's
-- SlaveSynchronize, run by BrokerController.handleSlaveSynchronize).
--
-- The main thread of a brokerRole = SLAVE broker asks its master, 3 s
-- after start and then every slaveSynchronizePeriodMillis (10 s, what
-- 4.9.8 hard-codes), for
--
--   GET_ALL_TOPIC_CONFIG (21)              taken whole when its
--                                          DataVersion differs from ours
--   GET_ALL_CONSUMER_OFFSET (43)           every topic@group's queues
--                                          taken (Java's putAll)
--   GET_ALL_DELAY_OFFSET (45)              every level's offset taken
--   GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) as the topics
--
-- and writes them into the same shared tables every worker reads
-- (rmq.config_table, rmq.offset_table, the delay-offset map), which the
-- broker's persisters then write to disk.  The master's address is
-- rmq.broker.register.master_addr(): the one a role change named
-- (replica_role.change_to_slave, at once), else the one the NameServers
-- answered the slave's registration with (register.lua says which
-- wins); without one (no master alive) nothing is asked.  A new master
-- starts a round at once (register.MASTER_EVENT), as 5.x's
-- ReplicasManager restarts the slave synchronizer for its new master.
-- One request failing is logged once and does not stop the others.
--
-- Acting master (RIP-32): while the slave has no master, consumers commit
-- their offsets to it.  On the first round after a master is known again
-- the larger offset of each queue wins: the slave keeps its own where it
-- is ahead and sends it to the master (UPDATE_CONSUMER_OFFSET), so the
-- consumers that move back to the master go on from where they were.
--
--   slave_sync.sync_all(b) -> {topics=, offsets=, delay=, groups=}
--       one round now (the counts taken, or false when a request failed)
--   slave_sync.status() -> {masterAddr=, lastSync=, rounds=, failures=}
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local log = require("rmq.log")
local net = require("rmq.net")
local shared = require("rmq.shared")
local topics = require("rmq.broker.topics")
local groups = require("rmq.broker.groups")
local offsets = require("rmq.broker.offsets")
local credentials = require("rmq.client.credentials")
local register = require("rmq.broker.register")
local schedule = require("rmq.broker.schedule")

local M = {}

local req = codes.request

M.INITIAL_DELAY = 3000   -- BrokerController: the sync task's first delay

local meta = shared.map("broker.meta")
-- meta keys: sync.lastSync (wall ms of the last complete round),
-- sync.rounds, sync.failures, sync.acting ("1": rounds found no master
-- since the last reconcile)

local state = { stopped = true, failing = {} }

-- Signed with the conf's accessKey / secretKey, if any (a master with
-- aclEnable refuses an unsigned GET_ALL_* unless the slave's address is
-- whitelisted: 4.9.8's slave signs nothing).
local function call(b, addr, code)
    local timeout = b.conf.slaveSynchronizeTimeoutMillis or 3000
    local r, err = net.call(addr, { code = code, ext = {}, credentials = credentials.of(b.conf) }, timeout)
    if r == nil then
        return nil, tostring(err)
    end
    if r.code ~= 0 then
        return nil, ("code %d %s"):format(r.code, tostring(r.remark))
    end
    local doc, derr = fastjson.decode(r.body or "")
    if type(doc) ~= "table" then
        return nil, "the body is not JSON: " .. tostring(derr)
    end
    return doc
end

local function dv_of(doc)
    local dv = type(doc.dataVersion) == "table" and doc.dataVersion or {}
    return { counter = fastjson.int(dv.counter) or 0, timestamp = fastjson.int(dv.timestamp) or 0 }
end

local function same_dv(a, b)
    return a.counter == b.counter and a.timestamp == b.timestamp
end

-- Replaces a config table's content by the master's (normalize(name, raw)
-- -> cfg | nil, why), without a moment where a config that stays is
-- missing: changed ones are put, then the ones the master lacks go.
local function replace(mod, entries, normalize)
    local keep, n = {}, 0
    for name, raw in pairs(entries) do
        local cfg, why = normalize(tostring(name), raw)
        if cfg then
            mod.table:put(cfg, false, true)
            keep[cfg.topicName or cfg.groupName] = true
            n = n + 1
        else
            log.warn("slave sync: a config from the master skipped: %s", tostring(why))
        end
    end
    for name in pairs(mod.table:all()) do
        if not keep[name] then
            mod.table:del(name)
        end
    end
    return n
end

-- A config table (topics or groups) from its GET_ALL_* body: taken whole
-- when the master's DataVersion differs from ours (Java's
-- DataVersion.equals), with that DataVersion.
local function sync_table(b, addr, code, mod, field, normalize, what)
    local doc, err = call(b, addr, code)
    if doc == nil then
        return nil, err
    end
    local dv = dv_of(doc)
    if same_dv(dv, mod.data_version()) then
        return 0
    end
    local t0 = core.mono_ms()
    local n = replace(mod, type(doc[field]) == "table" and doc[field] or {}, normalize)
    mod.table:set_data_version(dv)
    net.raise(mod.PERSIST)
    log.info("slave sync: %d %s from master %s (DataVersion %d), applied in %d ms", n, what, addr,
             dv.counter, math.floor(core.mono_ms() - t0))
    return n
end

local function sync_topics(b, addr)
    return sync_table(b, addr, req.GET_ALL_TOPIC_CONFIG, topics, "topicConfigTable",
                      function(name, raw) return topics.normalize(name, raw) end, "topic configs")
end

local function sync_groups(b, addr)
    return sync_table(b, addr, req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, groups, "subscriptionGroupTable",
                      function(name, raw)
                          local cfg, why = groups.normalize(raw, name)
                          if cfg then
                              cfg.groupName = name
                          end
                          return cfg, why
                      end, "subscription groups")
end

-- Our offset of a queue to the master (UPDATE_CONSUMER_OFFSET): 1 when
-- it took it, 0 when it refused it (logged; a topic it no longer has,
-- say: asking again would not help), nil and why when it did not answer.
local function push(b, addr, group, topic, qid, off)
    local r, err = net.call(addr, { code = req.UPDATE_CONSUMER_OFFSET, ext = {
        consumerGroup = group, topic = topic, queueId = tostring(qid), commitOffset = tostring(off) },
        credentials = credentials.of(b.conf) },
        b.conf.slaveSynchronizeTimeoutMillis or 3000)
    if r and r.code == 0 then
        return 1
    end
    log.warn("slave sync: offset %s@%s:%d = %d not taken by master %s: %s", group, topic, qid, off, addr,
             r and ("code " .. r.code .. " " .. tostring(r.remark)) or tostring(err))
    if r == nil then
        return nil, tostring(err)
    end
    return 0
end

-- The master's offsets in ours; `reconcile`: the larger of each queue
-- wins and ours, where larger, goes to the master.
local function sync_offsets(b, addr, reconcile)
    local doc, err = call(b, addr, req.GET_ALL_CONSUMER_OFFSET)
    if doc == nil then
        return nil, err
    end
    local n, pushed = 0, 0
    -- A push the master did not answer ends the pushing of this round
    -- (each waits slaveSynchronizeTimeoutMillis; thousands of queues to a
    -- master that hangs would hold the round for hours): the round fails,
    -- so the next one reconciles again.
    local unanswered
    local function send(group, topic, qid, mine)
        if unanswered then
            return
        end
        local ok, why = push(b, addr, group, topic, qid, mine)
        if ok == nil then
            unanswered = why
        else
            pushed = pushed + ok
        end
    end
    local t = type(doc.offsetTable) == "table" and doc.offsetTable or {}
    for tg, queues in pairs(t) do
        local topic, group = tostring(tg):match("^(.-)@(.+)$")
        if topic and type(queues) == "table" then
            for q, off in pairs(queues) do
                local qid, o = fastjson.int(q), fastjson.int(off)
                if qid and o and qid >= 0 and qid < 65536 and o >= 0 then
                    local mine = reconcile and offsets.query(group, topic, qid)
                    if mine and mine > o then
                        send(group, topic, qid, mine)   -- ours stays, sent or not
                    else
                        offsets.commit(group, topic, qid, o)
                        n = n + 1
                    end
                end
            end
        end
    end
    if reconcile then
        -- Queues committed here only (the master never had them).
        local theirs = {}
        for tg in pairs(t) do
            theirs[tostring(tg)] = t[tg]
        end
        for tg, queues in pairs(offsets.table()) do
            local topic, group = tg:match("^(.-)@(.+)$")
            for qid, mine in pairs(queues) do
                local q = theirs[tg]
                if topic and mine > 0 and (q == nil or (q[qid] == nil and q[tostring(qid)] == nil)) then
                    send(group, topic, qid, mine)
                end
            end
        end
        if unanswered then
            return nil, ("offsets reconciled in part: %d taken, %d of ours sent, then the master did not answer "
                .. "(%s); the next round reconciles again"):format(n, pushed, unanswered)
        end
        log.info("slave sync: offsets reconciled with master %s: %d taken, %d of ours were larger and sent",
                 addr, n, pushed)
    end
    return n, pushed
end

local function sync_delay(b, addr)
    local doc, err = call(b, addr, req.GET_ALL_DELAY_OFFSET)
    if doc == nil then
        return nil, err
    end
    local n = 0
    for k, v in pairs(type(doc.offsetTable) == "table" and doc.offsetTable or {}) do
        local level, off = fastjson.int(k), fastjson.int(v)
        if level and off and level >= 1 and off >= 0 then
            schedule.set_offset(level, off)
            n = n + 1
        end
    end
    return n
end

local function logged(what, addr, r, err)
    if r == nil then
        if not state.failing[what] then
            log.warn("slave sync: %s from master %s failed: %s", what, addr, err)
        end
        state.failing[what] = true
        return false
    end
    if state.failing[what] then
        log.info("slave sync: %s from master %s works again", what, addr)
    end
    state.failing[what] = nil
    return r
end

--- One round (SlaveSynchronize.syncAll).  Returns what each part took,
--- or nil when there is no master to ask.
function M.sync_all(b)
    local addr = register.master_addr()
    if addr == nil or addr == b.addr then
        meta:set("sync.acting", "1")
        return nil
    end
    local reconcile = meta:get("sync.acting") ~= nil
    local out = {}
    out.topics = logged("topic configs", addr, sync_topics(b, addr))
    out.offsets = logged("consumer offsets", addr, sync_offsets(b, addr, reconcile))
    out.delay = logged("delay offsets", addr, sync_delay(b, addr))
    out.groups = logged("subscription groups", addr, sync_groups(b, addr))
    local ok = out.topics and out.offsets and out.delay and out.groups
    meta:set("sync.rounds", tostring(math.tointeger(tonumber(meta:get("sync.rounds") or "0") + 1)))
    if ok then
        meta:set("sync.lastSync", tostring(core.now_ms()))
        if reconcile then
            meta:del("sync.acting")
        end
    else
        meta:set("sync.failures", tostring(math.tointeger(tonumber(meta:get("sync.failures") or "0") + 1)))
        if not out.offsets then
            -- The master did not answer (killed before the NameServer told
            -- us): consumers may commit here meanwhile, as with no master;
            -- the next round that reaches it reconciles.
            meta:set("sync.acting", "1")
        end
    end
    return out
end

function M.status()
    return {
        masterAddr = register.master_addr(),
        lastSync = tonumber(meta:get("sync.lastSync") or ""),
        rounds = tonumber(meta:get("sync.rounds") or "0"),
        failures = tonumber(meta:get("sync.failures") or "0"),
        acting = meta:get("sync.acting") ~= nil,
    }
end

function M.main_init(b)
    for _, k in ipairs({ "sync.lastSync", "sync.rounds", "sync.failures", "sync.acting" }) do
        meta:del(k)
    end
end

-- An event key no topic@queueId can be: register raises it when the
-- master changes, main_stop when the server stops.
local WAKE = register.MASTER_EVENT

-- Waits ms, or less when the master changes or the server stops
-- meanwhile: a task still waiting at exit would hold the stop (and its
-- wait) for up to a period.
local function pause(ms)
    if not state.stopped then
        net.wait_event(WAKE, ms)
    end
end

-- The task runs on every broker and syncs only in the rounds its store
-- is a slave's: the role can change at run time (rmq.broker.replica_role:
-- controller mode, the live console), and 5.x's slave synchronizer
-- follows the role too.
function M.main_start(b)
    state.stopped = false
    local period = b.conf.slaveSynchronizePeriodMillis or 10000
    net.spawn(function()
        pause(math.min(M.INITIAL_DELAY, period))
        while not state.stopped do
            local master = register.master_addr()
            if (b.store:role()) == "SLAVE" then
                local ok, err = pcall(M.sync_all, b)
                if not ok then
                    log.error("slave sync: %s", tostring(err))
                end
            end
            -- (a master named during the round: its raise found no waiter)
            if register.master_addr() == master then
                pause(period)
            end
        end
    end)
end

function M.main_stop(b)
    state.stopped = true
    net.raise(WAKE)
end

function M.processors(b)
    return {}
end

return M
