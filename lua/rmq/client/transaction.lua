-- The transactional producer (RocketMQ's TransactionMQProducer,
-- protocol.md 4.11, 6.4):
--
--   local tp = transaction.new{ namesrvAddr = ..., producerGroup = "g",
--       check = function(msg) return "COMMIT" | "ROLLBACK" | "UNKNOWN" end }
--   local r, err = tp:send_in_transaction(msg, function(msg, arg) ... end, arg)
--   r = the send result plus localTransactionState and transactionId
--   tp:register(topic)   heartbeat the topic's brokers before any send
--   tp:shutdown()
--
-- send_in_transaction sends msg as a half message (TRAN_MSG=true, PGROUP,
-- sysFlag TRANSACTION_PREPARED_TYPE), runs the local transaction when the
-- broker stored it (SEND_OK; any other status is rolled back, a raising
-- function is UNKNOWN), and ends the transaction with END_TRANSACTION
-- (one-way, as Java: the broker's answer is not waited for).  The
-- producer keeps one connection per broker it sent a half message to,
-- heartbeats its group there (every heartbeatBrokerInterval ms) and
-- answers CHECK_TRANSACTION_STATE on it: `check` gets the message
-- decoded from the request (topic and queue are the real ones, msgId the
-- UNIQ_KEY) and its answer goes back with fromTransactionCheck=true
-- (UNKNOWN too, as commitOrRollback 0).  Other options are the
-- producer's (rmq.client.producer).
local fastjson = require("rmq.fastjson")
local core = require("rmq.core")
local codes = require("rmq.codes")
local log = require("rmq.log")
local net = require("rmq.net")
local conns = require("rmq.client.conns")
local message = require("rmq.client.message")
local producer = require("rmq.client.producer")

local M = {}

M.STATE = { UNKNOWN = 0, COMMIT = 8, ROLLBACK = 12 }   -- commitOrRollback
local PREPARED = 0x4

local TP = setmetatable({}, { __index = producer.Producer })
TP.__index = TP

function M.new(opts)
    opts = opts or {}
    local p = producer.new(opts)
    setmetatable(p, TP)
    p.check = opts.check or function() return "UNKNOWN" end
    p.heartbeatBrokerInterval = opts.heartbeatBrokerInterval or 30000
    p.clientId = opts.clientId or ("127.0.0.1@%d#%d#txn"):format(core.pid(), math.floor(core.mono_ms() * 1000))
    -- The connection to a broker, heartbeated (the broker finds us by it).
    p.conns = conns.new({
        on_request = function(addr, _, cmd)
            if cmd.code == codes.request.CHECK_TRANSACTION_STATE then
                local conn = p.conns:peek(addr)
                if conn then
                    net.spawn(function() p:on_check(conn, cmd) end)
                end
            end
            return nil
        end,
        on_connect = function(addr) p:heartbeat(addr) end,
    })
    p.checks = 0
    p.timer = net.timer(p.heartbeatBrokerInterval, p.heartbeatBrokerInterval, function()
        for addr in p.conns:each() do
            p:heartbeat(addr)
        end
    end)
    return p
end

local function state_of(s)
    s = tostring(s or "UNKNOWN"):upper()
    return M.STATE[s] and s or "UNKNOWN"
end

function TP:heartbeat_body()
    return fastjson.encode({
        clientID = self.clientId,
        producerDataSet = { { groupName = self.producerGroup } },
        consumerDataSet = setmetatable({}, fastjson.array_mt),
    })
end

-- CHECK_TRANSACTION_STATE from a broker: ask `check`, answer at once.
function TP:on_check(c, cmd)
    local ext = cmd.ext or {}
    local msgs = cmd.body and message.decode_records(cmd.body)
    local msg = msgs and msgs[1]
    if msg == nil then
        log.warn("CHECK_TRANSACTION_STATE without a readable message from %s", tostring(c.peer))
        return
    end
    self.checks = self.checks + 1
    local ok, s = pcall(self.check, msg)
    if not ok then
        log.warn("transaction check of %s raised: %s", tostring(msg.msgId), tostring(s))
        s = "UNKNOWN"
    end
    s = state_of(s)
    c:oneway({ code = codes.request.END_TRANSACTION, ext = {
        producerGroup = self.producerGroup,
        tranStateTableOffset = ext.tranStateTableOffset,
        commitLogOffset = ext.commitLogOffset,
        commitOrRollback = tostring(M.STATE[s]),
        fromTransactionCheck = "true",
        msgId = msg.properties.UNIQ_KEY or ext.msgId,
        transactionId = ext.transactionId,
    }, credentials = self.credentials })
end

-- The connection to a broker, heartbeated (the broker finds us by it).
function TP:conn(addr)
    return self.conns:get(addr, self.sendMsgTimeout)
end

function TP:heartbeat(addr)
    local c = self.conns:peek(addr)
    if not c then
        return
    end
    local r, err = c:call({ code = codes.request.HEART_BEAT, body = self:heartbeat_body(),
                            credentials = self.credentials }, self.sendMsgTimeout)
    if not r or r.code ~= 0 then
        log.warn("heartbeat to %s: %s", addr, err or (r.remark or r.code))
    end
end

--- Heartbeats every master serving `topic`, so their checks of half
--- messages sent before this process started reach it (a Java producer
--- is only asked by brokers it has sent to).  Returns true or nil, err.
function TP:register(topic)
    local info, err = self:publish_info(topic, true)
    if not info then
        return nil, err
    end
    local seen = {}
    for _, mq in ipairs(info.queues) do
        local addr = self:broker_addr(info, mq.brokerName)
        if addr and not seen[addr] then
            seen[addr] = true
            local c, cerr = self:conn(addr)
            if not c then
                return nil, cerr
            end
        end
    end
    return true
end

--- Sends msg as a half message, runs local_fn(msg, arg), ends the
--- transaction.  Returns the send result with localTransactionState, or
--- nil, err, code when the half message was not sent.
function TP:send_in_transaction(msg, local_fn, arg)
    local m = {}
    for k, v in pairs(msg) do
        m[k] = v
    end
    m.properties = {}
    for k, v in pairs(msg.properties or {}) do
        m.properties[k] = v
    end
    m.properties.TRAN_MSG = "true"
    m.properties.PGROUP = self.producerGroup
    m.delayTimeLevel = nil   -- as Java: no delayed transactions
    m.properties.DELAY = nil
    local body, sys_flag, props = self:prepare(m)
    local r, err, code = self:send_impl(m, "sync", nil, body, sys_flag | PREPARED, props)
    if r == nil then
        return nil, err, code
    end
    local state
    if r.status ~= "SEND_OK" then
        state = "ROLLBACK"
    else
        local ok, s = pcall(local_fn, m, arg)
        if not ok then
            log.warn("local transaction of %s raised: %s", tostring(r.msgId), tostring(s))
            s = "UNKNOWN"
        end
        state = state_of(s)
    end
    r.localTransactionState = state
    r.transactionId = r.msgId
    local info = self.infos[m.topic]
    local addr = info and self:broker_addr(info, r.queue.brokerName)
    local _, phy
    if r.offsetMsgId then
        _, phy = message.decode_offset_msg_id(r.offsetMsgId)
    end
    if addr == nil or phy == nil then
        return r, "cannot end the transaction: no broker address or offset msgId"
    end
    local c, cerr = self:conn(addr)
    if not c then
        return r, "cannot end the transaction: " .. tostring(cerr)
    end
    local ok, oerr = c:oneway({ code = codes.request.END_TRANSACTION, ext = {
        producerGroup = self.producerGroup,
        tranStateTableOffset = tostring(r.queueOffset),
        commitLogOffset = tostring(phy),
        commitOrRollback = tostring(M.STATE[state]),
        fromTransactionCheck = "false",
        msgId = r.msgId,
        transactionId = r.transactionId,
    }, credentials = self.credentials })
    if not ok then
        return r, "END_TRANSACTION not sent: " .. tostring(oerr)
    end
    return r
end

function TP:shutdown()
    if self.timer then
        self.timer:stop()
        self.timer = nil
    end
    self.conns:close_all(function(_, c)
        c:call({ code = codes.request.UNREGISTER_CLIENT, ext = {
            clientID = self.clientId, producerGroup = self.producerGroup },
            credentials = self.credentials }, 1000)
    end)
end

return M
