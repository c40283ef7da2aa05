-- A NameServer made of conf handlers that records what brokers send it
-- (REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION), for the
-- broker registration specs.  It answers like a 4.9.8 NameServer: 0 to
-- a registration (masterAddr/haServerAddr and a KV body when told to),
-- QUERY_DATA_VERSION with changed = whether the DataVersion differs from
-- the one last registered from that address.  Loaded by a server conf:
--
--   return require("spec.support.fake_namesrv").conf()
--
-- and read from a spec with M.frames(addr), M.set(addr, knobs),
-- M.forget(addr, brokerAddr).  workers = 1: the state is this module's.
local cjson = require("cjson")

local M = {}

M.DUMP, M.SET, M.FORGET = 7101, 7102, 7103

local function hex(s)
    return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function unhex(s)
    return (s:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end))
end

function M.conf()
    local frames = {}
    local knobs = {}
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

    return {
        role = "namesrv",
        workers = 1,
        processors = {
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
            [322] = function(ctx, cmd)
                record(ctx, cmd)
                local stored = dvs[(cmd.ext or {}).brokerAddr]
                local changed = not same_dv(stored, cmd.body)
                return { code = 0, ext = { changed = changed and "true" or "false" }, body = stored }
            end,
            [M.DUMP] = function()
                return { code = 0, body = cjson.encode(frames) }
            end,
            [M.SET] = function(ctx, cmd)
                local e = cmd.ext or {}
                knobs.masterAddr = e.masterAddr
                knobs.haServerAddr = e.haServerAddr
                knobs.kv = e.kv
                knobs.register_code = tonumber(e.register_code)
                return { code = 0 }
            end,
            [M.FORGET] = function(ctx, cmd)
                dvs[(cmd.ext or {}).brokerAddr] = nil
                return { code = 0 }
            end,
        },
    }
end

-- {{{ The spec side

local function call(addr, cmd)
    local net = require("rmq.net")
    local r = assert(net.call(addr, cmd, 3000))
    assert(r.code == 0, r.remark)
    return r
end

--- Every frame the fake NameServer at addr got, in order: {code=,
--- oneway=, version=, language=, ext=, body=(bytes)}; `code` filters.
function M.frames(addr, code)
    local r = call(addr, { code = M.DUMP })
    local out = {}
    for _, f in ipairs(cjson.decode(r.body)) do
        if code == nil or f.code == code then
            if f.body then
                f.body = unhex(f.body)
            end
            out[#out + 1] = f
        end
    end
    return out
end

--- What registrations are answered: masterAddr, haServerAddr, kv (the
--- KVTable body), register_code.
function M.set(addr, knobs)
    local ext = {}
    for k, v in pairs(knobs) do
        ext[k] = tostring(v)
    end
    call(addr, { code = M.SET, ext = ext })
end

--- Forgets the DataVersion registered from brokerAddr (the next
--- QUERY_DATA_VERSION from it says changed).
function M.forget(addr, broker_addr)
    call(addr, { code = M.FORGET, ext = { brokerAddr = broker_addr } })
end

-- }}}

return M
