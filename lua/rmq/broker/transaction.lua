-- Transactions (half messages), as RocketMQ 4.9.8's
-- TransactionalMessageServiceImpl, TransactionalMessageBridge,
-- EndTransactionProcessor and TransactionalMessageCheckService do them
-- (protocol.md 4.11, 6.4):
--
-- Half: a send whose properties say TRAN_MSG=true is stored by
-- send.lua through M.to_half: topic RMQ_SYS_TRANS_HALF_TOPIC queue 0,
-- REAL_TOPIC / REAL_QID added, the sysFlag transaction bits reset, so the
-- half topic's consume queue indexes it and no consumer of the real topic
-- sees it.  The reply names the real queue and the half queue offset.
--
-- END_TRANSACTION (37, workers): commit reads the half record at
-- commitLogOffset, checks it (a record of the half topic, PGROUP =
-- producerGroup, its queue offset = tranStateTableOffset), and puts the
-- real message: REAL_TOPIC / REAL_QID, sysFlag commit (8),
-- preparedTransactionOffset = the half's offset, the half's properties
-- string as is (4.9.8 serialises it before it clears REAL_* and
-- TRAN_MSG, so the stored copy keeps them: the Java consumer reads
-- TRAN_MSG, and UNIQ_KEY keeps the client's msgId).  Commit and rollback
-- then record the decision as an op message in RMQ_SYS_TRANS_OP_HALF_TOPIC
-- (queue 0, tag "d", body = the half's queue offset in decimal).  A half
-- message decided once is refused a second decision (broker.transaction
-- shared map, claimed atomically; 4.9.8 would deliver a second commit
-- twice; at most transactionDecidedMax are remembered until the checker
-- passes them).  A slave answers SLAVE_NOT_AVAILABLE; commitOrRollback 0
-- (unknown) gets no reply, as in 4.9.8, and leaves it to the checker.
--
-- Check (main thread, masters): every transactionCheckInterval ms one
-- pass over the half queue from CID_RMQ_SYS_TRANS's offset: the op queue
-- is read from its offset first; a half with an op is passed; one checked
-- transactionCheckMax times already is moved to TRANS_CHECK_MAX_TIME_TOPIC
-- (as 5.x does; 4.9.8 only logs it); one older than fileReservedTime is
-- dropped; the pass stops at the first half younger than
-- transactionTimeOut (or its CHECK_IMMUNITY_TIME_IN_SECONDS; 4.9.8 re-puts
-- a young immune half to the end instead, rmq waits for it); the others
-- are put again at the end of the half queue with TRANSACTION_CHECK_TIMES
-- + 1 and CHECK_TRANSACTION_STATE (39, one-way) goes to one live producer
-- connection of the PGROUP (any worker: net.send_to), with the copy's
-- offsets, so the producer's END_TRANSACTION names the copy.  The half
-- and op offsets are consumer offsets of CID_RMQ_SYS_TRANS in
-- consumerOffset.json: the op offset only moves past ops whose half the
-- half offset has passed, so a restart re-reads every decision it still
-- needs and every half message not yet decided.
local codes = require("rmq.codes")
local core = require("rmq.core")
local header = require("rmq.header")
local log = require("rmq.log")
local message = require("rmq.message")
local metrics = require("rmq.metrics")
local names = require("rmq.names")
local net = require("rmq.net")
local reply = require("rmq.reply")
local shared = require("rmq.shared")
local clients = require("rmq.broker.clients")
local offsets = require("rmq.broker.offsets")
local schedule = require("rmq.broker.schedule")
local wheel = require("rmq.broker.timer")
local topics = require("rmq.broker.topics")

local M = {}

local R = codes.response

M.HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
M.OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
M.MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
M.GROUP = "CID_RMQ_SYS_TRANS"
M.REMOVE_TAG = "d"
M.BATCH = 32

-- MessageSysFlag transaction values (protocol.md 5.3).
M.TYPE_MASK, M.NOT_TYPE, M.PREPARED, M.COMMIT, M.ROLLBACK = 0xC, 0, 0x4, 0x8, 0xC

local STORED = codes.put_stored   -- the put statuses after which the message is stored
-- A commit the store did not take (EndTransactionProcessor.sendFinalMessage).
local ILLEGAL = { R.MESSAGE_ILLEGAL, "The message is illegal, maybe msg body or properties length not matched. "
                  .. "msg body length limit 128k, msg properties length limit 32k." }
local FINAL_REFUSAL = {
    MESSAGE_ILLEGAL = ILLEGAL, PROPERTIES_SIZE_EXCEEDED = ILLEGAL,
    SERVICE_NOT_AVAILABLE = { R.SERVICE_NOT_AVAILABLE, "Service not available now." },
    CREATE_MAPEDFILE_FAILED = { R.SYSTEM_ERROR, "Create mapped file failed." },
    OS_PAGECACHE_BUSY = { R.SYSTEM_ERROR, "OS page cache busy, please try another machine" },
    UNKNOWN_ERROR = { R.SYSTEM_ERROR, "UNKNOWN_ERROR" },
}

-- Half commit log offset -> "commit" | "rollback" (or "deciding" while a
-- worker puts it): decisions of this run the checker has not passed yet.
local decided = shared.map("broker.transaction")
-- A system topic of one queue, made when first needed.
local function ensure(topic)
    if topics.get(topic) == nil then
        topics.ensure(topic, 1)
    end
end

--- Makes the half topic if missing (the C send path's halfTopic hook).
function M.ensure_half()
    ensure(M.HALF_TOPIC)
end

--- Java's Boolean.parseBoolean of TRAN_MSG: a prepared message.
function M.is_prepared(props_string)
    local v = message.property(props_string or "", "TRAN_MSG")
    return v ~= nil and v:lower() == "true"
end

--- Turns a send's put (st:put's table) into the half message
--- (TransactionalMessageBridge.parseHalfMessageInner).  Returns msg.
function M.to_half(msg)
    msg.properties = message.edit_properties(msg.properties or "", {
        "REAL_TOPIC", msg.topic, "REAL_QID", tostring(msg.queueId) })
    msg.sysFlag = (msg.sysFlag or 0) & ~M.TYPE_MASK
    msg.topic = M.HALF_TOPIC
    msg.queueId = 0
    ensure(M.HALF_TOPIC)
    return msg
end

-- st:put that never raises: status, reason / phy, qoff, ...
local function put(st, msg)
    local r = table.pack(pcall(st.put, st, msg))
    if not r[1] then
        return "PUT_RAISED", tostring(r[2])
    end
    return table.unpack(r, 2, r.n)
end

local queue_id = schedule.queue_id   -- a REAL_QID: digits only, int32

-- makeOpMessageInner's properties: new Message(topic, "d", body).
local OP_PROPS = message.edit_properties("", { "TAGS", M.REMOVE_TAG, "WAIT", "true" })

-- The op message recording a decision (putOpMessage).
local function put_op(st, half)
    ensure(M.OP_TOPIC)
    local status, why = put(st, {
        topic = M.OP_TOPIC, queueId = half.queueId, body = tostring(half.queueOffset),
        properties = OP_PROPS, tags = M.REMOVE_TAG, wait = false,
    })
    if not STORED[status] then
        return nil, ("%s %s"):format(tostring(status), tostring(why))
    end
    net.raise(M.OP_TOPIC .. "@" .. half.queueId)
    return true
end

-- {{{ END_TRANSACTION

M.END_HEADER = header.compile({
    { "producerGroup", "string", true },
    { "tranStateTableOffset", "long", true, min = 0 },
    { "commitLogOffset", "long", true, min = 0 },
    { "commitOrRollback", "int", true },
    { "fromTransactionCheck", "bool", false },
    { "msgId", "string", true },
    { "transactionId", "string", false },
})

local FIND_FAILED = "Find prepared transaction message failed"

-- The half record the request names (getHalfMessageByOffset and
-- checkPrepareMessage), or nil and a refusal.
local function half_of(st, h)
    local recs = st:message(h.commitLogOffset)
    if recs == nil then
        return nil, reply.system_error(FIND_FAILED)
    end
    local raw = recs:get(1)
    recs:release()
    local ok, rec = pcall(message.decode_record, raw)
    if not ok or rec == nil or rec.topic ~= M.HALF_TOPIC then
        -- An offset inside or outside some record that is not a half
        -- message: nothing to decide.
        return nil, reply.system_error(FIND_FAILED)
    end
    if rec.properties.PGROUP ~= h.producerGroup then
        return nil, reply.system_error("The producer group wrong")
    end
    if rec.queueOffset ~= h.tranStateTableOffset then
        return nil, reply.system_error("The transaction state table offset wrong")
    end
    if rec.commitLogOffset ~= h.commitLogOffset then
        return nil, reply.system_error("The commit log offset wrong")
    end
    -- The half queue's own unit at tranStateTableOffset is the only
    -- proof the offset starts a record the broker wrote there: the store
    -- read above accepts any offset whose bytes look like a record, so a
    -- producer could plant one inside an ordinary message's body and name
    -- its offset (every field of that record is the producer's to write).
    local _, _, units = st:cq_units(M.HALF_TOPIC, 0, h.tranStateTableOffset, 1)
    local unit = units and units[1]
    if unit == nil or unit.physicOffset ~= h.commitLogOffset
        or unit.physicSize ~= #raw then
        return nil, reply.system_error(FIND_FAILED)
    end
    return rec
end

-- The committed message (endMessageTransaction), or nil and why not.
local function committed(rec, h)
    local topic = rec.properties.REAL_TOPIC
    local qid = queue_id(rec.properties.REAL_QID)
    if topic == nil or names.topic(topic) or qid == nil then
        return nil, "the half message has no valid REAL_TOPIC / REAL_QID"
    end
    -- 4.9.8's store would write any topic/queue it is given; rmq commits
    -- only into a queue that exists now (the topic may have been deleted
    -- or shrunk since the half message was sent).
    local cfg = topics.get(topic)
    if cfg == nil then
        return nil, ("the half message's topic %s does not exist"):format(names.show(topic))
    end
    if qid >= math.max(cfg.readQueueNums or 0, cfg.writeQueueNums or 0) then
        return nil, ("the half message's queue %s@%d does not exist"):format(names.show(topic), qid)
    end
    return {
        topic = topic, queueId = qid, body = rec.body, flag = rec.flag,
        properties = rec.propertiesString,
        tags = rec.properties.TAGS or "",
        bornTimestamp = rec.bornTimestamp, bornHost = rec.bornHost, storeHost = rec.storeHost,
        reconsumeTimes = rec.reconsumeTimes,
        sysFlag = (rec.sysFlag & ~M.TYPE_MASK) | M.COMMIT,
        preparedTransactionOffset = h.commitLogOffset,
        wait = rec.properties.WAIT ~= "false",
    }
end

local function end_transaction(b, ctx, h)
    local st = b.store
    local what = h.commitOrRollback
    if what == M.NOT_TYPE then
        return nil   -- 4.9.8: no reply; the checker will ask again
    end
    local name = what == M.COMMIT and "commit" or what == M.ROLLBACK and "rollback" or nil
    if name == nil then
        log.warn("END_TRANSACTION from %s: commitOrRollback %d is none of 0, 8, 12",
                 tostring(ctx.peer), what)
        return reply.system_error(("commitOrRollback %d is not 0 (unknown), 8 (commit) or 12 (rollback)")
            :format(what))
    end
    local rec, refusal = half_of(st, h)
    if rec == nil then
        log.warn("END_TRANSACTION %s from %s (group %s, msgId %s, offset %d, queue offset %d) refused: %s",
                 name, tostring(ctx.peer), names.show(h.producerGroup), names.show(h.msgId), h.commitLogOffset,
                 h.tranStateTableOffset, refusal.remark)
        return refusal
    end
    local key = tostring(rec.commitLogOffset)
    local claimed = decided:set(key, "deciding", true)
    local passed = offsets.query(M.GROUP, M.HALF_TOPIC, 0)
    if claimed and passed and rec.queueOffset < passed then
        -- The checker has passed it: decided, discarded, or put again
        -- with a check sent, which the producer answers for the copy.
        decided:del(key)
        log.warn("END_TRANSACTION %s from %s for %s: the half message was checked or decided already",
                 name, tostring(ctx.peer), names.show(h.msgId))
        return reply.system_error(("the transaction of message %s is already decided or being checked again")
            :format(names.show(h.msgId)))
    end
    if not claimed then
        local was = decided:get(key) or "deciding"
        log.warn("END_TRANSACTION %s from %s for %s: already decided (%s)", name, tostring(ctx.peer),
                 names.show(h.msgId), was)
        return reply.system_error(("the transaction of message %s is already decided (%s)")
            :format(names.show(h.msgId), was))
    end
    local ans = reply.ok()
    if what == M.COMMIT then
        local msg, why = committed(rec, h)
        if msg == nil then
            -- No commit of this half message can ever be stored: discard
            -- it (its op message) so the checker does not ask again.
            log.warn("END_TRANSACTION commit of %s refused, the half message is discarded: %s",
                     names.show(h.msgId), why)
            local ok, err = put_op(st, rec)
            if not ok then
                log.error("transaction %s discard: the op message was not stored: %s", names.show(h.msgId), err)
            end
            if decided:count() <= b.conf.transactionDecidedMax then
                decided:set(key, "discarded")
            else
                decided:del(key)
            end
            return reply.system_error(why)
        end
        -- A timer message committed (RIP-43): held in the timer topic until
        -- its time, as 5.x's put hook holds a committed one (C's rule,
        -- store/timer.h); a time already past is delivered now.  A rule
        -- refusal here (timerWheelEnable turned off since the half was
        -- sent, which C's send rule checked) delivers it now: the half
        -- message was acknowledged, it is never dropped.
        if msg.properties:find("TIMER_", 1, true) then
            local held, bucket, hold_why = st:timer_hold(msg.properties, msg.topic, msg.queueId)
            if held then
                msg.topic, msg.queueId, msg.properties = wheel.TOPIC, 0, held
                msg.tags, msg.tagsCode = nil, bucket
            elseif held == false then
                log.warn("END_TRANSACTION commit of %s: its timer is not held (%s), delivered now",
                         names.show(h.msgId), tostring(hold_why))
            end
        end
        local status, phy_or_reason, _, wrote = put(st, msg)
        if not STORED[status] then
            decided:del(key)
            log.error("END_TRANSACTION commit of %s not stored: %s %s", names.show(h.msgId), tostring(status),
                      tostring(phy_or_reason))
            local answer = FINAL_REFUSAL[status] or FINAL_REFUSAL.UNKNOWN_ERROR
            return reply.error(answer[1], answer[2])
        end
        -- A flush or slave timeout still stored it: SUCCESS, as 4.9.8's
        -- sendFinalMessage answers.
        metrics.messages_in(msg.topic, 1, wrote)
        net.raise(msg.topic .. "@" .. msg.queueId)
    end
    local ok, err = put_op(st, rec)
    if decided:count() <= b.conf.transactionDecidedMax then
        decided:set(key, name)
    else
        decided:del(key)   -- bounded: past the cap, 4.9.8's behaviour
    end
    if not ok then
        -- The decision stands for this run (the map); after a restart the
        -- checker would ask the producer again, as 4.9.8 would.
        log.error("transaction %s %s: the op message was not stored: %s", names.show(h.msgId), name, err)
    end
    return ans
end

-- }}}

function M.processors(b)
    return {
        [codes.request.END_TRANSACTION] = {
            header = M.END_HEADER,
            run = function(ctx, _, h)
                if (b.store:role()) == "SLAVE" then   -- (the role at run time)
                    log.warn("END_TRANSACTION from %s refused: this broker is a slave", tostring(ctx.peer))
                    return reply.error(R.SLAVE_NOT_AVAILABLE,
                                       "Message store is slave mode, so end transaction is forbidden.")
                end
                return end_transaction(b, ctx, h)
            end,
        },
    }
end

-- {{{ Check service (main thread)

-- The record i of a get, decoded, or nil.
local function decode(raw)
    local ok, rec = pcall(message.decode_record, raw)
    if ok then
        return rec
    end
    return nil
end

-- The fixed fields of a record without decoding it all (protocol.md
-- 5.1): queue offset, commit log offset, the body.  nil when too short.
local function head(raw)
    if #raw < 91 then
        return nil
    end
    local qoff, phy, sys = string.unpack(">i8i8i4", raw, 21)
    local pos = 49 + ((sys & 0x10) ~= 0 and 20 or 8) + 8 + ((sys & 0x20) ~= 0 and 20 or 8) + 12
    if pos + 3 > #raw then
        return nil
    end
    local blen = string.unpack(">i4", raw, pos)
    if blen < 0 or pos + 4 + blen - 1 > #raw then
        return nil
    end
    return qoff, phy, raw:sub(pos + 4, pos + 3 + blen)
end
M.head = head

-- The op queue read lazily from `from`: r.done[half offset] = op offset
-- for the ops of half messages at or past `floor` (the others are done
-- with); r.more() reads one batch, false at the end or with `cap`
-- entries held; r.off is the first op not read yet.
local function op_reader(st, from, floor, cap)
    local r = { off = from, done = {}, n = 0, ended = false, batches = 0 }
    function r.more()
        if r.ended or r.n >= cap then
            return false
        end
        local status, recs, next_off = st:get(M.OP_TOPIC, 0, r.off, M.BATCH)
        if recs then
            if status == "FOUND" then
                for i = 1, #recs do
                    local qoff, _, body = head(recs:get(i))
                    local half = qoff and math.tointeger(tonumber(body))
                    if half and half >= floor and r.done[half] == nil then
                        r.done[half] = qoff
                        r.n = r.n + 1
                    end
                end
            end
            recs:release()
        end
        if next_off == nil or next_off <= r.off then
            r.ended = true
            return false
        end
        r.off = next_off
        r.batches = r.batches + 1
        if r.batches % 32 == 0 then
            net.sleep(0)   -- let the main loop's other timers run
        end
        return true
    end
    function r.take(half)
        if r.done[half] then
            r.done[half] = nil
            r.n = r.n - 1
            return true
        end
        return false
    end
    return r
end

-- The check request's body: the record with topic and queue replaced by
-- REAL_TOPIC / REAL_QID, TOTALSIZE recomputed (protocol.md 4.11).
function M.check_body(raw, rec, topic, qid)
    local props = rec.propertiesString
    local tail = 1 + #rec.topic + 2 + #props
    local body_end = #raw - tail
    local out = raw:sub(5, 12) .. string.pack(">i4", qid) .. raw:sub(17, body_end)
        .. string.pack(">B", #topic) .. topic .. string.pack(">I2", #props) .. props
    return string.pack(">i4", #out + 4) .. out
end

-- CHECK_TRANSACTION_STATE to one live producer connection of the group.
local function send_check(rec, raw)
    local group = rec.properties.PGROUP
    local topic = rec.properties.REAL_TOPIC
    local qid = queue_id(rec.properties.REAL_QID)
    if group == nil or topic == nil or qid == nil then
        return false, "no PGROUP / REAL_TOPIC / REAL_QID"
    end
    local uniq = rec.properties.UNIQ_KEY
    local cmd = {
        code = codes.request.CHECK_TRANSACTION_STATE,
        ext = {
            tranStateTableOffset = tostring(rec.queueOffset),
            commitLogOffset = tostring(rec.commitLogOffset),
            msgId = uniq, transactionId = uniq,
            offsetMsgId = rec.offsetMsgId,
        },
        body = M.check_body(raw, rec, topic, qid),
    }
    local ids = {}
    for id in pairs(clients.producer_members(group) or {}) do
        ids[#ids + 1] = id
    end
    -- Any live channel (ProducerManager.getAvailableChannel); spread the
    -- checks over them.
    for _ = 1, #ids do
        local i = math.random(1, #ids)
        local id = ids[i]
        local ok, err = net.send_to(math.tointeger(tonumber(id)), cmd)
        if ok then
            return true
        end
        if err == "no such connection" then
            clients.remove_member("producer", group, id)
        end
        table.remove(ids, i)
    end
    return false, "no live producer of group " .. group
end

-- A copy of the half record at the end of the half queue
-- (renewHalfMessageInner), with `edits` to its properties.
local function put_back(st, rec, edits, topic)
    return put(st, {
        topic = topic or M.HALF_TOPIC, queueId = topic and 0 or rec.queueId, body = rec.body, flag = rec.flag,
        properties = message.edit_properties(rec.propertiesString, edits),
        tags = rec.properties.TAGS or "",
        bornTimestamp = rec.bornTimestamp, bornHost = rec.bornHost, storeHost = rec.storeHost,
        reconsumeTimes = rec.reconsumeTimes, sysFlag = rec.sysFlag, wait = false,
    })
end

--- One check pass (TransactionalMessageServiceImpl.check).  Returns the
--- number of checks sent.
function M.check_pass(b, now)
    local conf, st = b.conf, b.store
    local t0 = core.mono_ms()
    local timeout = conf.transactionTimeOut
    local check_max = conf.transactionCheckMax
    local reserved = (conf.fileReservedTime or 72) * 3600 * 1000
    local half_max = st:max_offset(M.HALF_TOPIC, 0)
    local half_off = offsets.query(M.GROUP, M.HALF_TOPIC, 0)
    if half_off == nil or half_off < 0 then
        half_off = st:min_offset(M.HALF_TOPIC, 0)
    end
    if half_off >= half_max then
        return 0
    end
    local op_off = offsets.query(M.GROUP, M.OP_TOPIC, 0)
    if op_off == nil or op_off < 0 then
        op_off = st:min_offset(M.OP_TOPIC, 0)
    end
    local ops = op_reader(st, op_off, half_off, conf.transactionDecidedMax)
    -- Is the half message at qoff decided by an op?  Reads ahead as far
    -- as needed (RocketMQ reads the op queue to its end for an old
    -- undecided half message too).
    local function decided_by_op(qoff)
        while ops.done[qoff] == nil and ops.more() do
        end
        return ops.take(qoff)
    end
    local capped = false
    local sent = 0
    local passed_keys = {}
    local i = half_off
    -- Commits the half offset, then forgets the decisions it passed: from
    -- now END_TRANSACTION refuses them by the offset.  (The op offset
    -- moves at the end; ops a restart reads again for halves below the
    -- half offset are passed over.)
    local function release_passed()
        if i ~= (offsets.query(M.GROUP, M.HALF_TOPIC, 0) or half_off) then
            offsets.commit(M.GROUP, M.HALF_TOPIC, 0, i)
        end
        for _, key in ipairs(passed_keys) do
            decided:del(key)
        end
        passed_keys = {}
    end
    local stop = false
    while not stop and i < half_max do
        local status, recs, next_off = st:get(M.HALF_TOPIC, 0, i, M.BATCH)
        if status ~= "FOUND" then
            if recs then
                recs:release()
            end
            if next_off and next_off > i then
                i = next_off   -- removed by retention, or a hole
            else
                break
            end
        else
            for k = 1, #recs do
                local raw = recs:get(k)
                local qoff, hphy = head(raw)
                local by_op = qoff and qoff < half_max and decided_by_op(qoff)
                local rec = qoff and not by_op and decode(raw)
                if qoff and qoff >= half_max then
                    stop = true   -- stored during this pass (our copies among them)
                    break
                elseif by_op then
                    passed_keys[#passed_keys + 1] = tostring(hphy)
                    i = qoff + 1
                elseif qoff and not ops.ended then
                    -- transactionDecidedMax ops read ahead and its op may
                    -- be further: do not ask about what may be decided.
                    capped = true
                    stop = true
                    break
                elseif not rec then
                    log.error("transaction check: the half record at queue offset %d cannot be decoded; passed", i)
                    i = i + 1
                else
                    local key = tostring(rec.commitLogOffset)
                    local claimed = decided:set(key, "checking", true)
                    local was = not claimed and decided:get(key)
                    if was == "checking" then
                        claimed = true   -- left by a pass that failed half way
                    end
                    -- isNeedDiscard: a half never checked is checked
                    -- once, even with transactionCheckMax 0.
                    local times_s = rec.properties.TRANSACTION_CHECK_TIMES
                    local times = math.tointeger(tonumber(times_s or "0")) or 0
                    local give_up = times_s ~= nil and times >= check_max
                    local immunity = timeout
                    local imm_s = rec.properties.CHECK_IMMUNITY_TIME_IN_SECONDS
                    if imm_s and imm_s:match("^%d+$") and #imm_s < 10 then
                        immunity = math.max(timeout, tonumber(imm_s) * 1000)
                    end
                    -- Aged by the broker's clock (4.9.8 uses the
                    -- producer's bornTimestamp: a producer whose clock is
                    -- behind had its half messages discarded as older
                    -- than fileReservedTime at the first pass).  A copy
                    -- put back by a check is aged from that put back: it
                    -- is not asked about again before the producer had
                    -- transactionTimeOut to answer, and its own file is
                    -- fresh, so fileReservedTime counts from there too.
                    local age = now - rec.storeTimestamp
                    if not claimed and was ~= "commit" and was ~= "rollback" then
                        stop = true   -- a worker is deciding it now: next pass
                        break
                    end
                    passed_keys[#passed_keys + 1] = key
                    if not claimed then
                        i = rec.queueOffset + 1   -- decided; its op is on its way
                    elseif give_up or age > reserved then
                        -- needDiscard / needSkip: given up on.
                        if give_up then
                            ensure(M.MAX_TIME_TOPIC)
                            local pst, why = put_back(st, rec, {}, M.MAX_TIME_TOPIC)
                            if not STORED[pst] then
                                passed_keys[#passed_keys] = nil
                                decided:del(key)
                                log.error("transaction %s: cannot move to %s: %s %s", (rec.properties.UNIQ_KEY or rec.offsetMsgId),
                                          M.MAX_TIME_TOPIC, tostring(pst), tostring(why))
                                stop = true
                                break
                            end
                            net.raise(M.MAX_TIME_TOPIC .. "@0")
                        end
                        log.warn("transaction %s (group %s) discarded after %d checks%s",
                                 (rec.properties.UNIQ_KEY or rec.offsetMsgId), tostring(rec.properties.PGROUP), times,
                                 give_up and (" to " .. M.MAX_TIME_TOPIC) or " (older than fileReservedTime)")
                        i = rec.queueOffset + 1
                    elseif age >= 0 and age < immunity then
                        passed_keys[#passed_keys] = nil
                        decided:del(key)
                        stop = true   -- new arrived: check it later
                        break
                    else
                        local pst, phy = put_back(st, rec, { "TRANSACTION_CHECK_TIMES", tostring(times + 1) })
                        if not STORED[pst] then
                            passed_keys[#passed_keys] = nil
                            decided:del(key)
                            log.error("transaction check: cannot put back half message %s: %s %s",
                                      (rec.properties.UNIQ_KEY or rec.offsetMsgId), tostring(pst), tostring(phy))
                            stop = true
                            break
                        end
                        local copy = st:message(phy)
                        local craw = copy and copy:get(1)
                        if copy then
                            copy:release()
                        end
                        local crec = craw and decode(craw)
                        if crec then
                            local ok, why = send_check(crec, craw)
                            if ok then
                                sent = sent + 1
                            else
                                log.warn("transaction check of %s not sent: %s", (crec.properties.UNIQ_KEY or crec.offsetMsgId), why)
                            end
                        end
                        i = rec.queueOffset + 1
                    end
                end
            end
            recs:release()
            if #passed_keys >= 1024 then
                release_passed()   -- bounded, and an END_TRANSACTION is refused by the offset sooner
            end
            if (i - half_off) % 1024 < M.BATCH then
                net.sleep(0)
            end
        end
    end
    release_passed()
    -- calculateOpOffset: past the ops whose half message is passed.
    local new_op = ops.off
    for half, op in pairs(ops.done) do
        if half >= i and op < new_op then
            new_op = op
        end
    end
    if new_op ~= op_off then
        offsets.commit(M.GROUP, M.OP_TOPIC, 0, new_op)
    end
    if capped then
        log.warn("transaction check: stopped at half queue offset %d: %d ops of later half messages read "
                 .. "(transactionDecidedMax) and none for it", i, ops.n)
    end
    local ms = core.mono_ms() - t0
    if sent > 0 or ms >= 100 then
        log.info("transaction check: %d half messages passed, ops %d..%d read, %d checks sent in %.0f ms",
                 i - half_off, op_off, ops.off, sent, ms)
    end
    return sent
end

local timer

function M.main_start(b)
    local conf = b.conf
    if conf.brokerRole == "SLAVE" or b.role_services_stopped then
        return   -- (replica_role starts it on promotion)
    end
    local every = conf.transactionCheckInterval
    local busy = false
    timer = net.timer(every, every, function()
        if busy then
            return
        end
        busy = true
        local ok, err = pcall(M.check_pass, b, core.now_ms())
        busy = false
        if not ok then
            log.error("transaction check: %s", tostring(err))
        end
    end)
end

function M.main_stop()
    if timer then
        timer:stop()
        timer = nil
    end
end

-- }}}

return M
