-- Broker tables every worker shares (topic configs, subscription groups,
-- ...): JSON values in an rmq.shared map, decoded once per Lua state and
-- cached until the map's version moves, with RocketMQ's DataVersion
-- ({counter, timestamp}) bumped on every change.
--
--   local t = tables.new("broker.topics")
--   t:get(key) -> table | nil       t:all() -> {key = table}
--   t:put(key, value)               t:del(key) -> bool
--   t:data_version() -> {counter=, timestamp=}
--   t:version() -> n   (moves on every write; for "persist if changed")
local cjson = require("cjson")
local core = require("rmq.core")
local shared = require("rmq.shared")

local M = {}

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

function Table:bump()
    local key = self.name .. ".dataVersion"
    local dv = self:data_version()
    dv.counter = dv.counter + 1
    dv.timestamp = core.now_ms()
    self.meta:set(key, cjson.encode(dv))
end

function Table:data_version()
    local text = self.meta:get(self.name .. ".dataVersion")
    if text then
        local dv = cjson.decode(text)
        return { counter = math.tointeger(dv.counter) or 0,
                 timestamp = math.tointeger(dv.timestamp) or 0 }
    end
    return { counter = 0, timestamp = core.now_ms() }
end

--- Sets the DataVersion read from disk.
function Table:set_data_version(dv)
    self.meta:set(self.name .. ".dataVersion", cjson.encode({
        counter = math.tointeger(dv.counter) or 0,
        timestamp = math.tointeger(dv.timestamp) or core.now_ms() }))
end

function Table:put(key, value, if_absent)
    local ok = self.map:set(key, cjson.encode(value), if_absent)
    if ok then
        self:bump()
    end
    return ok
end

function Table:del(key)
    local ok = self.map:del(key)
    if ok then
        self:bump()
    end
    return ok
end

return M
