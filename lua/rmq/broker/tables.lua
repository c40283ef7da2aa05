-- Small broker tables every worker shares (the broker config's
-- DataVersion): JSON values in an rmq.shared map, decoded once per Lua
-- state and cached until the map's version moves, with RocketMQ's
-- DataVersion ({counter, timestamp}) bumped on every change.  The large
-- tables (topics, subscription groups) are typed C tables:
-- rmq.config_table.
--
--   local t = tables.new("broker.topics")
--   t:get(key) -> table | nil       t:all() -> {key = table}
--   t:put(key, value [, if_absent]) -> bool     (bumps the DataVersion)
--   t:put_quiet(key, value [, if_absent])       (does not: start-up
--                                    entries, as Java's constructors add
--                                    them before the file is loaded)
--   t:del(key) -> bool
--   t:data_version() -> {counter=, timestamp=}   t:bump()
--   t:version() -> n   (moves on every write; for "persist if changed")
--
-- Run-time broker settings (UPDATE_BROKER_CONFIG) live here too: every
-- worker has its own copy of the conf, so a change made in one worker
-- is put in a shared map and copied into a state's conf by sync_conf;
-- the keys the C processors act on are set typed as well
-- (rmq.shared.setting, src/broker/bsettings.h), never read back as text:
--
--   tables.set_setting(key, value)      any thread
--   tables.sync_conf(conf) -> conf      cheap when nothing changed
local cjson = require("cjson")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local shared = require("rmq.shared")

local M = {}

M.null = cjson.null

local Table = {}
Table.__index = Table

function M.new(name)
    return setmetatable({
        name = name,
        map = shared.map(name),
        meta = shared.map("broker.meta"),
        cache = nil,
        cached_version = -1,
    }, Table)
end

function Table:version()
    return self.map:version()
end

function Table:count()
    return self.map:count()
end

-- All entries, decoded; rebuilt only when another state wrote.
function Table:all()
    local v = self.map:version()
    if self.cache == nil or v ~= self.cached_version then
        local t = {}
        for k, text in pairs(self.map:all()) do
            t[k] = cjson.decode(text)
        end
        self.cache, self.cached_version = t, v
    end
    return self.cache
end

function Table:get(key)
    return self:all()[key]
end

local function dv_key(self)
    return self.name .. ".dataVersion"
end

local function decode_dv(text)
    local dv = cjson.decode(text)
    return { counter = math.tointeger(dv.counter) or 0,
             timestamp = math.tointeger(dv.timestamp) or 0 }
end

--- The table's DataVersion.  A table that never had one gets
--- {0, now} once (Java's `new DataVersion()`), so that two reads agree.
function Table:data_version()
    local text = self.meta:get(dv_key(self))
    if text == nil then
        self.meta:set(dv_key(self), cjson.encode({ counter = 0, timestamp = core.now_ms() }), true)
        text = self.meta:get(dv_key(self))
    end
    return decode_dv(text)
end

--- DataVersion.nextVersion(): counter + 1, timestamp = now.
function Table:bump()
    local dv = self:data_version()
    dv.counter = dv.counter + 1
    dv.timestamp = core.now_ms()
    self.meta:set(dv_key(self), cjson.encode(dv))
end

--- Sets the DataVersion read from disk.
function Table:set_data_version(dv)
    self.meta:set(dv_key(self), cjson.encode({
        counter = math.tointeger(dv.counter) or 0,
        timestamp = math.tointeger(dv.timestamp) or core.now_ms() }))
end

--- Forgets the DataVersion (a fresh load).
function Table:reset_data_version()
    self.meta:del(dv_key(self))
end

function Table:put(key, value, if_absent)
    local ok = self.map:set(key, cjson.encode(value), if_absent)
    if ok then
        self:bump()
    end
    return ok
end

function Table:put_quiet(key, value, if_absent)
    return self.map:set(key, cjson.encode(value), if_absent)
end

function Table:del(key)
    local ok = self.map:del(key)
    if ok then
        self:bump()
    end
    return ok
end

-- {{{ Cached lookups in a typed table

--- A lookup function over a rmq.config_table handle: name -> config,
--- kept in this state until the table's generation moves (any change
--- anywhere), so a lookup is a table index and a change costs one new
--- cache, not a re-read of the whole table.  Configs returned are
--- shared: read-only.
function M.cached(t)
    local cache, version = {}, -1
    return function(name)
        local v = t:version()
        if v ~= version then
            cache, version = {}, v
        end
        local c = cache[name]
        if c == nil then
            c = t:get(name)
            if c ~= nil then
                cache[name] = c
            end
        end
        return c
    end
end

--- The functions a table module (topics, groups) exposes over its typed
--- table t (and cached, its M.cached(t)), set on mod:
---   mod.get(name) -> config    this state's cached copy (read-only)
---   mod.all() -> {name = config}
---   mod.put(cfg) -> changed    create or replace (admin)
---   mod.delete(name)
---   mod.data_version() -> {counter=, timestamp=}
---   mod.encode_wrapper()       the wrapper JSON of the whole table, byte
---                              for byte as a 4.9.8 broker writes it (the
---                              file, GET_ALL_*_CONFIG; in C)
---   mod.shared_wrapper()       the same bytes, encoded once per table
---                              change and shared by every worker (a
---                              rmq.rcbuf: a reply body queued without a copy)
function M.expose(t, mod, cached)
    function mod.get(name) return cached(name) end
    function mod.all() return t:all() end
    function mod.put(cfg) return t:put(cfg) end
    function mod.delete(name) return t:del(name) end
    function mod.data_version() return t:data_version() end
    function mod.encode_wrapper() return t:encode_wrapper() end
    function mod.shared_wrapper() return t:shared_wrapper() end
    return mod
end

-- }}}

--- DataVersion as fastjson writes it (4.9.8: counter, timestamp).
function M.encode_dv(dv)
    return fastjson.encode({ counter = dv.counter, timestamp = dv.timestamp })
end

-- {{{ Run-time settings

local settings = shared.map("broker.settings")
local replaced = shared.map("broker.replaced_policies")   -- module name -> "1"
local synced = setmetatable({}, { __mode = "k" })   -- conf -> version copied

-- The built-in slave-read rule: while slaveReadPolicy names it and the
-- live console has not replaced its code, the C pull path knows its
-- answer with slaveReadEnable off (the master) and asks nothing;
-- otherwise it asks the policy (pull.lua's hook) on every pull.
local BUILTIN_SLAVE_READ = "rmq.policy.slave_read"

--- Records a run-time change of a conf key (value: string, number or
--- boolean) for every worker: as JSON for the Lua states (sync_conf), and
--- typed for the C processors (rmq.shared.setting) when C reads the key.
function M.set_setting(key, value)
    if key == "slaveReadPolicy" then
        local replaced_now = replaced:get(tostring(value)) ~= nil
        shared.setting("slaveReadPolicyBuiltin", value == BUILTIN_SLAVE_READ and not replaced_now)
    else
        shared.setting(key, value)
    end
    settings:set(key, cjson.encode({ v = value }))
end

--- Records that the live console swapped the code of policy module
--- `name` (rmq.console_live.swap); `current` is the slaveReadPolicy in
--- force, re-recorded so that the C pull path stops using its built-in
--- copy of the default rule.
function M.mark_replaced(name, current)
    replaced:set(name, "1")
    if current == name then
        M.set_setting("slaveReadPolicy", current)
    end
end

--- The code of `name` is the one the server started with again (a
--- reload from an unchanged file): the C pull path may use its copy.
function M.unmark_replaced(name, current)
    if replaced:del(name) and current == name then
        M.set_setting("slaveReadPolicy", current)
    end
end

--- Copies the run-time changes into this state's conf table (one
--- shared-map version read when nothing changed).  Returns conf.
function M.sync_conf(conf)
    local v = settings:version()
    if synced[conf] ~= v then
        for k, text in pairs(settings:all()) do
            local value = cjson.decode(text).v
            if math.type(value) == "float" and math.tointeger(value) then
                value = math.tointeger(value)
            end
            conf[k] = value
        end
        synced[conf] = v
    end
    return conf
end

--- Forgets the run-time changes (start-up: the conf file rules).
function M.clear_settings()
    settings:clear()
    shared.settings_clear()
    synced = setmetatable({}, { __mode = "k" })
end

-- }}}

return M
