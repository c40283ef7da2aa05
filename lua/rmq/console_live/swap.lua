-- Live code swaps on every worker at once: a policy module reloaded from
-- its file or replaced by source, or a processor handler replaced, in
-- two phases so that all workers switch or none does.
--
--   1. prepare: the main thread compiles the code first (a syntax or
--      load error is refused there), then writes the request into the
--      shared map "console.swap" and raises "console.swap"; each worker's
--      participant task compiles and loads it in its own state, keeps the
--      result aside and answers ok or the error.
--   2. commit (every worker answered ok within consoleSwapTimeoutMillis)
--      or abort (any error, any silence): each worker installs what it
--      prepared, or drops it, and answers "applied".  Until then the old
--      code keeps answering, everywhere.
--
-- A module table is updated in place (its fields replaced), so modules
-- that captured it (rmq.policy.slave_read_lag keeps rmq.policy.slave_read)
-- see the new functions; rmq.policy.generation() moves so cached policy
-- functions are looked up again (rmq.broker.pull).  A module whose old
-- table had functions must still have them (a policy without its
-- `suggest` is refused).
--
-- Main thread:
--   swap.modules({{name=, source=|nil}, ...}, timeout_ms) -> report | nil, err
--       source nil: the module's file on package.path, read again
--   swap.handler(role, code, source, timeout_ms) -> report | nil, err
--       source: a chunk returning function(ctx, cmd [, h])
--   report = {gen=, workers=n, names={...}}
-- Workers (rmq.server.worker): swap.worker_start(conf, dispatchers, natives)
local cjson = require("cjson")
local net = require("rmq.net")
local shared = require("rmq.shared")
local policy = require("rmq.policy")
local lua_source = require("rmq.lua_source")

local M = {}

local map = shared.map("console.swap")
local EVENT, ACK = "console.swap", "console.swap.ack"
-- How often a waiting participant looks at the map even without a wake-up
-- (a raise that came between its look and its wait).
local RECHECK_MS = 200

M.loaded_from = {}   -- this state: module name -> "file" | "console" (and gen)

-- {{{ Compiling (every state: the same rules everywhere)

--- The source `require` would load for a module (the copy compiled into
--- the binary, or a file on package.path: rmq.lua_source keeps the
--- order), or nil, err.
function M.module_source(name)
    local where = lua_source.locate(name)
    if where == nil then
        return nil, ("module %s not found on the Lua path"):format(name)
    end
    if where == "embedded" then
        return lua_source.text(name)
    end
    local f, err = io.open(where, "rb")
    if f == nil then
        return nil, ("cannot read module %s: %s"):format(name, tostring(err))
    end
    local src = f:read("a")
    f:close()
    return src
end

-- A message without the server's directories ("/x/y/lua/rmq/a.lua:3:"
-- becomes "rmq/a.lua:3:").
function M.scrub(msg)
    msg = tostring(msg)
    msg = msg:gsub("/[%w%._%-/]*/lua/rmq/", "rmq/")
    return (msg:gsub("/[%w%._%-]+/[%w%._%-/]*/([%w%._%-]+)", "%1"))
end

local function compile_module(name, source)
    local chunk, err = load(source, "=" .. name, "t")
    if chunk == nil then
        return nil, M.scrub(err)
    end
    local ok, mod = pcall(chunk, name)
    if not ok then
        return nil, ("%s: load error: %s"):format(name, M.scrub(mod))
    end
    if mod == nil then
        mod = true
    end
    local old = package.loaded[name]
    if type(old) == "table" then
        if type(mod) ~= "table" then
            return nil, ("%s must return a table, as the running module does"):format(name)
        end
        local missing = {}
        for k, v in pairs(old) do
            if type(v) == "function" and type(mod[k]) ~= "function" then
                missing[#missing + 1] = k
            end
        end
        if #missing > 0 then
            table.sort(missing)
            return nil, ("%s lacks function(s) the running module has: %s"):format(name,
                table.concat(missing, ", "))
        end
    end
    return mod
end

local function compile_handler(source)
    local chunk, err = load(source, "=handler", "t")
    if chunk == nil then
        return nil, M.scrub(err)
    end
    local ok, fn = pcall(chunk)
    if not ok then
        return nil, "load error: " .. M.scrub(fn)
    end
    if type(fn) ~= "function" then
        return nil, "the handler chunk must return a function(ctx, cmd [, h])"
    end
    return fn
end

local function install_module(name, mod)
    local old = package.loaded[name]
    if type(old) == "table" and type(mod) == "table" then
        for k in pairs(old) do
            old[k] = nil
        end
        for k, v in pairs(mod) do
            old[k] = v
        end
    else
        package.loaded[name] = mod
    end
end

-- }}}

-- {{{ The participant (each worker)

local worker = { started = false }

local function stopping()
    return map:get("stopping") ~= nil or require("rmq.console_io").host_stopping()
end

-- What this state makes of request `req`: {kind, items={{name, value}}}
-- or nil, err.
local function prepare(req)
    local out = {}
    if req.kind == "handler" then
        local d = worker.dispatchers[req.role]
        if d == nil then
            return nil, ("this server has no role %s"):format(tostring(req.role))
        end
        local natives = worker.natives[req.role] or {}
        if natives[req.code] ~= nil then
            return nil, ("request code %d is served in C (nativeProcessors): set nativeProcessors = false"
                .. " in the conf to replace it live"):format(req.code)
        end
        local fn, err = compile_handler(req.source)
        if fn == nil then
            return nil, err
        end
        out[1] = { fn = fn }
        return out
    end
    for i, it in ipairs(req.items) do
        local mod, err = compile_module(it.name, it.source)
        if mod == nil then
            return nil, err
        end
        out[i] = { name = it.name, mod = mod }
    end
    return out
end

local function commit(req, prepared)
    if req.kind == "handler" then
        worker.dispatchers[req.role].set(req.code, prepared[1].fn)
    else
        for _, p in ipairs(prepared) do
            install_module(p.name, p.mod)
            M.loaded_from[p.name] = req.from or "console"
        end
        policy.bump()
    end
end

local function participant()
    local id = net.worker_id()
    local seen = tonumber(map:get("gen") or "0") or 0   -- requests before we started are not ours
    local pending = {}
    while not stopping() do
        local gen = tonumber(map:get("gen") or "0") or 0
        if gen > seen then
            seen = gen
            local ok, req = pcall(cjson.decode, map:get("req." .. gen) or "null")
            local prepared, err
            if ok and type(req) == "table" then
                prepared, err = prepare(req)
            else
                err = "unreadable request"
            end
            if prepared then
                pending[gen] = { req = req, prepared = prepared }
                map:set(("ack.%d.%d"):format(gen, id), "ok")
            else
                map:set(("ack.%d.%d"):format(gen, id), "error: " .. tostring(err))
            end
            net.raise(ACK)
        end
        for g, p in pairs(pending) do
            local outcome = map:get("outcome." .. g)
            if outcome ~= nil then
                pending[g] = nil
                if outcome == "commit" then
                    local ok, err = pcall(commit, p.req, p.prepared)
                    map:set(("applied.%d.%d"):format(g, id), ok and "ok" or ("error: " .. M.scrub(err)))
                else
                    map:set(("applied.%d.%d"):format(g, id), "dropped")
                end
                net.raise(ACK)
            end
        end
        net.wait_event(EVENT, RECHECK_MS)
    end
end

--- Worker: starts the participant.  dispatchers: {role = {set=fn}},
--- natives: {role = {[code] = np}} (the codes C answers).
function M.worker_start(conf, dispatchers, natives)
    worker.dispatchers, worker.natives = dispatchers, natives or {}
    if not worker.started and net.worker_id() ~= nil then
        worker.started = true
        net.spawn(participant)
    end
    M.workers = conf.workers
end

--- Main thread, at shutdown: participants end at their next look.
function M.stop()
    map:set("stopping", "1")
    net.raise(EVENT)
end

-- }}}

-- {{{ The coordinator (main thread)

local function wait_all(prefix, gen, n, deadline)
    local got = {}
    while true do
        local all = true
        for w = 0, n - 1 do
            if got[w] == nil then
                local v = map:get(("%s.%d.%d"):format(prefix, gen, w))
                if v ~= nil then
                    got[w] = v
                else
                    all = false
                end
            end
        end
        if all then
            return got, true
        end
        local left = deadline - require("rmq.core").mono_ms()
        if left <= 0 then
            return got, false
        end
        net.wait_event(ACK, math.max(1, math.min(math.floor(left), 50)))
    end
end

local function cleanup(gen, n)
    for w = 0, n - 1 do
        map:del(("ack.%d.%d"):format(gen, w))
        map:del(("applied.%d.%d"):format(gen, w))
    end
    map:del("req." .. gen)
    map:del("outcome." .. gen)
end

local busy = false

local function run(req, n, timeout_ms)
    if busy then
        return nil, "another swap is in progress"
    end
    busy = true
    local core = require("rmq.core")
    local gen = (tonumber(map:get("gen") or "0") or 0) + 1
    map:set("req." .. gen, cjson.encode(req))
    map:set("gen", tostring(gen))
    net.raise(EVENT)
    local deadline = core.mono_ms() + timeout_ms
    local acks, complete = wait_all("ack", gen, n, deadline)
    -- "worker 0, 1: why": the same refusal once for the workers it names.
    local errs, by_why, order = {}, {}, {}
    for w = 0, n - 1 do
        local a = acks[w]
        local why
        if a == nil then
            why = ("no answer within %d ms"):format(timeout_ms)
        elseif a ~= "ok" then
            why = a:gsub("^error: ", "")
        end
        if why then
            if by_why[why] == nil then
                by_why[why] = {}
                order[#order + 1] = why
            end
            table.insert(by_why[why], tostring(w))
        end
    end
    for _, why in ipairs(order) do
        errs[#errs + 1] = ("worker %s: %s"):format(table.concat(by_why[why], ", "), why)
    end
    local outcome = (complete and #errs == 0) and "commit" or "abort"
    map:set("outcome." .. gen, outcome)
    net.raise(EVENT)
    local applied = wait_all("applied", gen, n, core.mono_ms() + timeout_ms)
    cleanup(gen, n)
    busy = false
    if outcome == "abort" then
        return nil, "refused, no worker switched: " .. table.concat(errs, "; ")
    end
    for w = 0, n - 1 do
        if applied[w] ~= "ok" then
            -- Should not happen: prepare did the work that can fail.
            return nil, ("worker %d did not confirm the switch: %s"):format(w, tostring(applied[w]))
        end
    end
    return { gen = gen, workers = n }
end

--- Main thread: reloads or replaces modules on every worker (and here).
function M.modules(items, n, timeout_ms, from)
    local req = { kind = "modules", items = {}, from = from }
    local here = {}
    for i, it in ipairs(items) do
        local src = it.source
        if src == nil then
            local err
            src, err = M.module_source(it.name)
            if src == nil then
                return nil, err
            end
        end
        -- This state first: a broken snippet never reaches a worker.
        local mod, err = compile_module(it.name, src)
        if mod == nil then
            return nil, err
        end
        here[i] = { name = it.name, mod = mod }
        req.items[i] = { name = it.name, source = src }
    end
    local report, err = run(req, n, timeout_ms)
    if report == nil then
        return nil, err
    end
    for _, p in ipairs(here) do
        install_module(p.name, p.mod)
        M.loaded_from[p.name] = from or "console"
    end
    policy.bump()
    report.names = {}
    for i, it in ipairs(items) do
        report.names[i] = it.name
    end
    return report
end

--- Main thread: replaces one processor handler on every worker.
function M.handler(role, code, source, n, timeout_ms)
    local fn, err = compile_handler(source)
    if fn == nil then
        return nil, err
    end
    return run({ kind = "handler", role = role, code = code, source = source }, n, timeout_ms)
end

-- }}}

return M
