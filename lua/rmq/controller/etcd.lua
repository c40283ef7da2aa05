-- rmq.controller.etcd: the few etcd v3 calls the controller needs, over
-- etcd's JSON gateway (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant,
-- /v3/lease/keepalive, /v3/lease/revoke) through rmq.httpc (C, on the
-- loop; docs/controller.md says why the gateway and not gRPC).
--
--   local etcd = require "rmq.controller.etcd"
--   local c = etcd.new(conf)          -- etcdEndpoints, etcdRequestTimeoutMillis
--   local r = c:range(key [, prefix]) -- {kvs = {{key=, value=, mod=, create=, lease=}}, revision=}
--   local ok, r = c:txn(cmp, success [, failure])   -- ok: the compares held
--   local id = c:grant(ttl)           -- lease id (a decimal string)
--   local ttl = c:keepalive(id)       -- remaining TTL; 0: the lease is gone
--   local n = c:count(prefix)         -- keys under a prefix
--
-- Each call returns nil, err when no endpoint answered; endpoints are
-- tried in turn from the last one that worked, moving on when one does
-- not connect, times out (etcdRequestTimeoutMillis) or answers 5xx (a
-- member cut from its quorum).  "etcd unreachable" is
-- logged at most once a second (with how many failures it stands for),
-- never once per request.  Keys and values are plain Lua strings here;
-- the gateway's base64 and int64-as-string are this module's business.
local cjson = require "cjson.safe"
local core = require "rmq.core"
local httpc = require "rmq.httpc"
local log = require "rmq.log"

local M = {}

-- {{{ base64 (the gateway's bytes fields)

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_INDEX = {}
for i = 1, 64 do
    B64_INDEX[B64:byte(i)] = i - 1
end

local function b64enc(s)
    local out = {}
    for i = 1, #s, 3 do
        local a, b, c = s:byte(i, i + 2)
        local n = (a << 16) | ((b or 0) << 8) | (c or 0)
        out[#out + 1] = string.char(
            B64:byte((n >> 18) + 1), B64:byte(((n >> 12) & 63) + 1),
            b and B64:byte(((n >> 6) & 63) + 1) or 61, c and B64:byte((n & 63) + 1) or 61)
    end
    return table.concat(out)
end

local function b64dec(s)
    if type(s) ~= "string" then
        return ""
    end
    local out, n, bits = {}, 0, 0
    for i = 1, #s do
        local v = B64_INDEX[s:byte(i)]
        if v then
            n = (n << 6) | v
            bits = bits + 6
            if bits >= 8 then
                bits = bits - 8
                out[#out + 1] = string.char((n >> bits) & 255)
            end
        end
    end
    return table.concat(out)
end

M.b64enc, M.b64dec = b64enc, b64dec

-- }}}

local function parse_endpoints(s)
    local out = {}
    for ep in s:gmatch("[^;]+") do
        local host, port = ep:match("^http://%[?([^%]/]+)%]?:(%d+)/?$")
        out[#out + 1] = { host = host, port = math.tointeger(tonumber(port)), url = ep }
    end
    return out
end

local Client = {}
Client.__index = Client

function M.new(conf)
    return setmetatable({
        endpoints = parse_endpoints(conf.etcdEndpoints),
        current = 1,
        timeout = conf.etcdRequestTimeoutMillis,
        max_bytes = conf.etcdMaxResponseBytes or 16 * 1024 * 1024,
        max_inflight = conf.etcdMaxCallsInFlight or 64,
        inflight = 0,
        failures = 0,          -- since the last "unreachable" line
        last_log = -math.huge,
        down = false,
    }, Client)
end

--- True while the last call found no endpoint answering.
function Client:unreachable()
    return self.down
end

function Client:note_failure(err)
    self.down = true
    self.failures = self.failures + 1
    local now = core.mono_ms()
    if now - self.last_log >= 1000 then
        local eps = {}
        for _, e in ipairs(self.endpoints) do
            eps[#eps + 1] = e.url
        end
        log.warn("etcd unreachable (%s): %s (%d failed call(s) in the last second)",
            table.concat(eps, ";"), tostring(err), self.failures)
        self.last_log = now
        self.failures = 0
    end
end

-- POSTs body (a table) to path on the endpoints in turn; the decoded
-- answer, or nil, err.  Calls made for requests are at most
-- etcdMaxCallsInFlight at once (each holds a connection and up to
-- etcdMaxResponseBytes); past it the call fails at once.  The lease's
-- calls (/v3/lease/) are never refused, so a flood of requests cannot
-- starve the renewal that keeps this controller active.
function Client:call(path, body)
    local lease = path:sub(1, 10) == "/v3/lease/"
    if not lease and self.inflight >= self.max_inflight then
        return nil, ("too many etcd calls in flight (etcdMaxCallsInFlight %d)"):format(self.max_inflight)
    end
    self.inflight = self.inflight + 1
    local ok, t, err = pcall(self.call_endpoints, self, path, body)
    self.inflight = self.inflight - 1
    if not ok then
        error(t, 0)
    end
    return t, err
end

function Client:call_endpoints(path, body)
    local payload = assert(cjson.encode(body))
    local n = #self.endpoints
    local err
    for k = 0, n - 1 do
        local i = (self.current - 1 + k) % n + 1
        local ep = self.endpoints[i]
        local status, text = httpc.request(ep.host, ep.port, "POST", path, payload, self.timeout, self.max_bytes)
        if status == 200 then
            local t = cjson.decode(text)
            if type(t) ~= "table" then
                err = "undecodable answer from " .. ep.url
            else
                if self.down then
                    log.info("etcd reachable again at %s", ep.url)
                end
                self.current, self.down = i, false
                return t
            end
        elseif status and status >= 500 then
            -- This member cannot serve now (no quorum: "request timed
            -- out", "no leader", 503): another member may.  A retried txn
            -- is safe: every write compares a revision, so one that landed
            -- here fails its compare there.
            local t = cjson.decode(text)
            local msg = type(t) == "table" and (t.error or t.message) or text
            err = ("%s: HTTP %d %s"):format(ep.url, status, tostring(msg):sub(1, 200))
        elseif status then
            -- etcd answered: an error of the request (no other endpoint
            -- would answer differently).
            local t = cjson.decode(text)
            local msg = type(t) == "table" and (t.error or t.message) or text
            return nil, ("etcd %s: HTTP %d %s"):format(path, status, tostring(msg):sub(1, 200))
        else
            err = ep.url .. ": " .. tostring(text)
        end
    end
    self:note_failure(err)
    return nil, "etcd unreachable: " .. tostring(err)
end

local function int(v)
    return math.tointeger(tonumber(v or 0)) or 0
end

local function prefix_end(p)
    -- The smallest key greater than every key starting with p.
    local last = p:byte(#p)
    return p:sub(1, #p - 1) .. string.char(last + 1)
end

--- How many keys start with prefix (count_only): n | nil, err.
function Client:count(prefix)
    local t, err = self:call("/v3/kv/range", { key = b64enc(prefix), range_end = b64enc(prefix_end(prefix)),
        count_only = true })
    if not t then
        return nil, err
    end
    return int(t.count)
end

function Client:range(key, prefix)
    local body = { key = b64enc(key) }
    if prefix then
        body.range_end = b64enc(prefix_end(key))
    end
    local t, err = self:call("/v3/kv/range", body)
    if not t then
        return nil, err
    end
    local kvs = {}
    for _, kv in ipairs(type(t.kvs) == "table" and t.kvs or {}) do
        kvs[#kvs + 1] = {
            key = b64dec(kv.key), value = b64dec(kv.value), mod = int(kv.mod_revision),
            create = int(kv.create_revision), lease = kv.lease and tostring(kv.lease) or nil,
        }
    end
    return { kvs = kvs, revision = int(t.header and t.header.revision) }
end

--- A compare: {key=, target="MOD"|"CREATE"|"VALUE", result="EQUAL"..., value=}
local function compare(c)
    local out = { key = b64enc(c.key), target = c.target, result = c.result or "EQUAL" }
    if c.target == "MOD" then
        out.mod_revision = tostring(c.value)
    elseif c.target == "CREATE" then
        out.create_revision = tostring(c.value)
    elseif c.target == "VALUE" then
        out.value = b64enc(c.value)
    end
    return out
end

--- An op: {put = key, value =, lease =} | {delete = key [, prefix = true]} | {range = key}
local function op(o)
    if o.put then
        return { request_put = { key = b64enc(o.put), value = b64enc(o.value), lease = o.lease } }
    elseif o.delete then
        return { request_delete_range = { key = b64enc(o.delete),
            range_end = o.prefix and b64enc(prefix_end(o.delete)) or nil } }
    end
    return { request_range = { key = b64enc(o.range) } }
end

local function map(list, fn)
    local out = {}
    for i, v in ipairs(list or {}) do
        out[i] = fn(v)
    end
    return out
end

--- One transaction; returns succeeded (bool), revision | nil, err.
function Client:txn(compares, success, failure)
    -- An empty list would go out as {} (cjson): leave it out.
    local body = { success = map(success, op) }
    if #compares > 0 then
        body.compare = map(compares, compare)
    end
    if failure and #failure > 0 then
        body.failure = map(failure, op)
    end
    local t, err = self:call("/v3/kv/txn", body)
    if not t then
        return nil, err
    end
    -- proto3 JSON leaves false out.
    return t.succeeded == true, int(t.header and t.header.revision)
end

function Client:grant(ttl)
    local t, err = self:call("/v3/lease/grant", { TTL = tostring(ttl) })
    if not t then
        return nil, err
    end
    if t.ID == nil or int(t.TTL) <= 0 then
        return nil, "etcd refused a lease: " .. tostring(t.error)
    end
    return tostring(t.ID)
end

function Client:keepalive(id)
    local t, err = self:call("/v3/lease/keepalive", { ID = id })
    if not t then
        return nil, err
    end
    local r = type(t.result) == "table" and t.result or t
    return int(r.TTL)
end

function Client:revoke(id)
    return self:call("/v3/lease/revoke", { ID = id })
end

return M
