-- A RocketMQ 5 gRPC client (apache.rocketmq.v2.MessagingService) for the
-- CLI's `rmq send --grpc` / `rmq consume --grpc` and scripts/bench/
-- grpc.lua: the C client of src/grpc/client.c (nghttp2) through rmq.grpc,
-- with the protobuf-c messages the server decodes.  TLS as the CLI's
-- --tls sets it for every connection (net.tls); the credentials as
-- rmq.client.credentials (the CLI's --access-key/--secret-key) sign every
-- call as 5.x's SDKs do: "authorization: MQv2-HMAC-SHA1 Credential=AK,
-- SignedHeaders=x-mq-date-time, Signature=HEX(HmacSHA1(SK, date))".
--
--   local grpc = require("rmq.client.grpc")
--   local c, err = grpc.connect("127.0.0.1:8081" [, {credentials = creds | false, timeout = ms}])
--   c:query_route(topic) -> QueryRouteResponse | nil, err
--   c:send(topic, body [, {tag=, keys={...}, properties={k=v}, group=, deliver_at_ms=}])
--       -> SendResultEntry (message_id, offset, ...) | nil, err
--   c:receive(group, topic [, {batch=, invisible_ms=, poll_ms=, expression=, auto_renew=}])
--       -> {Message, ...} | nil, err       ({} when none came in poll_ms)
--   c:ack(group, topic, messages) -> true | nil, err
--   c:close()
-- Errors name the v2 status code and message the server answered with.
local cgrpc = require("rmq.grpc")
local net = require("rmq.net")

local M = {}

local CODE_OK, CODE_MESSAGE_NOT_FOUND = 20000, 40401
local client_seq = 0

local function random_id(n)
    local f = io.open("/dev/urandom", "rb")
    local b = f and f:read(n) or tostring(os.time())
    if f then
        f:close()
    end
    return (b:gsub(".", function(ch) return ("%02X"):format(ch:byte()) end))
end

local Client = {}
Client.__index = Client

function M.connect(endpoint, opts)
    opts = opts or {}
    local c, err = cgrpc.connect(endpoint, { timeout = opts.timeout or 3000 })
    if not c then
        return nil, ("cannot connect to %s: %s"):format(endpoint, err)
    end
    local creds = opts.credentials
    if creds == nil then
        creds = net.credentials()
    end
    client_seq = client_seq + 1
    return setmetatable({
        c = c, endpoint = endpoint, creds = creds or nil,
        client_id = ("rmq-cli@%s@%d"):format(random_id(6), client_seq),
        timeout = opts.call_timeout or 10000,
    }, Client)
end

function Client:headers()
    local date = os.date("!%Y%m%dT%H%M%SZ")
    local h = {
        ["x-mq-client-id"] = self.client_id,
        ["x-mq-language"] = "CPP",
        ["x-mq-protocol"] = "v2",
        ["x-mq-client-version"] = "rmq",
        ["x-mq-date-time"] = date,
    }
    local cr = self.creds
    if cr and cr.accessKey then
        h.authorization = ("MQv2-HMAC-SHA1 Credential=%s, SignedHeaders=x-mq-date-time, Signature=%s")
            :format(cr.accessKey, cgrpc.hmac_sha1_hex(cr.secretKey, date))
        if cr.securityToken then
            h["x-mq-session-token"] = cr.securityToken
        end
    end
    return h
end

-- One call: the decoded responses (a list) and the last one, or nil, err.
function Client:call(method, req_type, req, resp_type, timeout)
    local r, err = self.c:call(method, cgrpc.encode(req_type, req), self:headers(), timeout or self.timeout)
    if not r then
        return nil, ("%s: %s"):format(method, err)
    end
    if r.status ~= 0 then
        return nil, ("%s: gRPC status %d: %s"):format(method, r.status, r.message)
    end
    local out = {}
    for i, bytes in ipairs(r.messages) do
        local m, derr = cgrpc.decode(resp_type, bytes)
        if not m then
            return nil, ("%s: %s"):format(method, derr)
        end
        out[i] = m
    end
    if #out == 0 then
        return nil, ("%s: no response message"):format(method)
    end
    return out, out[#out]
end

local function status_err(method, st)
    return ("%s: %s (code %d)"):format(method, st and st.message or "no status", st and st.code or 0)
end

function Client:query_route(topic)
    local _, last = self:call("QueryRoute", "QueryRouteRequest", {
        topic = { name = topic },
        endpoints = { scheme = 1, addresses = { { host = self.endpoint:match("^(.*):"),
                                                  port = tonumber(self.endpoint:match(":(%d+)$")) } } },
    }, "QueryRouteResponse")
    if not _ then
        return nil, last
    end
    if last.status == nil or last.status.code ~= CODE_OK then
        return nil, status_err("QueryRoute", last.status)
    end
    return last
end


function Client:send(topic, body, o)
    o = o or {}
    local sp = {
        message_id = o.message_id or ("01" .. random_id(16)),
        tag = o.tag, keys = o.keys, message_group = o.group,
        message_type = o.group and "FIFO" or o.deliver_at_ms and "DELAY" or "NORMAL",
        born_timestamp = { seconds = os.time(), nanos = 0 },
        body_encoding = "IDENTITY", queue_id = -1,
    }
    if o.deliver_at_ms then
        sp.delivery_timestamp = { seconds = o.deliver_at_ms // 1000, nanos = (o.deliver_at_ms % 1000) * 1000000 }
    end
    local _, last = self:call("SendMessage", "SendMessageRequest", {
        messages = { { topic = { name = topic }, user_properties = o.properties or {},
                       system_properties = sp, body = body } },
    }, "SendMessageResponse")
    if not _ then
        return nil, last
    end
    local e = last.entries and last.entries[1]
    if last.status == nil or last.status.code ~= CODE_OK or e == nil then
        return nil, status_err("SendMessage", e and e.status or last.status)
    end
    return e
end

function Client:receive(group, topic, o)
    o = o or {}
    local poll = o.poll_ms or 15000
    local inv = o.invisible_ms or 30000
    local list, last = self:call("ReceiveMessage", "ReceiveMessageRequest", {
        group = { name = group },
        message_queue = { topic = { name = topic }, id = -1, permission = "READ_WRITE",
                          broker = { name = "" } },
        filter_expression = { type = o.sql and "SQL" or "TAG", expression = o.expression or "*" },
        batch_size = o.batch or 32,
        invisible_duration = { seconds = inv // 1000, nanos = (inv % 1000) * 1000000 },
        auto_renew = o.auto_renew or false,
        long_polling_timeout = { seconds = poll // 1000, nanos = (poll % 1000) * 1000000 },
    }, "ReceiveMessageResponse", poll + 10000)
    if not list then
        return nil, last
    end
    local msgs = {}
    for _, r in ipairs(list) do
        if r.status and r.status.code ~= CODE_OK and r.status.code ~= CODE_MESSAGE_NOT_FOUND then
            return nil, status_err("ReceiveMessage", r.status)
        end
        if r.message then
            msgs[#msgs + 1] = r.message
        end
    end
    return msgs
end

function Client:ack(group, topic, msgs)
    local entries = {}
    for i, m in ipairs(msgs) do
        entries[i] = { message_id = m.system_properties.message_id,
                       receipt_handle = m.system_properties.receipt_handle }
    end
    local _, last = self:call("AckMessage", "AckMessageRequest", {
        group = { name = group }, topic = { name = topic }, entries = entries,
    }, "AckMessageResponse")
    if not _ then
        return nil, last
    end
    if last.status == nil or last.status.code ~= CODE_OK then
        local bad
        for _, e in ipairs(last.entries or {}) do
            if e.status and e.status.code ~= CODE_OK then
                bad = e.status
                break
            end
        end
        return nil, status_err("AckMessage", bad or last.status)
    end
    return true
end

function Client:close()
    self.c:close()
end

return M
