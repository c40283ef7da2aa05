-- The NameServer's request handlers: request code -> function(ctx, cmd).
-- The route registry and the KV store are C (rmq.route), shared by every
-- worker; handlers check headers, decode bodies and shape replies.
--
--   local processor = require "rmq.namesrv.processor"
--   local P, on_close = processor.new(rt, conf)
--
-- Header fields are read by rmq.header (declared specs, parsed in C) with
-- Java's rules (protocol.md §1.10): a missing @CFNotNull field is
-- SYSTEM_ERROR "the custom field <x> is null"; a Long or Integer that
-- does not parse is refused naming the field, required or not (Java's
-- parseLong throws either way); a Boolean is true only for "true" in any
-- case.
local codes = require "rmq.codes"
local conf_mod = require "rmq.conf"
local core = require "rmq.core"
local fastjson = require "rmq.fastjson"
local hdr = require "rmq.header"
local kvconfig = require "rmq.namesrv.kvconfig"
local log = require "rmq.log"
local processors = require "rmq.processors"
local properties = require "rmq.properties"
local register = require "rmq.namesrv.register"
local reply = require "rmq.reply"
local strings = require "rmq.strings"

local M = {}

local req = codes.request
local SUCCESS = codes.response.SUCCESS
local TOPIC_NOT_EXIST = codes.response.TOPIC_NOT_EXIST

local V3_0_11 = codes.version.V3_0_11
local V4_9_4 = codes.version.V4_9_4

-- {{{ Header fields

-- Reads the fields of a compiled spec (rmq.header: the broker's reader,
-- strict and in C); returns a table, or nil and an error reply.
local function header(cmd, spec)
    local h, code, remark = spec:read(cmd)
    if h == nil then
        return nil, reply.error(code, remark)
    end
    return h
end

local REGISTER_HEADER = hdr.compile {
    { "brokerName", "string", true },
    { "brokerAddr", "string", true },
    { "clusterName", "string", true },
    { "haServerAddr", "string", true },
    { "brokerId", "long", true },
    { "compressed", "bool", false },
    { "bodyCrc32", "int", false },
    { "heartbeatTimeoutMillis", "long", false },   -- 5.x
    { "enableActingMaster", "bool", false },       -- 5.x
}

local BROKER_HEADER = hdr.compile {   -- UNREGISTER_BROKER, QUERY_DATA_VERSION
    { "brokerName", "string", true },
    { "brokerAddr", "string", true },
    { "clusterName", "string", true },
    { "brokerId", "long", true },
}

local HEARTBEAT_HEADER = hdr.compile {   -- 5.x BROKER_HEARTBEAT
    { "clusterName", "string", true },
    { "brokerAddr", "string", true },
    { "brokerName", "string", true },
}

local BROKER_NAME_HEADER = hdr.compile { { "brokerName", "string", true } }
local MEMBER_GROUP_HEADER = hdr.compile {   -- 5.x GET_BROKER_MEMBER_GROUP
    { "clusterName", "string", true },
    { "brokerName", "string", true },
}
local DELETE_TOPIC_HEADER = hdr.compile { { "topic", "string", true }, { "clusterName", "string", false } }
local CLUSTER_HEADER = hdr.compile { { "cluster", "string", true } }
local ROUTE_HEADER = hdr.compile {   -- GET_ROUTEINFO_BY_TOPIC
    { "topic", "string", true },
    { "acceptStandardJsonOnly", "bool", false },   -- 4.9.4+ send it; newer ones imply it
}

-- }}}

-- {{{ Run-time configuration (UPDATE_NAMESRV_CONFIG)

local function value_text(v)
    if type(v) == "boolean" or type(v) == "number" or type(v) == "string" then
        return tostring(v)
    end
    return nil
end

-- Checks a text value for a namesrv key; returns the typed value or
-- nil, why.
local function check_value(key, text)
    local e = conf_mod.describe(key)
    if e == nil or e.ignored or not (e.roles.namesrv) then
        return nil, "unknown"
    end
    if e.type ~= "integer" and e.type ~= "number" and e.type ~= "boolean" and e.type ~= "string" then
        return nil, ("key '%s' cannot be changed at run time"):format(key)
    end
    local v, err = conf_mod.coerce(key, text)
    if v == nil then
        return nil, err
    end
    if e.min and v < e.min then
        return nil, ("key '%s' must be >= %s, got %s"):format(key, e.min, text)
    elseif e.max and v > e.max then
        return nil, ("key '%s' must be <= %s, got %s"):format(key, e.max, text)
    end
    if e.enum then
        local ok = false
        for _, a in ipairs(e.enum) do
            ok = ok or a == v
        end
        if not ok then
            return nil, ("key '%s' must be one of %s"):format(key, table.concat(e.enum, ", "))
        end
    end
    if e.check and type(v) == "string" then
        local why = e.check(v)
        if why then
            return nil, ("key '%s' %s"):format(key, why)
        end
    end
    return v
end

-- Keys UPDATE_NAMESRV_CONFIG may change, each with the range a live
-- change must stay in (the conf file keeps the wider one of its def):
-- switches of what the NameServer answers, and the scan period.  Any
-- other known key is refused unless the value is the one in force:
-- paths (kvConfigPath, logFile, rocketmqHome), the listeners, the
-- console and its password, limits, and brokerChannelExpiredTime, which
-- RocketMQ 4.9.8 hard-codes at 120 s (a peer setting it to 1 ms would
-- drop every route at the next scan).
M.LIVE = {
    orderMessageEnable = {},
    clusterTest = {},
    enableAllTopicList = {},
    enableTopicList = {},
    supportActingMaster = {},
    notifyMinBrokerIdChanged = {},
    scanNotActiveBrokerInterval = { min = 1000, max = 60000 },
}

--- The typed value of one UPDATE_NAMESRV_CONFIG entry for a known key,
--- or nil, why (a remark naming the key).  `now` is the value in force.
function M.live_value(key, text, now)
    local v, why = check_value(key, text)
    if v == nil then
        return nil, why
    end
    local live = M.LIVE[key]
    if live == nil then
        if v == now and not conf_mod.describe(key).secret then
            return v
        end
        return nil, ("key '%s' cannot be changed while rmq runs; set it in the conf file and restart"
            .. " (live keys: %s)"):format(key, table.concat(strings.sorted_keys(M.LIVE), ", "))
    end
    if live.min and v < live.min or live.max and v > live.max then
        return nil, ("key '%s' may be changed live only within %d..%d, got %s"):format(key,
            live.min, live.max, text)
    end
    return v
end

-- Keys whose value the C registry reads on every request.
local RT_OPTS = {
    orderMessageEnable = true,
    supportActingMaster = true,
    brokerChannelExpiredTime = true,
}

--- Applies the registry's switches from a conf (start-up and updates).
function M.apply_opts(rt, conf)
    for k in pairs(RT_OPTS) do
        if conf[k] ~= nil then
            rt:set_opt(k, conf[k])
        end
    end
end

--- A view of the conf with the run-time changes applied, refreshed when
--- another worker changed something (rt:config_gen()).
function M.conf_view(rt, conf)
    local view = setmetatable({}, { __index = conf })
    local seen = -1
    return function()
        local gen = rt:config_gen()
        if gen ~= seen then
            seen = gen
            local body = rt:config_overrides()
            local t = body and fastjson.decode(body)
            for k, text in pairs(t and t.table or {}) do
                local v = check_value(k, text)
                if v ~= nil then
                    rawset(view, k, v)
                end
            end
        end
        return view
    end
end

-- }}}

--- The handlers.  Returns P ({[code] = fn}) and on_close(ctx).
-- @param rt    the registry (rmq.route)
-- @param conf  this worker's conf
function M.new(rt, conf)
    local P = {}
    local current = M.conf_view(rt, conf)
    -- Connections of this worker that registered a broker: only their
    -- close has to reach the registry.
    local registered = {}

    for code, h in pairs(kvconfig.processors(rt, conf)) do
        P[code] = h
    end

    -- {{{ Brokers

    P[req.REGISTER_BROKER] = function(ctx, cmd)
        local h, err = header(cmd, REGISTER_HEADER)
        if h == nil then
            log.warn("REGISTER_BROKER from %s refused: %s", ctx.peer, err.remark)
            return err
        end
        local body = cmd.body
        local crc = h.bodyCrc32 or 0
        if crc ~= 0 then
            local actual = core.crc32(body or "") & 0x7FFFFFFF
            if actual ~= crc then
                log.warn("REGISTER_BROKER from %s (%s %s): crc32 not match (header %d, body %d)",
                    ctx.peer, h.brokerName, h.brokerAddr, crc, actual)
                return reply.system_error("crc32 not match")
            end
        end
        local reg, derr = register.decode(body, {
            compressed = h.compressed,
            bare_wrapper = cmd.version < V3_0_11,
            max_inflated = current().registerBodyMaxInflatedSize,
        })
        if reg == nil then
            log.warn("REGISTER_BROKER from %s (%s %s): bad body: %s", ctx.peer, h.brokerName,
                h.brokerAddr, derr)
            return reply.system_error("Failed to decode RegisterBrokerBody: " .. derr)
        end
        local acting = nil
        if cmd:get("enableActingMaster") ~= nil then
            acting = h.enableActingMaster
        end
        local res = rt:register({
            cluster = h.clusterName, addr = h.brokerAddr, name = h.brokerName,
            id = h.brokerId, ha = h.haServerAddr, zone = cmd:get("__ZONE_NAME"),
            timeout = h.heartbeatTimeoutMillis, acting = acting,
            dv = reg.dv, topics = reg.topics, filters = reg.filters, conn = ctx.id,
        })
        registered[ctx.id] = true
        return {
            code = SUCCESS,
            ext = { masterAddr = res.masterAddr, haServerAddr = res.haServerAddr },
            body = rt:kv_list(kvconfig.ORDER_TOPIC_CONFIG),
        }
    end

    P[req.UNREGISTER_BROKER] = function(ctx, cmd)
        local h, err = header(cmd, BROKER_HEADER)
        if h == nil then
            return err
        end
        local n = rt:unregister(h.clusterName, h.brokerAddr, h.brokerName, h.brokerId)
        log.info("UNREGISTER_BROKER %s %s id %d from %s: %s", h.brokerName, h.brokerAddr,
            h.brokerId, ctx.peer, n > 0 and "removed" or "was not registered")
        return { code = SUCCESS }
    end

    P[req.QUERY_DATA_VERSION] = function(ctx, cmd)
        local h, err = header(cmd, BROKER_HEADER)
        if h == nil then
            return err
        end
        local t, derr = fastjson.decode(cmd.body or "")
        if type(t) ~= "table" then
            return reply.system_error("QUERY_DATA_VERSION needs a DataVersion body: " .. (derr or "not an object"))
        end
        local dv = {
            counter = fastjson.int(t.counter) or 0,
            timestamp = fastjson.int(t.timestamp) or 0,
            state = fastjson.int(t.stateVersion),
        }
        local changed, stored = rt:query_dv(h.clusterName, h.brokerAddr, dv)
        return { code = SUCCESS, ext = { changed = changed }, body = stored }
    end

    -- 5.x brokers with enableSlaveActingMaster send this every second
    -- between registrations: a keep-alive, nothing else.
    P[req.BROKER_HEARTBEAT] = function(ctx, cmd)
        local h, err = header(cmd, HEARTBEAT_HEADER)
        if h == nil then
            return err
        end
        rt:heartbeat(h.clusterName, h.brokerAddr)
        return { code = SUCCESS }
    end

    -- 5.x brokers ask it for their group's members (acting master,
    -- slave sync): the addresses of the broker name, by id; the names
    -- answered are the request's, as 5.x does.
    P[req.GET_BROKER_MEMBER_GROUP] = { header = MEMBER_GROUP_HEADER, run = function(ctx, cmd, h)
        return { code = SUCCESS, body = rt:member_group(h.clusterName, h.brokerName) }
    end }

    -- }}}

    -- {{{ Routes

    local NOT_EXIST = "No topic route info in name server for the topic: "

    P[req.GET_ROUTEINFO_BY_TOPIC] = { header = ROUTE_HEADER, run = function(ctx, cmd, h)
        local topic = h.topic
        local std = cmd.version >= V4_9_4 or h.acceptStandardJsonOnly == true
        local body = rt:route(topic, std)
        if body == nil then
            return reply.error(TOPIC_NOT_EXIST, reply.faq(NOT_EXIST .. topic))
        end
        return { code = SUCCESS, body = body }
    end }
    -- A known topic's route is answered in C (rmq.processors.route); the
    -- refusals come here.
    P[req.GET_ROUTEINFO_BY_TOPIC].native = processors.route()

    P[req.GET_BROKER_CLUSTER_INFO] = function(ctx, cmd)
        return { code = SUCCESS, body = rt:cluster_info() }
    end

    P[req.WIPE_WRITE_PERM_OF_BROKER] = function(ctx, cmd)
        local h, err = header(cmd, BROKER_NAME_HEADER)
        if h == nil then
            return err
        end
        local n = rt:wipe_write_perm(h.brokerName)
        log.info("wipe write perm of broker[%s], client: %s, %d", h.brokerName, ctx.peer, n)
        return { code = SUCCESS, ext = { wipeTopicCount = n } }
    end

    P[req.ADD_WRITE_PERM_OF_BROKER] = function(ctx, cmd)
        local h, err = header(cmd, BROKER_NAME_HEADER)
        if h == nil then
            return err
        end
        local n = rt:add_write_perm(h.brokerName)
        log.info("add write perm of broker[%s], client: %s, %d", h.brokerName, ctx.peer, n)
        return { code = SUCCESS, ext = { addTopicCount = n } }
    end

    P[req.DELETE_TOPIC_IN_NAMESRV] = function(ctx, cmd)
        local h, err = header(cmd, DELETE_TOPIC_HEADER)
        if h == nil then
            return err
        end
        local done = rt:delete_topic(h.topic, h.clusterName)
        log.info("delete topic %s%s from %s: %s", h.topic,
            h.clusterName and (" in cluster " .. h.clusterName) or "", ctx.peer,
            done and "deleted" or "no such route")
        return { code = SUCCESS }
    end

    -- }}}

    -- {{{ Topic lists

    local DISABLED = reply.system_error("disable")

    P[req.GET_ALL_TOPIC_LIST_FROM_NAMESERVER] = function(ctx, cmd)
        if not current().enableAllTopicList then
            return DISABLED
        end
        -- encoded once per change of the topic set, shared (docs/hardening-tables.md)
        return { code = SUCCESS, body = rt:topic_list_shared() }
    end

    local function list_handler(which)
        return function(ctx, cmd)
            if not current().enableTopicList then
                return DISABLED
            end
            return { code = SUCCESS, body = rt:topic_list(which) }
        end
    end

    P[req.GET_TOPICS_BY_CLUSTER] = function(ctx, cmd)
        if not current().enableTopicList then
            return DISABLED
        end
        local h, err = header(cmd, CLUSTER_HEADER)
        if h == nil then
            return err
        end
        return { code = SUCCESS, body = rt:topic_list("cluster", h.cluster) }
    end

    P[req.GET_SYSTEM_TOPIC_LIST_FROM_NS] = list_handler("system")
    P[req.GET_UNIT_TOPIC_LIST] = list_handler("unit")
    P[req.GET_HAS_UNIT_SUB_TOPIC_LIST] = list_handler("unit_sub")
    P[req.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST] = list_handler("unit_sub_not_unit")

    -- }}}

    -- {{{ Configuration

    P[req.UPDATE_NAMESRV_CONFIG] = function(ctx, cmd)
        log.info("updateConfig called by %s", ctx.peer)
        local body = cmd.body
        if body == nil then
            return { code = SUCCESS }
        end
        local props, order = properties.parse(body)
        local black = {}
        for k in (current().configBlackList or ""):gmatch("[^;]+") do
            black[strings.trim(k)] = true
        end
        for _, k in ipairs(order) do
            if black[k] then
                log.warn("updateConfig from %s refused: key %s is in configBlackList", ctx.peer, k)
                return reply.black_list()
            end
        end
        -- Check everything before changing anything.
        local good, unknown = {}, {}
        local view = current()
        for _, k in ipairs(order) do
            local v, why = M.live_value(k, props[k], view[k])
            if v == nil and why == "unknown" then
                unknown[#unknown + 1] = k
            elseif v == nil then
                log.warn("updateConfig from %s refused: %s", ctx.peer, why)
                return reply.system_error(why)
            elseif M.LIVE[k] then   -- (another key only when unchanged: nothing to do)
                good[#good + 1] = { k, v }
            end
        end
        for _, kv in ipairs(good) do
            local k, v = kv[1], kv[2]
            rt:config_set(k, value_text(v))
            if RT_OPTS[k] then
                rt:set_opt(k, v)
            end
            log.info("config %s = %s (set by %s)", k, value_text(v), ctx.peer)
        end
        if #unknown > 0 then
            -- RocketMQ ignores keys it does not know; say so.
            log.warn("updateConfig from %s: ignored unknown keys %s", ctx.peer,
                table.concat(unknown, ", "))
            return { code = SUCCESS, remark = "ignored unknown keys: " .. table.concat(unknown, ", ") }
        end
        return { code = SUCCESS }
    end

    P[req.GET_NAMESRV_CONFIG] = function(ctx, cmd)
        local view = current()
        local lines = {}
        for _, k in ipairs(conf_mod.keys_for_role("namesrv")) do
            -- The controller's keys only where this process runs it.
            local off = not view.enableControllerInNamesrv and conf_mod.controller_key(k)
            local text = not off and not conf_mod.describe(k).secret and value_text(view[k]) or nil
            if text ~= nil then
                lines[#lines + 1] = k .. "=" .. text .. "\n"
            end
        end
        return { code = SUCCESS, body = table.concat(lines) }
    end

    -- }}}

    local function on_close(ctx)
        local id = ctx.id
        if registered[id] then
            registered[id] = nil
            rt:conn_closed(id)
        end
    end

    return P, on_close
end

return M
