-- What the group, consumer, producer, message and offset admin families
-- share: one request to a NameServer or broker with the error as the CLI
-- prints it, the cluster and route look-ups DefaultMQAdminExt makes, and
-- a reader for fastjson bodies whose maps are keyed by objects
-- (ConsumeStats.offsetTable is Map<MessageQueue, OffsetWrapper>, written
-- {{"brokerName":"a","queueId":0,"topic":"T"}:{...}}), which no strict
-- JSON decoder takes.
--
--   local rpc = require("rmq.admin.rpc")
--   local c = rpc.new({ namesrv = "127.0.0.1:9876", timeout = 5000 })
--   local r, err, exit = c:ok(addr, cmd, "GET_CONSUME_STATS")
--
-- Every failing call returns nil, a one-line message naming the server
-- and RocketMQ's response code, and the exit code: 1 the server refused,
-- 3 unreachable.
local net = require("rmq.net")
local codes = require("rmq.codes")
local route = require("rmq.client.route")

local req = codes.request

local M = {}

M.EXIT_REFUSED, M.EXIT_USAGE, M.EXIT_UNREACHABLE = 1, 2, 3

-- Request codes by number, for the error lines.
local code_names = {}
for name, n in pairs(req) do
    code_names[n] = name
end

-- {{{ a lenient fastjson reader

-- Objects come back as tables keyed by their string keys; entries whose
-- key is an object or a number are also listed, in order, under
-- t[M.ENTRIES] as {key, value} pairs (the key decoded).
M.ENTRIES = "\0entries"
M.null = setmetatable({}, { __name = "null" })

local function decode_error(s, i, what)
    error(("bad JSON at byte %d: %s (near %q)"):format(i, what, s:sub(i, i + 20)), 0)
end

local escapes = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }

local parse_value

local function skip(s, i)
    return s:find("[^ \t\r\n]", i) or #s + 1
end

local function parse_string(s, i)
    local out, j = {}, i + 1
    while true do
        local k = s:find('["\\]', j)
        if not k then
            decode_error(s, i, "unterminated string")
        end
        out[#out + 1] = s:sub(j, k - 1)
        if s:sub(k, k) == '"' then
            return table.concat(out), k + 1
        end
        local e = s:sub(k + 1, k + 1)
        if e == "u" then
            local cp = tonumber(s:sub(k + 2, k + 5), 16)
            if not cp then
                decode_error(s, k, "bad \\u escape")
            end
            out[#out + 1] = utf8.char(cp)
            j = k + 6
        elseif escapes[e] then
            out[#out + 1] = escapes[e]
            j = k + 2
        else
            decode_error(s, k, "bad escape")
        end
    end
end

local function parse_object(s, i)
    local t, entries = {}, nil
    i = skip(s, i + 1)
    if s:sub(i, i) == "}" then
        return t, i + 1
    end
    while true do
        local key
        key, i = parse_value(s, i)
        i = skip(s, i)
        if s:sub(i, i) ~= ":" then
            decode_error(s, i, "':' expected")
        end
        local v
        v, i = parse_value(s, skip(s, i + 1))
        if type(key) == "string" then
            t[key] = v
        else
            entries = entries or {}
            entries[#entries + 1] = { key, v }
            if type(key) == "number" then
                t[tostring(math.tointeger(key) or key)] = v
            end
        end
        i = skip(s, i)
        local c = s:sub(i, i)
        if c == "}" then
            t[M.ENTRIES] = entries
            return t, i + 1
        elseif c ~= "," then
            decode_error(s, i, "',' or '}' expected")
        end
        i = skip(s, i + 1)
    end
end

local function parse_array(s, i)
    local t = {}
    i = skip(s, i + 1)
    if s:sub(i, i) == "]" then
        return t, i + 1
    end
    while true do
        local v
        v, i = parse_value(s, i)
        t[#t + 1] = v
        i = skip(s, i)
        local c = s:sub(i, i)
        if c == "]" then
            return t, i + 1
        elseif c ~= "," then
            decode_error(s, i, "',' or ']' expected")
        end
        i = skip(s, i + 1)
    end
end

parse_value = function(s, i)
    i = skip(s, i)
    local c = s:sub(i, i)
    if c == "{" then
        return parse_object(s, i)
    elseif c == "[" then
        return parse_array(s, i)
    elseif c == '"' then
        return parse_string(s, i)
    elseif s:find("^true", i) then
        return true, i + 4
    elseif s:find("^false", i) then
        return false, i + 5
    elseif s:find("^null", i) then
        return M.null, i + 4
    end
    local num = s:match("^%-?%d+%.?%d*[eE]?[%+%-]?%d*", i)
    if num == nil or num == "" then
        decode_error(s, i, "a value expected")
    end
    return math.tointeger(tonumber(num)) or tonumber(num), i + #num
end

--- Decodes a fastjson body; the value, or nil and the reason.
function M.decode(s)
    if type(s) ~= "string" or s == "" then
        return nil, "empty body"
    end
    local ok, v, i = pcall(parse_value, s, 1)
    if not ok then
        return nil, v
    end
    if skip(s, i) <= #s then
        return nil, ("bad JSON at byte %d: trailing text"):format(i)
    end
    return v
end

--- The {key, value} entries of a map written by fastjson (object keys),
--- or of a plain string-keyed object.
function M.entries(t)
    if type(t) ~= "table" then
        return {}
    end
    if t[M.ENTRIES] then
        return t[M.ENTRIES]
    end
    local out = {}
    for k, v in pairs(t) do
        out[#out + 1] = { k, v }
    end
    return out
end

--- MessageQueue.compareTo: topic, then broker name, then queue id.
function M.mq_less(a, b)
    if a.topic ~= b.topic then
        return a.topic < b.topic
    end
    if a.brokerName ~= b.brokerName then
        return a.brokerName < b.brokerName
    end
    return a.queueId < b.queueId
end

-- }}}

local C = {}
C.__index = C

--- ctx: {namesrv = "a:9876;b:9876", timeout = ms (default 5000)}.
function M.new(ctx)
    return setmetatable({
        namesrvs = route.parse_namesrv(ctx.namesrv or os.getenv("NAMESRV_ADDR") or "127.0.0.1:9876"),
        timeout = ctx.timeout or 5000,
    }, C)
end

--- One request; the reply (any code), or nil, message, 3.
function C:call(addr, cmd, timeout)
    local r, err = net.call(addr, cmd, timeout or self.timeout)
    if not r then
        return nil, ("%s: unreachable: %s"):format(addr, tostring(err)), M.EXIT_UNREACHABLE
    end
    return r
end

--- The refusal line for a reply of another code than SUCCESS.
function M.refusal(addr, cmd, r)
    local what = code_names[cmd.code] or tostring(cmd.code)
    return ("%s: %s (%d) refused: code %d %s"):format(addr, what, cmd.code, r.code,
                                                       (r.remark or ""):gsub("[\r\n].*", ""))
end

--- One request that must succeed: the reply, or nil, message, 1|3.
function C:ok(addr, cmd, timeout)
    local r, err, exit = self:call(addr, cmd, timeout)
    if not r then
        return nil, err, exit
    end
    if r.code ~= 0 then
        return nil, M.refusal(addr, cmd, r), M.EXIT_REFUSED, r.code
    end
    return r
end

--- A request whose SUCCESS reply carries a JSON body: the decoded body.
function C:json(addr, cmd, timeout)
    local r, err, exit, code = self:ok(addr, cmd, timeout)
    if not r then
        return nil, err, exit, code
    end
    local t, derr = M.decode(r.body or "")
    if t == nil then
        return nil, ("%s: unreadable reply body: %s"):format(addr, derr), M.EXIT_REFUSED
    end
    return t, r
end

--- A request to the NameServers in turn until one answers.
function C:namesrv_json(cmd)
    local err, exit = "no NameServer address (-n or NAMESRV_ADDR)", M.EXIT_UNREACHABLE
    for _, addr in ipairs(self.namesrvs) do
        local t, e, x = self:json(addr, cmd)
        if t then
            return t
        end
        err, exit = e, x
        if x ~= M.EXIT_UNREACHABLE then
            break
        end
    end
    return nil, err, exit
end

--- ClusterInfo {brokerAddrTable = {name = BrokerData}, clusterAddrTable}.
function C:cluster_info()
    if self.cluster_cache == nil then
        local t, err, exit = self:namesrv_json({ code = req.GET_BROKER_CLUSTER_INFO })
        if not t then
            return nil, err, exit
        end
        self.cluster_cache = t
    end
    return self.cluster_cache
end

local function addrs_of(bd)
    local a = {}
    for _, e in ipairs(M.entries(bd.brokerAddrs)) do
        a[tostring(e[1])] = e[2]
    end
    return a
end

M.addrs_of = addrs_of

--- BrokerData.selectBrokerAddr: the master, else any slave.
function M.select_addr(bd)
    local a = addrs_of(bd)
    if a["0"] then
        return a["0"]
    end
    local ids = {}
    for id in pairs(a) do
        ids[#ids + 1] = id
    end
    table.sort(ids)
    return ids[1] and a[ids[1]]
end

--- CommandUtil.fetchMasterAddrByClusterName: sorted master addresses.
function C:cluster_masters(cluster)
    local info, err, exit = self:cluster_info()
    if not info then
        return nil, err, exit
    end
    local names = (info.clusterAddrTable or {})[cluster]
    if names == nil then
        return nil, ("cluster %s not found (the NameServer knows %s)"):format(cluster,
            self:cluster_names(info)), M.EXIT_REFUSED
    end
    local out = {}
    for _, name in ipairs(names) do
        local bd = (info.brokerAddrTable or {})[name]
        local master = bd and addrs_of(bd)["0"]
        if master then
            out[#out + 1] = master
        end
    end
    table.sort(out)
    return out
end

function C:cluster_names(info)
    local names = {}
    for name in pairs(info.clusterAddrTable or {}) do
        names[#names + 1] = name
    end
    table.sort(names)
    return #names > 0 and table.concat(names, ", ") or "none"
end

--- Every broker: list of {cluster=, name=, addr= (selectBrokerAddr), addrs=}.
function C:brokers()
    local info, err, exit = self:cluster_info()
    if not info then
        return nil, err, exit
    end
    local cluster_of = {}
    for cluster, names in pairs(info.clusterAddrTable or {}) do
        for _, n in ipairs(names) do
            cluster_of[n] = cluster
        end
    end
    local out = {}
    for name, bd in pairs(info.brokerAddrTable or {}) do
        out[#out + 1] = { cluster = cluster_of[name], name = name, addr = M.select_addr(bd), addrs = addrs_of(bd) }
    end
    table.sort(out, function(a, b) return a.name < b.name end)
    return out
end

--- The -b or -c targets of a command: a list of broker addresses.
function C:targets(o, cmdname)
    if o.b then
        return { o.b }
    elseif o.c then
        return self:cluster_masters(o.c)
    end
    return nil, cmdname .. ": -b brokerAddr or -c clusterName is required", M.EXIT_USAGE
end

--- A topic's route (TopicRouteData) from the NameServers.
function C:route(topic)
    local r, err, code = route.fetch(self.namesrvs, topic, self.timeout)
    if not r then
        if code then
            return nil, ("%s: GET_ROUTEINFO_BY_TOPIC (105) refused: code %d %s"):format(
                table.concat(self.namesrvs, ";"), code, err), M.EXIT_REFUSED
        end
        return nil, err, M.EXIT_UNREACHABLE
    end
    return r
end

--- The masters of a topic's route: list of {name=, addr=}, by name.
function C:route_masters(topic)
    local r, err, exit = self:route(topic)
    if not r then
        return nil, err, exit
    end
    local out = {}
    for _, bd in ipairs(r.brokerDatas or {}) do
        local m = addrs_of(bd)["0"]
        if m then
            out[#out + 1] = { name = bd.brokerName, addr = m }
        end
    end
    table.sort(out, function(a, b) return a.name < b.name end)
    return out, r
end

--- Broker name -> master address (or selectBrokerAddr) over the cluster.
function C:broker_addr(name)
    local list, err, exit = self:brokers()
    if not list then
        return nil, err, exit
    end
    for _, b in ipairs(list) do
        if b.name == name then
            return b.addrs["0"] or b.addr
        end
    end
    return nil, ("broker %s not found in the cluster info"):format(name), M.EXIT_REFUSED
end

--- The offset header of GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP.
function C:queue_offset(addr, code, topic, qid, timestamp)
    local r, err, exit = self:ok(addr, { code = code, ext = { topic = topic, queueId = qid, timestamp = timestamp } })
    if not r then
        return nil, err, exit
    end
    return tonumber((r.ext or {}).offset) or 0
end

--- DefaultMQAdminExt.examineConsumeStats(group [, topic]): every master
--- of %RETRY%group's route asked GET_CONSUME_STATS; {offsetTable = list
--- of {mq=, brokerOffset=, consumerOffset=, lastTimestamp=}, consumeTps}.
function C:consume_stats(group, topic)
    local masters, err, exit = self:route_masters("%RETRY%" .. group)
    if not masters then
        return nil, err, exit
    end
    local out = { offsetTable = {}, consumeTps = 0 }
    for _, b in ipairs(masters) do
        local t, e, x = self:json(b.addr, { code = req.GET_CONSUME_STATS,
                                            ext = { consumerGroup = group, topic = topic } })
        if not t then
            return nil, e, x
        end
        for _, kv in ipairs(M.entries(t.offsetTable)) do
            local mq, w = kv[1], kv[2]
            out.offsetTable[#out.offsetTable + 1] = {
                mq = { topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId },
                brokerOffset = w.brokerOffset or 0, consumerOffset = w.consumerOffset or 0,
                lastTimestamp = w.lastTimestamp or 0,
            }
        end
        out.consumeTps = out.consumeTps + (tonumber(t.consumeTps) or 0)
    end
    table.sort(out.offsetTable, function(a, b) return M.mq_less(a.mq, b.mq) end)
    if topic and #out.offsetTable == 0 then
        return nil, ("Not found the consumer group consume stats, because return offset table is empty, "
            .. "maybe the consumer not consume any message"), M.EXIT_REFUSED
    end
    return out
end

--- examineConsumerConnectionInfo(group): the first master of the retry
--- topic's route that knows the group (GET_CONSUMER_CONNECTION_LIST).
function C:consumer_connection(group, addr)
    if addr then
        return self:json(addr, { code = req.GET_CONSUMER_CONNECTION_LIST, ext = { consumerGroup = group } })
    end
    local masters, err, exit = self:route_masters("%RETRY%" .. group)
    if not masters then
        return nil, err, exit
    end
    local code
    for _, b in ipairs(masters) do
        local t
        t, err, exit, code = self:json(b.addr, { code = req.GET_CONSUMER_CONNECTION_LIST,
                                                 ext = { consumerGroup = group } })
        if t then
            return t, b.addr
        end
    end
    return nil, err or ("no broker serves %%RETRY%%%s"):format(group), exit or M.EXIT_REFUSED, code
end

--- getConsumerRunningInfo: GET_CONSUMER_RUNNING_INFO (the broker relays
--- it to the client's connection) at the first broker of %RETRY%group's
--- route; the ConsumerRunningInfo body decoded.
function C:running_info(group, client_id, jstack)
    local r, err, exit = self:route("%RETRY%" .. group)
    if not r then
        return nil, err, exit
    end
    local bds = {}
    for _, bd in ipairs(r.brokerDatas or {}) do
        bds[#bds + 1] = bd
    end
    table.sort(bds, function(a, b) return a.brokerName < b.brokerName end)
    for _, bd in ipairs(bds) do
        local addr = M.select_addr(bd)
        if addr then
            return self:json(addr, { code = req.GET_CONSUMER_RUNNING_INFO,
                                     ext = { consumerGroup = group, clientId = client_id,
                                             jstackEnable = jstack and true or false } }, self.timeout * 3)
        end
    end
    return nil, ("no broker serves %%RETRY%%%s"):format(group), M.EXIT_REFUSED
end

--- "yyyy-MM-dd HH:mm:ss" (UtilAll.YYYY_MM_DD_HH_MM_SS), local time.
function M.date(ms)
    ms = tonumber(ms) or 0
    return os.date("%Y-%m-%d %H:%M:%S", ms // 1000)
end

--- "yyyy-MM-dd HH:mm:ss,SSS" (UtilAll.timeMillisToHumanString2).
function M.date_ms(ms)
    ms = math.tointeger(tonumber(ms) or 0) or 0
    return os.date("%Y-%m-%d %H:%M:%S", ms // 1000) .. (",%03d"):format(ms % 1000)
end

--- MQVersion.getVersionDesc: from V4_0_0_SNAPSHOT (212) on two ordinals
--- a release (SNAPSHOT, release), ten patches a minor, ten minors a
--- major; 3.x ordinals are irregular and shown as the number.
function M.version_desc(v)
    v = math.tointeger(tonumber(v))
    if v == nil then
        return "-"
    elseif v >= 612 then
        return "HIGHER_VERSION"
    elseif v < 212 then
        return tostring(v)
    end
    local k = v - 212
    local rel = k // 2
    return ("V%d_%d_%d%s"):format(4 + rel // 100, rel // 10 % 10, rel % 10, k % 2 == 0 and "_SNAPSHOT" or "")
end

--- Left-justified columns: fmt is a list of widths (nil = last, as is).
function M.row(widths, values, sep)
    local parts = {}
    for i, v in ipairs(values) do
        local w = widths[i]
        v = tostring(v)
        parts[i] = (w and i < #values) and (v .. string.rep(" ", w - #v)) or v
    end
    return table.concat(parts, sep or "  ")
end

return M
