-- Broker: PULL_MESSAGE (11), protocol.md 4.3, 6.6-6.8 (RocketMQ's
-- PullMessageProcessor and PullRequestHoldService).
--
-- The checks are Java's, in its order; the read is one store call
-- (st:get with the subscription's tag hash codes); the status table of
-- §4.3 maps the store status to the reply code, with the store status
-- name as the remark.  The body is the records userdata itself: the
-- reply encoder copies the mapped slices once, straight into the
-- connection's output (no Lua string is made).
--
-- Long polling: the pulls the C processor serves are held in C
-- (src/broker/pull_processor.h), with the rule below; the ones this
-- handler answers (a Lua pull filter's, those C hands over) are held
-- here.  A pull with FLAG_SUSPEND that finds nothing new (19) is
-- held: the handler's task waits on the event "topic@queueId", which the
-- send path raises after every stored message, in whichever worker.  It
-- re-reads when woken and answers as soon as there is something for the
-- subscription; a wake-up by messages that do not match the tags keeps
-- it waiting (Java re-runs only on a matching tag code).  When the hold
-- time passes it answers whatever a last read finds, without suspending.
-- The hold time is the client's suspendTimeoutMillis (longPollingEnable)
-- or shortPollingTimeMills, capped below the Java client's 30 s RPC
-- timeout.  The wait is cut in slices of pullHoldRecheckMillis after which the
-- queue's max offset is checked again: that closes the window where a
-- message lands between the read and the start of the wait (Java's hold
-- service sweeps every 5 s for the same reason), and lets a broker that
-- is shutting down answer its held pulls at once.
--
-- Offsets: with FLAG_COMMIT_OFFSET, a master stores commitOffset on the
-- first processing, held or not (never on the re-run).
--
-- suggestWhichBrokerId is the slave-read policy's answer (slaveReadPolicy,
-- rmq.policy.slave_read by default: 4.9.8's rule), given the facts the
-- policy module documents.  slaveReadEnable and slaveReadPolicy may be
-- changed by UPDATE_BROKER_CONFIG: the next pull reply follows.  A slave
-- that may not be read (slaveReadEnable off) still serves what it has and
-- suggests the master, as 4.9.8 does (its PULL_RETRY_IMMEDIATELY for
-- such a slave is overwritten by the read's own code): answering
-- PULL_RETRY_IMMEDIATELY with the read's nextBeginOffset made a consumer
-- skip every message it did not get (the client takes it as
-- NO_MATCHED_MSG and moves on), e.g. while its master was down.
local core = require("rmq.core")
local codes = require("rmq.codes")
local filter = require("rmq.broker.filter")
local clients = require("rmq.broker.clients")
local offsets = require("rmq.broker.offsets")
local log = require("rmq.log")
local metrics = require("rmq.metrics")
local net = require("rmq.net")
local policy = require("rmq.policy")
local shared = require("rmq.shared")
local fastjson = require("rmq.fastjson")
local message = require("rmq.message")
local header = require("rmq.header")
local processors = require("rmq.processors")
local native = require("rmq.native")
local tables = require("rmq.broker.tables")

local M = {}

local R = codes.response

M.FLAG_COMMIT_OFFSET = 0x1
M.FLAG_SUSPEND = 0x2
M.FLAG_SUBSCRIPTION = 0x4
M.FLAG_CLASS_FILTER = 0x8
M.FLAG_LITE_PULL = 0x10

-- Hold limits are conf keys: pullHoldRecheckMillis (re-check a held
-- pull's queue at least this often) and brokerSuspendMaxTimeMillis
-- (never hold longer: the Java client gives up after 30 s).

-- Store status -> reply code (protocol.md 4.3, step 5), and the statuses
-- after which st:get scanned consume queue entries (so its last scanned
-- physical offset means something for the slave policy): the one table,
-- shared with the C pull processor (rmq.codes, docs/request-codes.md).
local STATUS_CODE, SCANNED = codes.get_status, codes.get_scanned

-- Set by the main thread at shutdown: held pulls answer at their next
-- re-check instead of holding the process open.
local state = shared.map("broker.pull")

-- PullMessageRequestHeader (protocol.md 4.3), read by dispatch.  A
-- FastCodesHeader in Java: a number that does not parse is refused; the
-- fields Java unboxes are required here, commitOffset,
-- suspendTimeoutMillis and subVersion default to 0.  queueOffset may be
-- any long (below the queue's minimum it is OFFSET_TOO_SMALL, as in
-- Java); queueId < 0 is refused below with Java's remark.
M.HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
    { "queueOffset", "long", true },
    { "maxMsgNums", "int", true },
    { "sysFlag", "int", true },
    { "commitOffset", "long", false, default = 0 },
    { "suspendTimeoutMillis", "long", false, default = 0 },
    { "subscription", "string", false },
    { "subVersion", "long", false, default = 0 },
    { "expressionType", "string", false },
})

function M.processors(b)
    local conf = b.conf
    local st, groups = b.store, b.groups
    -- The role at run time (a controller may switch it): the store's.
    local function is_slave()
        return (st:role()) == "SLAVE"
    end
    local memory = core.total_memory()
    local default_suggest = require("rmq.policy.slave_read").suggest
    local suggest = assert(policy.resolve(conf.slaveReadPolicy, "suggest", "rmq.policy.slave_read"))
    local builtin = suggest == default_suggest
    local policies = { [conf.slaveReadPolicy or "rmq.policy.slave_read"] = suggest }
    local policies_gen = policy.generation()   -- a live swap empties the cache
    -- Replication figures for a policy other than the default (which
    -- does not read them): rmq.ha's, from any worker.
    local function ha_facts()
        local h = shared.get_handle("broker.ha")
        if h == nil then
            return nil
        end
        local hs = require("rmq.ha").stats(h)
        if is_slave() then
            return { slaveAckOffset = hs.rawEnd, slaveLagBytes = math.max(0, (hs.masterOffset or 0) - (hs.rawEnd or 0)),
                     slaveConnected = hs.connected == true }
        end
        return { slaveAckOffset = hs.acked, slaveLagBytes = math.max(0, (hs.maxPhy or 0) - (hs.acked or 0)),
                 slaveConnected = (hs.conns or 0) > 0 }
    end
    local ratio = conf.accessMessageInMemoryMaxRatio or 40
    local long_polling = conf.longPollingEnable ~= false
    local short_polling = conf.shortPollingTimeMills or 1000
    local broker_name = conf.brokerName

    -- OffsetMovedEvent into OFFSET_MOVED_EVENT (a master, on 21).
    local function offset_moved_event(group, topic, qid, requested, new)
        local body = fastjson.encode({
            consumerGroup = group,
            messageQueue = { brokerName = broker_name, queueId = qid, topic = topic },
            offsetNew = new, offsetRequest = requested,
        })
        local props = message.edit_properties("", { "DELAY", "0", "KEYS", group, "TAGS", group })
        local status = st:put({ topic = "OFFSET_MOVED_EVENT", queueId = 0, body = body,
                                properties = props, tags = group, wait = false })
        if status == "PUT_OK" then
            net.raise("OFFSET_MOVED_EVENT@0")
        end
    end

    -- The slaveReadPolicy in force (conf synced by the caller): its suggest.
    local function current_suggest()
        local name = conf.slaveReadPolicy or "rmq.policy.slave_read"
        if policy.generation() ~= policies_gen then
            policies, policies_gen = {}, policy.generation()
        end
        local fn = policies[name]
        if fn == nil then
            local err
            fn, err = policy.resolve(name, "suggest", "rmq.policy.slave_read")
            if fn == nil then
                log.warn("slaveReadPolicy %s: %s; using rmq.policy.slave_read", tostring(name), tostring(err))
                fn = default_suggest
            end
            policies[name] = fn
        end
        return fn
    end

    -- suggestWhichBrokerId: fn's answer to the facts (the policy module
    -- documents them; a policy other than the default also gets the
    -- replication figures); the master when it fails.
    local function ask(fn, facts)
        if fn ~= default_suggest then
            for k, v in pairs(ha_facts() or {}) do
                facts[k] = v
            end
        end
        local ok, which = pcall(fn, facts)
        if not ok or math.type(which) ~= "integer" or which < 0 then
            log.warn("slaveReadPolicy %s answered %s: suggesting the master",
                     tostring(conf.slaveReadPolicy), tostring(which))
            which = 0
        end
        return which
    end

    -- One read of the queue, mapped to the reply (protocol.md 4.3 step 5).
    local function read(p)
        local status, recs, next_off, min, max, max_phy, last_phy, _, calls, dropped, ferr, nanos =
            st:get(p.topic, p.qid, p.offset, p.max, p.codes, p.match, p.body)
        if p.pf then
            filter.account(conf, p.pf, calls, dropped, ferr, nanos)
        end
        local code = STATUS_CODE[status]
        if code == nil then
            -- NO_MATCHED_LOGIC_QUEUE / NO_MESSAGE_IN_QUEUE
            code = p.offset ~= 0 and R.PULL_OFFSET_MOVED or R.PULL_NOT_FOUND
        end
        local facts = {
            slaveReadEnable = p.slave_read,
            maxPhyOffset = max_phy,
            lastPhyOffset = SCANNED[status] and last_phy or max_phy,
            physicalMemory = memory,
            accessMessageInMemoryMaxRatio = ratio,
            whichBrokerWhenConsumeSlowly = p.group_cfg.whichBrokerWhenConsumeSlowly or 1,
            groupBrokerId = p.group_cfg.brokerId or 0,
            group = p.group, topic = p.topic, queueId = p.qid,
            slave = is_slave(),
        }
        local which = ask(p.suggest, facts)
        if code == R.PULL_OFFSET_MOVED and is_slave() then
            -- A slave does not correct offsets: retry, from the master.
            code = R.PULL_RETRY_IMMEDIATELY
            which = p.group_cfg.brokerId or 0
        end
        local answer = {
            code = code, remark = status,
            ext = { suggestWhichBrokerId = which, nextBeginOffset = next_off,
                    minOffset = min, maxOffset = max },
        }
        if recs then
            if code == R.SUCCESS then
                -- The records themselves: C copies them from the mapped
                -- commit log straight into the connection's output.
                answer.body = recs
                metrics.messages_out(p.topic, p.group, #recs, recs:size(), p.qid, next_off)
            else
                recs:release()
            end
        end
        return answer
    end

    local function hold(ctx, p, hold_ms)
        local key = p.topic .. "@" .. p.qid
        local deadline = core.mono_ms() + hold_ms
        -- The first slice is cut at random in [recheck/2, recheck]: pulls
        -- held together (thousands, from a flood or a restart) then do
        -- not all re-check in the same millisecond, every slice after.
        local slice = conf.pullHoldRecheckMillis * (0.5 + math.random() / 2)
        while true do
            local left = deadline - core.mono_ms()
            if left <= 0 or state:get("stopping") then
                break
            end
            local raised = net.wait_event(key, math.ceil(math.min(left, slice)))
            slice = conf.pullHoldRecheckMillis
            if ctx.closed then
                return nil
            end
            if raised or st:max_offset(p.topic, p.qid) > p.offset then
                local answer = read(p)
                if answer.code ~= R.PULL_NOT_FOUND and answer.code ~= R.PULL_RETRY_IMMEDIATELY then
                    return answer
                end
            end
        end
        if ctx.closed then
            return nil
        end
        return read(p)
    end

    local np   -- the C processor (below)

    -- A pull C hands back: a topic with a Lua pull filter
    -- (conf.pullFilters; filterSupportRetry's retry topics), after C's
    -- checks (every refusal is C's: pull_processor.c).  The read, with
    -- the filter, and its hold are here.
    local function pull(ctx, cmd, h)
        if native.run(np, ctx, cmd) then
            return nil
        end
        tables.sync_conf(conf)
        local group, topic, qid, offset, max, sys_flag = h.consumerGroup, h.topic, h.queueId,
            h.queueOffset, h.maxMsgNums, h.sysFlag
        local g = assert(groups.find(conf, group))
        local suspend = (sys_flag & M.FLAG_SUSPEND) ~= 0
        local commit = (sys_flag & M.FLAG_COMMIT_OFFSET) ~= 0
        local sub
        if (sys_flag & M.FLAG_SUBSCRIPTION) ~= 0 then
            sub = assert(filter.build(topic, h.subscription, h.expressionType))
        else
            sub = assert(clients.find_subscription(group, topic))
        end
        local sql
        if sub.expressionType ~= "TAG" then
            sql = assert(filter.compile_sql(conf, sub.expressionType, sub.subString))
        end
        local class_filter = (sys_flag & M.FLAG_CLASS_FILTER) ~= 0 or sub.classFilterMode
        local match = not class_filter and sql or nil
        if match == nil and conf.filterSupportRetry and topic:sub(1, 7) == "%RETRY%" then
            -- ExpressionForRetryMessageFilter: each retried message is
            -- judged by the group's filter of its real topic.
            match = filter.retry_matcher(conf, group)
        end
        local pf = filter.pull_filter(conf, topic, group)
        local body = false
        if pf then
            local fn, sql_match = pf.fn, match
            body = pf.body
            if sql_match == nil then
                match = fn
            elseif type(sql_match) == "function" then
                match = function(props, tags, size, bytes)
                    return sql_match(props) and fn(props, tags, size, bytes)
                end
            else
                match = function(props, tags, size, bytes)
                    return sql_match:eval(props) == "TRUE" and fn(props, tags, size, bytes)
                end
            end
        end
        local fn = current_suggest()
        local p = {
            suggest = fn, slave_read = conf.slaveReadEnable == true,
            group = group, topic = topic, qid = qid, offset = offset,
            max = math.max(1, math.min(max, 65536)),
            codes = filter.codes(sub, (sys_flag & M.FLAG_CLASS_FILTER) ~= 0),
            group_cfg = g, match = match, body = body, pf = pf,
        }
        local answer = read(p)
        if commit and not is_slave() then
            offsets.commit(group, topic, qid, h.commitOffset)
        end
        if answer.code == R.PULL_NOT_FOUND and suspend then
            local hold_ms = long_polling and h.suspendTimeoutMillis or short_polling
            hold_ms = math.min(hold_ms, conf.brokerSuspendMaxTimeMillis)
            if hold_ms > 0 then
                return hold(ctx, p, hold_ms)
            end
        elseif answer.code == R.PULL_OFFSET_MOVED and not is_slave() then
            log.warn("PULL_OFFSET_MOVED: correction offset. topic=%s, groupId=%s, requestOffset=%d, newOffset=%s",
                     topic, group, offset, tostring(answer.ext.nextBeginOffset))
            offset_moved_event(group, topic, qid, offset, answer.ext.nextBeginOffset)
        end
        return answer
    end

    -- The common case in C (rmq.processors.pull): a pull the checks above
    -- pass, answered at once; `pull` gets the rest (refusals, holds,
    -- corrected offsets).  Its slave-read suggestion is a decision: C
    -- calls `suggest` below with the facts, except when the answer is
    -- known (the built-in policy with slaveReadEnable off: the master).
    -- Topics with a Lua pull filter (conf.pullFilters) and, with
    -- filterSupportRetry, retry topics stay here too: the C processor
    -- hands them over before reading.
    do
        local lua_topics = {}
        for key in pairs(conf.pullFilters or {}) do
            lua_topics[#lua_topics + 1] = key:match("^(.-)@") or key
        end
        np = processors.pull({
            store = st, header = M.HEADER, brokerPermission = conf.brokerPermission, ip = b.ip,
            brokerName = broker_name,
            slaveReadEnable = conf.slaveReadEnable == true, memory = memory,
            accessMessageInMemoryMaxRatio = ratio, luaTopics = lua_topics,
            luaRetryTopics = conf.filterSupportRetry == true,
            enablePropertyFilter = conf.enablePropertyFilter == true,
            filterExpressionMaxLength = conf.filterExpressionMaxLength,
            filterExpressionMaxDepth = conf.filterExpressionMaxDepth,
            filterExpressionMaxNodes = conf.filterExpressionMaxNodes,
            filterCompiledCacheSize = math.min(conf.filterCompiledCacheSize, 256),
            slaveReadPolicyBuiltin = builtin,
            -- The long poll held in C (pull_processor.h): the same keys
            -- as `hold` above, for the pulls C serves.
            longPollingEnable = long_polling, shortPollingTimeMills = short_polling,
            brokerSuspendMaxTimeMillis = conf.brokerSuspendMaxTimeMillis,
            pullHoldRecheckMillis = conf.pullHoldRecheckMillis,
            suggest = function(facts)
                tables.sync_conf(conf)
                return ask(current_suggest(), facts)
            end,
            -- A decision too: a group the table does not have is created
            -- (autoCreateSubscriptionGroup) and C serves the pull.
            createGroup = function(group)
                tables.sync_conf(conf)
                return groups.find(conf, group) ~= nil
            end,
        })
    end
    return {
        [codes.request.PULL_MESSAGE] = { header = M.HEADER, run = pull, native = np },
    }
end

--- Main thread, at SIGTERM: held pulls answer at their next re-check.
function M.main_stop(b)
    state:set("stopping", "1")
end

function M.main_init(b)
    state:del("stopping")
end

return M
