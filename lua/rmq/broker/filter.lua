-- Filters on the broker side, for what Lua still decides about them.
-- The TAG rules (FilterAPI.buildSubscriptionData: split at "||",
-- trimmed, the tag hash codes) are C's alone: proto/heartbeat.h
-- hb_normalize, used by the heartbeat and pull processors.
--
--   filter.is_tag(expressionType) -> bool   TAG, also when absent
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

local M = {}

--- True for the TAG expression type (also when absent, as Java).
function M.is_tag(expression_type)
    return expression_type == nil or expression_type == "" or expression_type == "TAG"
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
