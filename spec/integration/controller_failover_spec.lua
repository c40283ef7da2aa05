-- Automatic failover with nothing acknowledged lost (issue 24): three rmq
-- brokers of one set in controller mode with allAckInSyncStateSet, a
-- controller on a real etcd (clean elections only), a NameServer, and
-- `rmq audit produce` sending all along.  Three times: kill -9 of the
-- master; a new master in the route within 10 s; acknowledged sends
-- resume; the old master, restarted on its store, rejoins as a slave
-- (truncating what it held past the new master's history: never
-- acknowledged) and its log becomes the new master's.  At the end
-- `rmq audit check` over everything acknowledged and delivered: 0 lost.
-- (scripts/bench/controller_failover.lua runs 20 kills.)
local core = require("rmq.core")
local server = require("support.server")
local failover = require("support.failover")
local tmp = require("support.tmp")
local net = require("rmq.net")
local cjson = require("cjson")

local KILLS = 3

local function max_phy(addr)
    local r = net.call(addr, { code = 28 }, 5000)
    return r and r.code == 0 and tonumber(cjson.decode(r.body).table.commitLogMaxOffset) or nil
end

describe("failover in controller mode under rmq audit", function()
    local start = failover.suite(pending, teardown)
    if not start then
        return
    end
    local g

    it("kill -9 of the master " .. KILLS .. " times: a new master within 10 s each time, sends resume, 0 lost", function()
        g = start({ name = "bs-fo" })
        local dir = tmp.dir()
        local acked, got = dir .. "/acked.log", dir .. "/received.log"
        assert.truthy(g:wait_master(30000), g.ctl:log())
        g:audit_produce(acked)
        assert.truthy(server.eventually(function() return failover.count_lines(acked, "A") >= 50 end, 30000),
            server.read_file(acked .. ".out") .. server.read_file(acked .. ".out.err"))
        for k = 1, KILLS do
            -- every member caught up and in the set: a clean election has a choice
            assert.truthy(g:wait_sync_state_set(3, 60000), "kill " .. k .. ": the SyncStateSet never reached 3")
            local before = failover.count_lines(acked, "A")
            local victim, old, t0 = g:kill_master()
            local new = g:wait_new_master(old, 10000)
            assert.truthy(new, ("kill %d: no new master in the route within 10 s\n%s"):format(k, g.ctl:log()))
            local took = core.mono_ms() - t0
            -- acknowledged sends resume (the producer follows the route)
            assert.truthy(server.eventually(function()
                return failover.count_lines(acked, "A") >= before + 50
            end, 30000), "kill " .. k .. ": sends did not resume")
            print(("kill %d: new master in the route after %.0f ms"):format(k, took))
            -- the old master rejoins as a slave on its store
            local b = g:restart(victim)
            assert.truthy(server.eventually(function() return g:gauge(victim, "rmq_replica_role") == 0 end, 30000),
                b:log())
            assert.truthy(server.eventually(function()
                for id, addr in pairs(g:route()) do
                    if addr == b.addr and id ~= 0 then
                        return true
                    end
                end
            end, 30000), cjson.encode(g:route()))
            local dropped = b:log():match("holds (%d+) bytes past the last epoch")
            if dropped then
                print(("kill %d: the old master dropped %s unacknowledged bytes"):format(k, dropped))
            end
        end
        g:stop_produce()
        -- every broker ends with one history: the master's length
        local mi = g:master()
        local seen
        assert.truthy(server.eventually(function()
            local want = max_phy(g.brokers[mi].addr)
            seen = {}
            local same = true
            for i, b in pairs(g.brokers) do
                local phy = max_phy(b.addr)
                seen[#seen + 1] = ("%s%s %s"):format(i, i == mi and " (master)" or "", tostring(phy))
                same = same and phy == want
            end
            return same
        end, 60000), "the brokers' commit logs did not converge: " .. table.concat(seen or {}, ", ")
            .. "\n" .. g.ctl:log())
        -- everything acknowledged is delivered
        g:audit_consume(got)
        local audit = require("rmq.tools.audit")
        local t = server.eventually(function()
            local tt = audit.tally({ acked, got })
            return tt.lost == 0 and tt.acknowledged > 0 and tt
        end, 90000)
        g:stop_consume()
        local code, out = server.rmq(("audit check %s %s"):format(acked, got))
        print(out)
        -- why sends failed (a failed send was never acknowledged: not lost)
        local why = {}
        for line in io.lines(acked) do
            local r = line:match("^F %S+ (%S+)")
            if r then
                why[r] = (why[r] or 0) + 1
            end
        end
        for r, n in pairs(why) do
            print(("failed sends: %d %s"):format(n, r))
        end
        assert.truthy(t, out)
        assert.equal(0, code, out)
        assert.matches(" lost=0 ", out)
    end)
end)
