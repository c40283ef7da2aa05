-- A raw gRPC ReceiveMessage of one message, on a support.h2raw
-- connection: for specs that must hold the call itself (reset it, end
-- its connection) while the broker holds the POP it made, and see when
-- the broker holds one (POLLING_INFO).
--
--   local rx = require("support.grpc_receive").new(s, GROUP, TOPIC)
--       s: a support.grpc_node server (s.grpc_addr, s.broker_addr or s.addr)
--   rx:open(c, {client_id=, poll_s=30, invisible_s=, auto_renew=false}) -> stream id
--   rx:held() -> the POPs the broker holds for the group
--   rx:next_message(other, within_ms [, c]) -> a message another consumer
--       (rmq.client.grpc) received within within_ms (c pumped meanwhile), or nil
-- busted's assert (luassert): the specs' own is not this module's global.
local assert = require("luassert")
local cgrpc = require("rmq.grpc")
local core = require("rmq.core")
local h2 = require("support.h2raw")
local net = require("rmq.net")

local M = {}
local Rx = {}
Rx.__index = Rx

function M.new(s, group, topic)
    return setmetatable({ s = s, group = group, topic = topic }, Rx)
end

-- Opens a ReceiveMessage of at most one message of the group from every
-- queue (id -1) on c, with the headers a Java SDK sends; o.poll_s: its
-- long polling (default 30 s), o.invisible_s: the invisible duration.
function Rx:open(c, o)
    local block = h2.headers_block("ReceiveMessage", {
        ["x-mq-client-id"] = assert(o.client_id), ["x-mq-language"] = "JAVA", ["x-mq-protocol"] = "v2",
    })
    local id = c:open("ReceiveMessage", block)
    c:data(id, cgrpc.encode("ReceiveMessageRequest", {
        group = { name = self.group },
        message_queue = { topic = { name = self.topic }, id = -1, permission = "READ_WRITE", broker = { name = "" } },
        filter_expression = { type = "TAG", expression = "*" },
        batch_size = 1,
        invisible_duration = { seconds = assert(o.invisible_s), nanos = 0 },
        auto_renew = o.auto_renew or false,
        long_polling_timeout = { seconds = o.poll_s or 30, nanos = 0 },
    }), true)
    return id
end

-- POLLING_INFO's pollingNum: POPs the broker holds for the group on
-- every queue (the queueId -1 of a gRPC receive).
function Rx:held()
    local r = assert(net.call(self.s.broker_addr or self.s.addr, { code = 200055, ext = {
        consumerGroup = self.group, topic = self.topic, queueId = "-1" } }, 10000))
    assert.equal(0, r.code, r.remark)
    return tonumber(r.ext.pollingNum)
end

-- Receives with other (an rmq.client.grpc client of the group) until a
-- message comes or within_ms pass, pumping c (an h2raw connection whose
-- frames must keep being read) meanwhile.
function Rx:next_message(other, within_ms, c)
    local got
    local t0 = core.mono_ms()
    while got == nil and core.mono_ms() - t0 < within_ms do
        if c then
            c:pump()
        end
        got = assert(other:receive(self.group, self.topic, { batch = 1, poll_ms = 2000, invisible_ms = 30000 }))[1]
    end
    return got
end

return M
