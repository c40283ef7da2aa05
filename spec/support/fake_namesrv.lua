-- A fake NameServer (spec/support/fake.lua says how a fake runs).  It
-- records what brokers send it (REGISTER_BROKER, UNREGISTER_BROKER,
-- QUERY_DATA_VERSION, 5.x BROKER_HEARTBEAT), for the broker registration specs, and answers
-- like a 4.9.8 NameServer: 0 to a registration (masterAddr/haServerAddr
-- and a KV body when told to), QUERY_DATA_VERSION with changed = whether
-- the DataVersion differs from the one last registered from that
-- address.  Given routes (topic -> TopicRouteData JSON), it answers
-- GET_ROUTEINFO_BY_TOPIC from them alone, for the client specs' fake
-- brokers (fake_broker.cluster), whatever registered.
--
--   local fns = fake_namesrv.start({ routes = {...}, masterAddr = ..., ... })
--   fake_namesrv.frames(addr [, code])   what it got, in order
--   fake_namesrv.set(addr, knobs)        how registrations are answered:
--                                        masterAddr, haServerAddr, kv, register_code
--   fake_namesrv.forget(addr, brokerAddr)
local cjson = require("cjson")
local fake = require("spec.support.fake")

local M = {}

local function hex(s)
    return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function unhex(s)
    return (s:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end))
end

function M.conf(knobs)
    knobs = knobs or {}
    local frames = {}
    local dvs = {}   -- brokerAddr -> DataVersion JSON last registered

    local function record(ctx, cmd)
        local ext = {}
        for k, v in pairs(cmd.ext or {}) do
            ext[k] = v
        end
        frames[#frames + 1] = {
            code = cmd.code, oneway = cmd.oneway, version = cmd.version, language = cmd.language,
            ext = ext, body = cmd.body and hex(cmd.body) or nil, conn = ctx.id,
        }
    end

    local function dv_of(body, compressed)
        if body == nil then
            return nil
        end
        if compressed then
            local core = require("rmq.core")
            local raw = core.inflate(body)
            return raw and raw:sub(5, 4 + string.unpack(">i4", raw)) or nil
        end
        local t = cjson.decode(body)
        return cjson.encode(t.topicConfigSerializeWrapper.dataVersion)
    end

    local function same_dv(a, b)
        if a == nil or b == nil then
            return false
        end
        local x, y = cjson.decode(a), cjson.decode(b)
        return x.counter == y.counter and x.timestamp == y.timestamp
    end

    local processors = {
        [103] = function(ctx, cmd)
            record(ctx, cmd)
            local e = cmd.ext or {}
            local ok, dv = pcall(dv_of, cmd.body, e.compressed == "true")
            if ok and e.brokerAddr then
                dvs[e.brokerAddr] = dv
            end
            return { code = knobs.register_code or 0,
                     ext = { masterAddr = knobs.masterAddr, haServerAddr = knobs.haServerAddr },
                     body = knobs.kv }
        end,
        [104] = function(ctx, cmd)
            record(ctx, cmd)
            return { code = 0 }
        end,
        [904] = function(ctx, cmd)   -- 5.x BROKER_HEARTBEAT (one-way from brokers)
            record(ctx, cmd)
            return { code = 0 }
        end,
        [322] = function(ctx, cmd)
            record(ctx, cmd)
            local stored = dvs[(cmd.ext or {}).brokerAddr]
            local changed = not same_dv(stored, cmd.body)
            return { code = 0, ext = { changed = changed and "true" or "false" }, body = stored }
        end,
        [fake.FORGET] = function(ctx, cmd)
            dvs[(cmd.ext or {}).brokerAddr] = nil
            return { code = 0 }
        end,
    }
    local routes = knobs.routes
    if routes then
        processors[105] = function(ctx, cmd)
            local t = cmd.ext.topic
            if routes[t] == nil then
                return { code = 17, remark = "No topic route info in name server for the topic: " .. t }
            end
            return { code = 0, body = routes[t] }
        end
    end
    return fake.conf(processors, knobs, function()
        return { code = 0, body = cjson.encode(frames) }
    end)
end

-- {{{ The spec side

function M.start(knobs)
    return fake.start("fake_namesrv", knobs)
end

--- Every frame the fake NameServer at addr got, in order: {code=,
--- oneway=, version=, language=, ext=, body=(bytes)}; `code` filters.
function M.frames(addr, code)
    local out = {}
    for _, f in ipairs(cjson.decode(fake.dump(addr).body)) do
        if code == nil or f.code == code then
            if f.body then
                f.body = unhex(f.body)
            end
            out[#out + 1] = f
        end
    end
    return out
end

M.set = fake.set

--- Forgets the DataVersion registered from brokerAddr (the next
--- QUERY_DATA_VERSION from it says changed).
function M.forget(addr, broker_addr)
    fake.call(addr, { code = fake.FORGET, ext = { brokerAddr = broker_addr } })
end

-- }}}

return M
