-- `rmq admin getBrokerEpoch` (5.x's tools/command/ha/GetBrokerEpochSubCommand:
-- same name, options and output) against a real broker set in controller
-- mode: two rmq brokers, a controller on a real etcd, a NameServer
-- (spec/support/failover.lua).  Each broker answers GET_BROKER_EPOCH_CACHE
-- (1007) from its epoch file; the command finds the set's brokers through
-- the NameServer, masters and slaves.
local server = require("support.server")
local failover = require("support.failover")
local tmp = require("support.tmp")
local net = require("rmq.net")
local cjson = require("cjson")

local function max_phy(addr)
    local r = net.call(addr, { code = 28 }, 5000)
    return r and r.code == 0 and tonumber(cjson.decode(r.body).table.commitLogMaxOffset) or nil
end

-- `rmq admin ARGS...` against the group's NameServer: exit code, output.
local function rmq_admin(g, args)
    local children = require("support.children")
    local out = tmp.name()
    local argv = { "admin" }
    for _, a in ipairs(args) do
        argv[#argv + 1] = a
    end
    argv[#argv + 1] = "-n"
    argv[#argv + 1] = g.ns.addr
    local p = assert(children.spawn({ file = server.build .. "/rmq", args = argv, stdout = out, stderr = out,
        env = server.env_with_home(tmp.dir()) }))
    local status = p:wait(30000)
    return status, server.read_file(out)
end

-- The entries printed for one broker address: {epoch, start, stop}, and its header.
local function entries_of(out, addr)
    local at = out:find("#brokerAddr\t" .. addr .. "\n", 1, true)
    if not at then
        return nil
    end
    local block = out:sub(at):match("^(.-)\n\n") or out:sub(at)
    local list = {}
    for e, s, t in block:gmatch("#Epoch: EpochEntry{epoch=(%d+), startOffset=(%d+), endOffset=(%d+)}") do
        list[#list + 1] = { epoch = tonumber(e), start = tonumber(s), stop = tonumber(t) }
    end
    return list, block
end

describe("rmq admin getBrokerEpoch", function()
    local start = failover.suite(pending, teardown)
    if not start then
        return
    end
    local g

    it("prints each broker's epoch entries as 5.x does, and a new epoch after a failover", function()
        g = start({ name = "bs-ep", brokers = 2 })
        assert.truthy(g:wait_master(30000), g.ctl:log())
        assert.truthy(g:wait_sync_state_set(2, 60000), "the SyncStateSet never reached 2")
        -- some messages, so the epoch ends past 0
        local dir = tmp.dir()
        local acked = dir .. "/acked.log"
        g:audit_produce(acked)
        assert.truthy(server.eventually(function() return failover.count_lines(acked, "A") >= 30 end, 30000),
            server.read_file(acked .. ".out") .. server.read_file(acked .. ".out.err"))
        g:stop_produce()
        local mi, maddr = g:master()
        assert.truthy(mi, "no master in the route")
        local si = mi == 1 and 2 or 1
        local saddr = g.brokers[si].addr
        -- the slave caught up: both logs end at the same offset
        local mend
        assert.truthy(server.eventually(function()
            mend = max_phy(maddr)
            return mend and mend > 0 and max_phy(saddr) == mend
        end, 30000), "the slave never caught up")

        local code, out = rmq_admin(g, { "getBrokerEpoch", "-b", "bs-ep" })
        assert.equal(0, code, out)
        assert.truthy(out:find("\n#clusterName\tFoCluster\n#brokerName\tbs-ep\n#brokerAddr\t" .. maddr
            .. "\n#brokerId\t0\n#Epoch: EpochEntry{epoch=1, startOffset=0, endOffset=" .. mend .. "}\n", 1, true), out)
        local list, block = entries_of(out, saddr)
        assert.truthy(list, out)
        -- a slave names its controller-given id (5.x: brokerConfig's brokerId)
        assert.truthy(out:find("#brokerName\tbs-ep\n#brokerAddr\t" .. saddr, 1, true)
            and block:find("^#brokerAddr\t[^\n]*\n#brokerId\t[1-9]"), out)
        assert.same({ { epoch = 1, start = 0, stop = mend } }, list)

        -- -c: every broker of the cluster, masters and slaves
        code, out = rmq_admin(g, { "getBrokerEpoch", "-c", "FoCluster" })
        assert.equal(0, code, out)
        assert.truthy(entries_of(out, maddr) and entries_of(out, saddr), out)

        -- kill -9 of the master: the slave is master from epoch 2, which
        -- starts where its log ended
        local _, old = g:kill_master()
        assert.truthy(g:wait_new_master(old, 20000), g.ctl:log())
        assert.truthy(server.eventually(function()
            local c, o = rmq_admin(g, { "getBrokerEpoch", "-b", "bs-ep" })
            out = o
            local l = c == 0 and entries_of(o, saddr)
            return l and #l == 2
        end, 20000), out)
        list = entries_of(out, saddr)
        local now = max_phy(saddr)
        assert.same({ epoch = 1, start = 0, stop = mend }, list[1])
        assert.equal(2, list[2].epoch)
        assert.equal(mend, list[2].start)
        assert.truthy(list[2].stop >= mend and list[2].stop <= now, out)
        assert.truthy(out:find("#brokerAddr\t" .. saddr .. "\n#brokerId\t0\n", 1, true), out)
    end)

    it("refuses a call without -b or -c, and names a broker set the NameServer does not know", function()
        assert.truthy(g, "the first case did not run")
        local code, out = rmq_admin(g, { "getBrokerEpoch" })
        assert.are_not.equal(0, code)
        assert.truthy(out:find("-b brokerName or -c clusterName", 1, true), out)
        code, out = rmq_admin(g, { "getBrokerEpoch", "-b", "no-such-set" })
        assert.are_not.equal(0, code)
        assert.truthy(out:find("broker no-such-set not found", 1, true), out)
        code, out = rmq_admin(g, { "getBrokerEpoch", "-b", "bs-ep", "-i", "x" })
        assert.are_not.equal(0, code)
        assert.truthy(out:find("-i interval must be a positive number", 1, true), out)
    end)
end)
