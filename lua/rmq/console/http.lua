-- rmq.console.http: the /api/* routes of the web console.  Runs in a Lua
-- state of its own on the HTTP endpoint's thread (src/server/
-- metrics_http.c), never on a worker: it answers by sending remoting
-- requests to this server's own broker port over loopback
-- (rmq.console.api), so it sees exactly what mqadmin would and touches no
-- worker state.  C calls, one at a time:
--
--   init(settings) -> ms between samples; settings: {broker=, namesrv=, timeout=, maxQueues=,
--                   historySize=, historyMaxBytes=, idleMillis=, writeEnable=, cluster=, brokerName=,
--                   password=, authFailDelay=, authFailPeers=, accessKey=, secretKey=, tls=,
--                   controllerAddr= (a broker in controller mode: /api/controller asks them)}
--                   (accessKey/secretKey: conf consoleAccessKey/consoleSecretKey, the console's own
--                   account, never the broker's: every request of this state is signed with it, and
--                   unsigned without it; tls: net.tls settings for its connections, or nil)
--
-- With a password (conf consolePassword) every /api/* route needs HTTP
-- Basic authentication with it (any user name; 401 asks the browser for
-- it); after a wrong one every attempt from that peer address is refused
-- (429) for authFailDelay ms, so its guesses go one at a time while
-- other hosts are served (at most authFailPeers addresses are kept, the
-- oldest forgotten first).  POST /api/send: refused (403) unless
-- writeEnable.  A refusal of the broker (ACL) is the error's text.
--   handle(method, path, args, body, authorization, peer) -> status, content type, text
--                   (peer: the client's IP address, or nil)
--   sample()        records a snapshot for the sparklines (nothing while nobody looks:
--                   rmq.console.api's history)
--
-- Every answer is JSON; an error is {"error": "one line"} with a 4xx/5xx
-- status, never a traceback (C logs what a Lua error said).
local api = require("rmq.console.api")
local cjson = require("cjson")
local json_out = require("rmq.console.json")
local log = require("rmq.log")
local message = require("rmq.client.message")

local M = {}


local state = {}

function M.init(settings)
    local s = type(settings) == "string" and cjson.decode(settings) or settings
    state.settings = s
    require("rmq.net").credentials(require("rmq.client.credentials").of(s))
    if s.tls then
        assert(require("rmq.net").tls(s.tls))
    end
    state.conf = { brokerClusterName = s.cluster, brokerName = s.brokerName }
    state.names = {}
    for _, n in ipairs({ s.cluster, s.brokerName }) do
        state.names[n] = true
    end
    state.api = api.new({ broker = s.broker, namesrv = s.namesrv, timeout = s.timeout,
                          maxQueues = s.maxQueues, historySize = s.historySize,
                          historyMaxBytes = s.historyMaxBytes, idleMillis = s.idleMillis })
    state.api.self_addr = s.selfAddr
    state.api.controllers = s.controllerAddr
    state.known = {}
    for _, a in ipairs(s.knownAddrs or {}) do
        state.known[a] = true
    end
    return s.sampleMillis
end

function M.sample()
    local ok, err = state.api:sample()
    if not ok then
        log.debug("console sample: %s", tostring(err))
    end
end

local function json(status, t)
    return status, "application/json; charset=utf-8", json_out.encode(t) .. "\n"
end

local function err(status, msg)
    return json(status, { error = msg })
end

-- A view or (nil, why, status): 502 when a broker did not answer.
local function view(t, why, status)
    if t == nil then
        return err(status or 502, why)
    end
    return json(200, t)
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function unbase64(text)
    text = text:gsub("=+$", "")
    if text:find("[^%w%+/]") or #text % 4 == 1 then
        return nil
    end
    local out, acc, nbits = {}, 0, 0
    for i = 1, #text do
        acc = (acc << 6) | (B64:find(text:sub(i, i), 1, true) - 1)
        nbits = nbits + 6
        if nbits >= 8 then
            nbits = nbits - 8
            out[#out + 1] = string.char((acc >> nbits) & 0xFF)
        end
    end
    return table.concat(out)
end

-- Looks at every byte of the given text whatever the first difference.
local function same_secret(given, secret)
    if #secret == 0 then
        return #given == 0
    end
    local diff = #given == #secret and 0 or 1
    for i = 1, #given do
        diff = diff | (given:byte(i) ~ secret:byte((i - 1) % #secret + 1))
    end
    return diff == 0
end

-- Peers that gave a wrong password: until_ms[peer] = monotonic ms it
-- may try again; order: the peers in the order they failed (oldest
-- first, from head; an entry whose peer has gone since is skipped), so
-- that at most authFailPeers are kept.  Per peer, so that one host
-- guessing does not lock the operator out.
local failed = { until_ms = {}, n = 0, order = {}, head = 1 }

local function forget(peer)
    if failed.until_ms[peer] ~= nil then
        failed.until_ms[peer] = nil
        failed.n = failed.n - 1
    end
end

local function remember_failure(peer, now)
    local f, max = failed, state.settings.authFailPeers or 1024
    if f.until_ms[peer] == nil then
        while f.n >= max and f.head <= #f.order do
            forget(f.order[f.head])
            f.order[f.head] = false
            f.head = f.head + 1
        end
        f.n = f.n + 1
        f.order[#f.order + 1] = peer
        -- Stale entries (peers forgotten when their delay ran out) are
        -- dropped once they are half the queue: it stays O(max).
        if #f.order - f.head + 1 > 2 * max then
            local rest, seen = {}, {}
            for i = f.head, #f.order do
                local p = f.order[i]
                if p and f.until_ms[p] and not seen[p] then
                    seen[p] = true
                    rest[#rest + 1] = p
                end
            end
            f.order, f.head = rest, 1
        end
    end
    f.until_ms[peer] = now + (state.settings.authFailDelay or 1000)
end

-- nil when the request may go on, else the refusal's status and text.
-- With a password (consolePassword) every /api/* route needs it: the
-- console shows what its account reads, which is for the operator only.
local function auth_refusal(auth, peer, what)
    local s = state.settings
    local pw = s.password
    if pw == nil then
        return nil
    end
    peer = peer or "?"
    local now = require("rmq.core").mono_ms()
    local wait = failed.until_ms[peer]
    if wait and now < wait then
        return 429, "a wrong console password was given from this address just now: try again in a moment"
    elseif wait then
        forget(peer)
    end
    local encoded = type(auth) == "string" and auth:match("^[Bb]asic%s+(%S+)%s*$")
    local decoded = encoded and unbase64(encoded)
    local given = decoded and decoded:match("^[^:]*:(.*)$")
    if not given then
        return 401, what .. " needs the console password (HTTP Basic authentication, any user name)"
    end
    if not same_secret(given, pw) then
        remember_failure(peer, now)
        log.warn("web console: %s from %s with a wrong password refused", what, peer:sub(1, 64))
        return 401, "wrong console password"
    end
    return nil
end

local function send(body)
    local s = state.settings
    if not s.namesrv then
        return err(503, "no NameServer to route the message (namesrvAddr is not set)")
    end
    local ok, msg = pcall(cjson.decode, body or "")
    if not ok or type(msg) ~= "table" then
        return err(400, "the body must be a JSON object {topic, body, tags?, keys?}")
    end
    for _, k in ipairs({ "topic", "body", "tags", "keys" }) do
        if msg[k] ~= nil and type(msg[k]) ~= "string" then
            return err(400, k .. " must be a string")
        end
    end
    if msg.topic == nil or msg.body == nil or msg.body == "" then
        return err(400, "topic and a non-empty body are required")
    end
    local bad = message.check_topic(msg.topic)
    if bad then
        return err(400, tostring(bad))
    end
    if state.producer == nil then
        local producer = require("rmq.client.producer")
        state.producer = producer.new({ namesrvAddr = s.namesrv, producerGroup = "rmq_console_producer",
                                        sendMsgTimeout = s.timeout })
    end
    local r, e, code = state.producer:send({ topic = msg.topic, body = msg.body, tags = msg.tags, keys = msg.keys })
    if not r then
        return err(502, ("send failed%s: %s"):format(code and (" (code " .. code .. ")") or "", tostring(e)))
    end
    return json(200, { status = r.status, msgId = r.msgId, offsetMsgId = r.offsetMsgId,
                       brokerName = r.queue.brokerName, queueId = r.queue.queueId,
                       queueOffset = r.queueOffset })
end

local routes = {
    ["/api/cluster"] = function() return view(state.api:cluster(state.conf)) end,
    ["/api/topics"] = function() return view(state.api:topics(state.names)) end,
    ["/api/groups"] = function() return view(state.api:groups()) end,
    ["/api/controller"] = function() return view(state.api:controller(state.conf)) end,
    ["/api/group"] = function(args)
        if not args.name or args.name == "" then
            return err(400, "name= is required")
        end
        return view(state.api:group(args.name))
    end,
    ["/api/message"] = function(args)
        return view(state.api:message({ id = args.id, key = args.key, topic = args.topic }, state.known))
    end,
}

function M.handle(method, path, args, body, auth, peer)
    if path == "/api/send" then
        if method ~= "POST" then
            return err(405, "POST a JSON object to /api/send")
        end
        if not state.settings.writeEnable then
            return err(403, "writes are off: set consoleWriteEnable = true in the broker's conf")
        end
        local refused, why = auth_refusal(auth, peer, "POST /api/send")
        if refused then
            return err(refused, why)
        end
        return send(body)
    end
    local route = routes[path]
    if route == nil then
        return err(404, "no such endpoint: " .. path:sub(1, 100)
            .. " (try /api/cluster, /api/topics, /api/groups, /api/group?name=, /api/controller, /api/message, POST /api/send)")
    end
    if method ~= "GET" and method ~= "HEAD" then
        return err(405, "use GET")
    end
    local refused, why = auth_refusal(auth, peer, "the console's /api")
    if refused then
        return err(refused, why)
    end
    return route(args or {})
end

return M
