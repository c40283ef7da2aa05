-- The topic and group names `rmq repl` completes: fetched from the
-- NameServer (GET_ALL_TOPIC_LIST_FROM_NAMESERVER) and the masters
-- (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), kept for ttl ms, at most max names
-- of each kind (the first, sorted).  A Tab must not hang: requests for
-- completion have a short timeout, and a failure leaves the names as
-- they were (or empty).
--
--   local names = require("rmq.repl.names").new({ namesrv = function() return "h:9876" end,
--                                                 ttl = 10000, max = 10000, timeout = 1000 })
--   names:topics() -> {sorted names}    names:groups()    names:invalidate()
--   names:topics(true)                  fetched now; raises on failure (topic_list())
local codes = require("rmq.codes")
local core = require("rmq.core")
local net = require("rmq.net")
local route = require("rmq.client.route")

local M = {}

local Names = {}
Names.__index = Names

local function failure(exit, message)
    return setmetatable({ exit = exit, message = message }, { __tostring = function(e) return e.message end })
end

local function bounded(set, max)
    local list = {}
    for name in pairs(set) do
        list[#list + 1] = name
    end
    table.sort(list)
    for i = #list, max + 1, -1 do
        list[i] = nil
    end
    return list
end

-- One request to the first NameServer that answers -> reply, addr.
function Names:namesrv_call(req, timeout)
    local last = "no NameServer address"
    for _, addr in ipairs(route.parse_namesrv(self.namesrv())) do
        local r, err = net.call(addr, req, timeout)
        if r then
            return r, addr
        end
        last = addr .. ": " .. tostring(err)
    end
    error(failure(3, last), 0)
end

local function decode(r, addr, what)
    if r.code ~= 0 then
        error(failure(1, ("%s refused %s (code %d): %s"):format(addr, what, r.code, tostring(r.remark))), 0)
    end
    local doc = route.decode_json(r.body or "{}")
    if type(doc) ~= "table" then
        error(failure(1, ("%s: unreadable %s body"):format(addr, what)), 0)
    end
    return doc
end

function Names:fetch_topics(timeout)
    local r, addr = self:namesrv_call({ code = codes.request.GET_ALL_TOPIC_LIST_FROM_NAMESERVER }, timeout)
    local doc = decode(r, addr, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER")
    local set = {}
    for _, t in ipairs(doc.topicList or {}) do
        if type(t) == "string" then
            set[t] = true
        end
    end
    return bounded(set, self.max)
end

function Names:fetch_groups(timeout)
    local r, addr = self:namesrv_call({ code = codes.request.GET_BROKER_CLUSTER_INFO }, timeout)
    local info = decode(r, addr, "GET_BROKER_CLUSTER_INFO")
    local set, asked = {}, 0
    for _, b in ipairs(require("rmq.tools.broker_status").brokers(info)) do
        if b.id == 0 then
            asked = asked + 1
            local g = net.call(b.addr, { code = codes.request.GET_ALL_SUBSCRIPTIONGROUP_CONFIG }, timeout)
            local doc = g and g.code == 0 and route.decode_json(g.body or "{}")
            for name in pairs(type(doc) == "table" and doc.subscriptionGroupTable or {}) do
                if type(name) == "string" then
                    set[name] = true
                end
            end
        end
    end
    return bounded(set, self.max)
end

local function cached(self, kind, fetch, now)
    local c = self.cache[kind]
    if now or c == nil or core.now_ms() - c.at > self.ttl then
        if now then
            local list = fetch(self, self.timeout)
            self.cache[kind] = { at = core.now_ms(), list = list }
            return list
        end
        local ok, list = pcall(fetch, self, self.complete_timeout)
        -- A failed fetch is retried after ttl too, not on every Tab.
        self.cache[kind] = { at = core.now_ms(), list = ok and list or (c and c.list) or {} }
    end
    return self.cache[kind].list
end

function Names:topics(now)
    return cached(self, "topics", Names.fetch_topics, now)
end

function Names:groups(now)
    return cached(self, "groups", Names.fetch_groups, now)
end

--- Forgets the names: the next completion fetches them again.
function Names:invalidate()
    self.cache = {}
end

function M.new(opts)
    return setmetatable({
        namesrv = opts.namesrv, ttl = opts.ttl or 10000, max = opts.max or 10000,
        timeout = opts.timeout or 5000, complete_timeout = opts.complete_timeout or 1000, cache = {},
    }, Names)
end

return M
