-- Remoting for the admin commands: calls to NameServers and brokers that
-- raise admin errors, and the look-ups mqadmin's CommandUtil makes
-- (the masters of a cluster, a broker name's addresses).
--
-- An admin error is a table {exit=, message=, addr=, code=, remark=}
-- whose tostring is one line naming the server and RocketMQ's response
-- code: exit 1 a server refused, 2 usage, 3 nothing answered.
--
--   local remote = require("rmq.admin.remote")
--   local ctx = remote.context("127.0.0.1:9876", 5000 [, credentials])
--       (credentials: rmq.client.credentials; every request signed)
--   local reply = remote.ok(ctx, addr, { code = codes.request.GET_BROKER_CONFIG })
--   local info = remote.cluster_info(ctx)     -- ClusterInfo, decoded
local codes = require("rmq.codes")
local net = require("rmq.net")

local M = {}

local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.message end

function M.error(exit, message, fields)
    local e = setmetatable(fields or {}, Error)
    e.exit, e.message = exit, message
    return e
end

function M.is_error(v)
    return getmetatable(v) == Error
end

function M.usage(message)
    return M.error(2, message)
end

--- A server's refusal: "ADDR refused REQUEST: NAME (code N): remark".
function M.refused(addr, code, remark, request)
    local name = codes.response_name[code] or "UNKNOWN"
    local what = request and codes.request_name[request] and (" " .. codes.request_name[request]) or ""
    local text = tostring(remark or ""):gsub("[\r\n]+", " "):match("^%s*(.-)%s*$")
    return M.error(1, ("%s refused%s: %s (code %d)%s"):format(addr, what, name, code,
        text ~= "" and (": " .. text) or ""), { addr = addr, code = code, remark = remark })
end

function M.unreachable(addr, err)
    return M.error(3, ("%s: %s"):format(addr, tostring(err)), { addr = addr })
end

--- A failure that is not a response code (an unreadable body, a
--- cluster that does not exist): exit 1.
function M.failed(addr, message)
    return M.error(1, addr and (addr .. ": " .. message) or message, { addr = addr })
end

function M.context(namesrv, timeout, credentials)
    local list = {}
    for a in tostring(namesrv or ""):gmatch("[^;,%s]+") do
        list[#list + 1] = a
    end
    return { namesrv = list, timeout = timeout or 5000, credentials = credentials }
end

local function stringify(ext)
    if ext == nil then
        return nil
    end
    local out = {}
    for k, v in pairs(ext) do
        out[k] = tostring(v)
    end
    return out
end

--- One request; the reply whatever its code.  Raises unreachable.
function M.call(ctx, addr, cmd)
    local r, err = net.call(addr, { code = cmd.code, ext = stringify(cmd.ext), body = cmd.body,
                                    language = cmd.language, credentials = ctx.credentials }, ctx.timeout)
    if r == nil then
        error(M.unreachable(addr, err), 0)
    end
    return r
end

--- One request that must succeed (code 0, or one of `also`).
function M.ok(ctx, addr, cmd, also)
    local r = M.call(ctx, addr, cmd)
    if r.code ~= 0 and not (also and also[r.code]) then
        error(M.refused(addr, r.code, r.remark, cmd.code), 0)
    end
    return r
end

--- A request to the NameServers, in turn until one answers (as the Java
--- client does); a refusal is final.
function M.ns(ctx, cmd, also)
    if #ctx.namesrv == 0 then
        error(M.usage("no NameServer address (-n or NAMESRV_ADDR)"), 0)
    end
    local last
    for _, addr in ipairs(ctx.namesrv) do
        local ok, r = pcall(M.ok, ctx, addr, cmd, also)
        if ok then
            return r, addr
        end
        if not M.is_error(r) or r.exit ~= 3 then
            error(r, 0)
        end
        last = r
    end
    error(last, 0)
end

--- Decodes a JSON body as fastjson writes it (integers stay integers,
--- bare and object keys are read; see decode_fastjson); raises on garbage.
function M.json(body, addr)
    local t = M.decode_fastjson(body, addr)
    if type(t) ~= "table" then
        error(M.failed(addr, "unreadable JSON body: not an object"), 0)
    end
    return t
end

-- {{{ fastjson with object keys
-- fastjson writes a Map whose keys are beans (MessageQueue in
-- TopicStatsTable.offsetTable, ConsumeStats.offsetTable) with the key
-- object itself before the colon: {{"brokerName":"b","queueId":0,"topic":"T"}:{...}}.
-- No JSON library reads that; this small reader does: an object whose
-- keys are not all strings comes back as a list of {key=, value=}
-- (mark: .entries = true).  Numbers stay Lua numbers (integers when
-- integral), null is nil.

local decode_value

local function skip_ws(s, i)
    return s:find("[^ \t\r\n]", i) or #s + 1
end

local function decode_string(s, i)
    -- s:sub(i, i) == '"'
    local out, j = {}, i + 1
    while true do
        local k = s:find('["\\]', j)
        if k == nil then
            error("unterminated string", 0)
        end
        out[#out + 1] = s:sub(j, k - 1)
        if s:sub(k, k) == '"' then
            return table.concat(out), k + 1
        end
        local c = s:sub(k + 1, k + 1)
        local map = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }
        if map[c] then
            out[#out + 1] = map[c]
            j = k + 2
        elseif c == "u" then
            local hex = s:sub(k + 2, k + 5)
            local cp = tonumber(hex, 16)
            if cp == nil then
                error("bad \\u escape", 0)
            end
            j = k + 6
            if cp >= 0xD800 and cp <= 0xDBFF and s:sub(j, j + 1) == "\\u" then
                local lo = tonumber(s:sub(j + 2, j + 5), 16)
                if lo and lo >= 0xDC00 and lo <= 0xDFFF then
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                    j = j + 6
                end
            end
            out[#out + 1] = utf8.char(cp)
        else
            error("bad escape", 0)
        end
    end
end

decode_value = function(s, i, depth)
    if depth > 64 then
        error("nested too deep", 0)
    end
    i = skip_ws(s, i)
    local c = s:sub(i, i)
    if c == "{" then
        local pairs_, plain, all_strings = {}, {}, true
        i = skip_ws(s, i + 1)
        if s:sub(i, i) == "}" then
            return plain, i + 1
        end
        while true do
            local k
            k, i = decode_value(s, i, depth + 1)
            i = skip_ws(s, i)
            if s:sub(i, i) ~= ":" then
                error("':' expected at " .. i, 0)
            end
            local v
            v, i = decode_value(s, i + 1, depth + 1)
            if type(k) == "number" then
                -- fastjson's bare numeric keys ({0:"addr"}): as strings,
                -- the way cjson-decoded bodies elsewhere in rmq key them.
                k = tostring(math.tointeger(k) or k)
            elseif type(k) ~= "string" then
                all_strings = false
            end
            pairs_[#pairs_ + 1] = { key = k, value = v }
            if type(k) == "string" then
                plain[k] = v
            end
            i = skip_ws(s, i)
            local d = s:sub(i, i)
            if d == "}" then
                i = i + 1
                break
            elseif d ~= "," then
                error("',' or '}' expected at " .. i, 0)
            end
            i = i + 1
        end
        if all_strings then
            return plain, i
        end
        pairs_.entries = true
        return pairs_, i
    elseif c == "[" then
        local list, n = {}, 0
        i = skip_ws(s, i + 1)
        if s:sub(i, i) == "]" then
            return list, i + 1
        end
        while true do
            local v
            v, i = decode_value(s, i, depth + 1)
            n = n + 1
            list[n] = v
            i = skip_ws(s, i)
            local d = s:sub(i, i)
            if d == "]" then
                return list, i + 1
            elseif d ~= "," then
                error("',' or ']' expected at " .. i, 0)
            end
            i = i + 1
        end
    elseif c == '"' then
        return decode_string(s, i)
    elseif s:sub(i, i + 3) == "true" then
        return true, i + 4
    elseif s:sub(i, i + 4) == "false" then
        return false, i + 5
    elseif s:sub(i, i + 3) == "null" then
        return nil, i + 4
    else
        local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
        if num == nil or num == "" then
            error("unexpected character at " .. i, 0)
        end
        return math.tointeger(tonumber(num)) or tonumber(num), i + #num
    end
end

--- Decodes fastjson text, object keys included (see above).
function M.decode_fastjson(body, addr)
    local ok, v = pcall(decode_value, body or "", 1, 0)
    if not ok then
        error(M.failed(addr, "unreadable JSON body: " .. tostring(v)), 0)
    end
    return v
end

--- The entries of a decoded map, whatever its keys: {{key=, value=}, ...}.
function M.entries(t)
    if type(t) ~= "table" then
        return {}
    end
    if t.entries then
        return t
    end
    local out = {}
    for k, v in pairs(t) do
        out[#out + 1] = { key = k, value = v }
    end
    return out
end

-- }}}

--- ClusterInfo from the NameServer: {brokerAddrTable=, clusterAddrTable=}.
function M.cluster_info(ctx)
    local r, addr = M.ns(ctx, { code = codes.request.GET_BROKER_CLUSTER_INFO })
    local info = M.json(r.body or "{}", addr)
    info.brokerAddrTable = info.brokerAddrTable or {}
    info.clusterAddrTable = info.clusterAddrTable or {}
    return info
end

--- A topic's TopicRouteData (TOPIC_NOT_EXIST raises a refusal).
function M.route(ctx, topic)
    local r, addr = M.ns(ctx, { code = codes.request.GET_ROUTEINFO_BY_TOPIC, ext = { topic = topic } })
    return M.json(r.body, addr)
end

local sorted_keys = require("rmq.strings").sorted_keys
M.sorted_keys = sorted_keys

local function cluster_brokers(ctx, info, cluster)
    local names = info.clusterAddrTable[cluster]
    if names == nil then
        error(M.failed(nil, ("cluster %s not found: make sure the specified clusterName exists or the "
            .. "name server connected to is correct"):format(cluster)), 0)
    end
    local list = {}
    for _, n in ipairs(names) do
        list[#list + 1] = n
    end
    table.sort(list)
    return list
end

-- The addresses of a cluster's brokers: with all, masters and slaves
-- (by broker name, then id), else the masters only.
local function cluster_addrs(ctx, cluster, info, all)
    info = info or M.cluster_info(ctx)
    local out = {}
    for _, bn in ipairs(cluster_brokers(ctx, info, cluster)) do
        local addrs = (info.brokerAddrTable[bn] or {}).brokerAddrs or {}
        for _, id in ipairs(all and sorted_keys(addrs) or { "0" }) do
            out[#out + 1] = addrs[id]
        end
    end
    return out
end

--- The master addresses of a cluster (CommandUtil.fetchMasterAddrByClusterName).
function M.masters(ctx, cluster, info)
    return cluster_addrs(ctx, cluster, info, false)
end

--- Every address of a cluster, masters and slaves
--- (CommandUtil.fetchMasterAndSlaveAddrByClusterName).
function M.all_addrs(ctx, cluster, info)
    return cluster_addrs(ctx, cluster, info, true)
end

--- The broker names of a cluster, sorted.
function M.broker_names(ctx, cluster, info)
    return cluster_brokers(ctx, info or M.cluster_info(ctx), cluster)
end

--- A command's check: -b brokerAddr or -c <cluster_key> must be given.
function M.need_broker_or(cluster_key)
    return function(o)
        if not o.brokerAddr and not o[cluster_key] then
            error(M.usage(("one of -b brokerAddr or -c %s is required"):format(cluster_key)), 0)
        end
    end
end

--- A command's check: -i interval, when given, is a positive number.
function M.check_interval(o)
    if o.interval and not (tonumber(o.interval) and tonumber(o.interval) > 0) then
        error(M.usage("-i interval must be a positive number of seconds"), 0)
    end
end

--- A command's every: -i interval in ms, or nil (runs once).  Safe on a
--- bad -i, which the command's check then refuses (every is computed first).
function M.every_interval(o)
    local n = tonumber(o.interval)
    return n and n > 0 and n * 1000 or nil
end

--- The targets of a "-b ADDR or -c CLUSTER" command: {addr, ...}; with
--- all=true a cluster gives its slaves too.
function M.targets(ctx, o, cluster_key, all)
    if o.brokerAddr then
        return { o.brokerAddr }
    end
    M.need_broker_or(cluster_key)(o)
    return all and M.all_addrs(ctx, o[cluster_key]) or M.masters(ctx, o[cluster_key])
end

--- A KVTable body ({"table":{...}}) as a Lua table of strings.
function M.kvtable(body, addr)
    local t = M.json(body, addr)
    return type(t.table) == "table" and t.table or {}
end

--- A java.util.Properties text (key=value lines) as a table.
--- mqadmin's text of getNamesrvConfig / getControllerConfig: per entry
--- {addr=, config={k=v}}, a "====addr====" line, then the keys in order.
function M.format_config(list)
    local out = {}
    for _, e in ipairs(list) do
        out[#out + 1] = ("============%s============"):format(e.addr)
        for _, k in ipairs(M.sorted_keys(e.config)) do
            out[#out + 1] = ("%-50s=  %s"):format(k, e.config[k])
        end
    end
    return table.concat(out, "\n")
end

function M.properties(text)
    local out = {}
    for line in tostring(text or ""):gmatch("[^\n]+") do
        local k, v = line:match("^([^=#!][^=]*)=(.*)$")
        if k then
            out[k] = v:gsub("\r$", "")
        end
    end
    return out
end

return M
