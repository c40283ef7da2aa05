-- What the fake RocketMQ peers share: spec/support/fake_namesrv.lua (a
-- NameServer) and spec/support/fake_broker.lua (a broker).  A fake is a
-- real rmq-server process on loopback whose conf is its module's
-- conf(args), loaded by the server from the repository root (its cwd)
-- through package.path's "./?.lua".  The conf has workers = 1, so the
-- fake's state (messages, recorded frames, knobs) lives in that module,
-- in what conf() made; a spec reads and changes it with the control
-- requests below.
--
--   fake.conf(processors, knobs, dump)  the conf: the fake's processors,
--                     DUMP answered by dump(), SET changing knobs
--   fake.start("fake_broker", args)     starts one (support.server handle)
--   fake.call(addr, cmd)                a reply that must be SUCCESS
--   fake.dump(addr)                     DUMP's reply
--   fake.set(addr, knobs)               SET: each knob sent as a string,
--                     read back as a number where it is one; "none" unsets
local net = require("rmq.net")

local M = {}

-- Codes no RocketMQ peer sends, for the specs' own control requests.
M.DUMP, M.SET, M.FORGET = 7101, 7102, 7103

local function value(v)
    if v == "none" then
        return nil
    end
    return tonumber(v) or v
end

--- The conf table of a fake.  The NameServer role needs no store; the
--- codes the fake does not take are the real NameServer's.
function M.conf(processors, knobs, dump)
    processors[M.DUMP] = function()
        return dump()
    end
    processors[M.SET] = function(ctx, cmd)
        for k, v in pairs(cmd.ext or {}) do
            knobs[k] = value(v)
        end
        return { code = 0 }
    end
    return { role = "namesrv", workers = 1, processors = processors }
end

--- Starts the fake of spec/support/<module>.lua with conf(args); args is
--- plain data (it is written into the conf file).
function M.start(module, args)
    -- Required here, not above: the servers that load the fakes have no
    -- spec/ on their path, and need no support.server.
    local server = require("support.server")
    return server.start({ source = ('return require("spec.support.%s").conf(%s)')
        :format(module, server.serialize(args or {}, "")) })
end

function M.call(addr, cmd)
    local r = assert(net.call(addr, cmd, 30000))
    assert(r.code == 0, r.remark)
    return r
end

function M.dump(addr)
    return M.call(addr, { code = M.DUMP })
end

function M.set(addr, knobs)
    local ext = {}
    for k, v in pairs(knobs) do
        ext[k] = tostring(v)
    end
    M.call(addr, { code = M.SET, ext = ext })
end

return M
