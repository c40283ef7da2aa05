-- Subscriptions on the broker side (RocketMQ's FilterAPI and
-- ExpressionMessageFilter for TAG expressions): what a PULL's
-- `subscription` header or a heartbeat's SubscriptionData means, and the
-- tag hash codes the store matches consume queue entries against.
--
--   filter.build(topic, subString, expressionType) -> sub | nil, err
--   filter.normalize(sd)  a heartbeat's SubscriptionData, from any client
--                         (subVersion as number or string, arrays missing,
--                         rocketmq-client-cpp's atoi codeSet) -> sub
--   filter.codes(sub)     nil (everything matches) or {hash, ...} for
--                         st:get(topic, qid, offset, max, codes)
--
-- A sub is {topic=, subString=, tagsSet={...}, codeSet={...},
-- subVersion=, expressionType="TAG"|..., classFilterMode=bool}.  codeSet
-- is always rebuilt from the tags here (Java String.hashCode): the C++
-- client sends atoi(tag) in it (protocol.md 4.4), so a broker that
-- trusted it would filter out every message.  Pure: no I/O.
--
-- SQL92 (enablePropertyFilter; RocketMQ's ConsumerFilterManager and
-- FilterFactory):
--   filter.compile_sql(conf, expressionType, expr) -> compiled | nil, err
--       rmq.filter's C compiler, within the filterExpressionMax* limits;
--       kept per worker by (type, expression) so a subscription compiles
--       once, not per pull or per message (filterCompiledCacheSize; the
--       cache is cleared when full); err is a 4.9.8 broker's wording
--   filter.pull_filter(conf, topic, group) -> pf | nil   the Lua pull
--       filter conf.pullFilters names for "topic@group" or else "topic":
--       pf = {name=, fn=, body=, account=, calls=, dropped=, nanos=,
--       errors=}; the pull processor (C) shows fn each record a read
--       would return and then calls pf.account(calls, dropped, err, nanos)
--   filter.account(conf, pf, calls, dropped, err, nanos)  counts one
--       read's calls; logs the first error of a filter (once per worker)
--       and, every pullFilterReportMillis, its cost
local core = require("rmq.core")
local sqlc = require("rmq.filter")
local log = require("rmq.log")
local policy = require("rmq.policy")
local message = require("rmq.message")
local strings = require("rmq.strings")

local M = {}

M.SUB_ALL = "*"

local trim = strings.trim   -- linear: subString is the client's

--- True for the TAG expression type (also when absent, as Java).
function M.is_tag(expression_type)
    return expression_type == nil or expression_type == "" or expression_type == "TAG"
end

local function integer(v)
    if type(v) == "string" then
        v = tonumber(v)
    end
    if type(v) ~= "number" then
        return nil
    end
    -- nil for what no integer is (NaN, +-inf, beyond 2^63): math.floor
    -- would hand those back as floats.
    return math.tointeger(v) or math.tointeger(math.floor(v))
end

M.integer = integer

-- Fills tagsSet/codeSet from subString (FilterAPI.buildSubscriptionData).
local function parse_tags(sub)
    local s = sub.subString
    if s == nil or s == "" or trim(s) == M.SUB_ALL then
        sub.subString = M.SUB_ALL
        return sub
    end
    -- Java's subString.split("\\|\\|"): cut at each "||" from the left;
    -- what follows the last one is the last part ("a|" stays "a|", as
    -- the heartbeat path and the C pull read it: broker/heartbeat.c).
    local seen = {}
    local pos = 1
    while pos do
        local bar = s:find("||", pos, true)
        local tag = trim(s:sub(pos, bar and bar - 1))
        if tag ~= "" and not seen[tag] then
            seen[tag] = true
            sub.tagsSet[#sub.tagsSet + 1] = tag
            sub.codeSet[#sub.codeSet + 1] = message.java_hash(tag)
        end
        pos = bar and bar + 2
    end
    return sub
end

--- The subscription a PULL with FLAG_SUBSCRIPTION describes.
-- Returns nil, reason when it cannot be parsed (SUBSCRIPTION_PARSE_FAILED).
function M.build(topic, sub_string, expression_type)
    if type(topic) ~= "string" or topic == "" then
        return nil, "no topic"
    end
    local sub = {
        topic = topic,
        subString = sub_string,
        tagsSet = {},
        codeSet = {},
        subVersion = core.now_ms(),
        expressionType = M.is_tag(expression_type) and "TAG" or expression_type,
        classFilterMode = false,
    }
    if sub.expressionType ~= "TAG" then
        -- SQL92 and friends: kept as written; the caller decides whether
        -- the broker supports them.
        if sub_string == nil or sub_string == "" then
            return nil, "empty " .. tostring(expression_type) .. " expression"
        end
        return sub
    end
    return parse_tags(sub)
end

--- A heartbeat's SubscriptionData, normalised.  Returns nil, reason when
--- it has no topic.
function M.normalize(sd)
    if type(sd) ~= "table" or type(sd.topic) ~= "string" or sd.topic == "" then
        return nil, "subscription without a topic"
    end
    local sub = {
        topic = sd.topic,
        subString = type(sd.subString) == "string" and sd.subString or M.SUB_ALL,
        tagsSet = {},
        codeSet = {},
        subVersion = integer(sd.subVersion) or 0,
        expressionType = M.is_tag(sd.expressionType) and "TAG" or tostring(sd.expressionType),
        classFilterMode = sd.classFilterMode == true,
    }
    if sub.expressionType ~= "TAG" then
        return sub
    end
    return parse_tags(sub)
end

--- Tag codes to filter by, or nil when every message matches.
function M.codes(sub, class_filter)
    if sub == nil or class_filter or sub.classFilterMode then
        return nil
    end
    if sub.expressionType ~= "TAG" or sub.subString == M.SUB_ALL then
        return nil
    end
    return sub.codeSet  -- may be empty ("||"): nothing matches, as Java
end

-- {{{ SQL92

local compiled, ncompiled = {}, 0
local failed = {}

function M.compile_sql(conf, expression_type, expr)
    if expression_type ~= "SQL92" then
        -- FilterFactory.get(type) is null: the compile throws (an NPE)
        return nil, "java.lang.NullPointerException: no filter for expression type "
            .. tostring(expression_type)
    end
    if type(expr) ~= "string" or expr == "" then
        return nil, "java.lang.IllegalArgumentException: Expression can't be null!"
    end
    local f = compiled[expr]
    if f then
        return f
    end
    local err = failed[expr]
    if err then
        return nil, err
    end
    if ncompiled >= (conf.filterCompiledCacheSize or 1024) then
        compiled, failed, ncompiled = {}, {}, 0
    end
    f, err = sqlc.compile(expr, conf.filterExpressionMaxLength or 16384,
                          conf.filterExpressionMaxDepth or 128, conf.filterExpressionMaxNodes or 4096)
    ncompiled = ncompiled + 1
    if f then
        compiled[expr] = f
    else
        failed[expr] = err
    end
    return f, err
end

-- }}}

-- {{{ Lua pull filters

local resolved = {}     -- key -> pf | false

local function resolve(conf, key)
    local spec = conf.pullFilters and conf.pullFilters[key]
    if spec == nil then
        return nil
    end
    local pf = resolved[key]
    if pf ~= nil then
        return pf or nil
    end
    local fn, body = spec, false
    if type(spec) == "table" then
        fn, body = spec.fn, spec.body == true
    end
    local err
    if type(fn) == "string" then
        local mod, name = fn:match("^(.+)%.([%w_]+)$")
        fn, err = policy.resolve(mod, name)
    end
    if type(fn) ~= "function" then
        log.error("pullFilters[%s]: %s; its messages are not filtered", key, tostring(err))
        resolved[key] = false
        return nil
    end
    pf = { name = key, fn = fn, body = body, calls = 0, dropped = 0, nanos = 0, errors = 0,
           reported = core.mono_ms() }
    pf.account = function(calls, dropped, ferr, nanos)
        M.account(conf, pf, calls, dropped, ferr, nanos)
    end
    resolved[key] = pf
    return pf
end

function M.pull_filter(conf, topic, group)
    if conf.pullFilters == nil or next(conf.pullFilters) == nil then
        return nil
    end
    return resolve(conf, topic .. "@" .. group) or resolve(conf, topic)
end

function M.account(conf, pf, calls, dropped, err, nanos)
    pf.calls = pf.calls + (calls or 0)
    pf.dropped = pf.dropped + (dropped or 0)
    pf.nanos = pf.nanos + (nanos or 0)
    if err then
        pf.errors = pf.errors + 1
        if pf.errors == 1 then
            -- once per worker: a filter failing per message would flood
            -- the log; the message is kept (a broken filter loses nothing)
            log.error("pull filter %s failed (the message is kept; logged once): %s", pf.name, err)
        end
    end
    local every = conf.pullFilterReportMillis or 60000
    local now = core.mono_ms()
    if every > 0 and now - pf.reported >= every then
        pf.reported = now
        log.info("pull filter %s: %d calls, %d dropped, %d errors, %.3f ms in the filter",
                 pf.name, pf.calls, pf.dropped, pf.errors, pf.nanos / 1e6)
    end
end

-- }}}

return M
