-- A slave joins the SyncStateSet; the master is killed before it applied
-- the controller's answer (issue 21, 18b84fd).  Three brokers of one set
-- in controller mode with allAckInSyncStateSet, a controller on a real
-- etcd, a NameServer and `rmq audit produce` sending all along.
--
-- The window: the master proposes the new set (ALTER_SYNC_STATE_SET),
-- the controller applies it, and from that moment can elect the member
-- that joined.  The master learns it only when the answer comes back and
-- is applied; a pass that comes meanwhile (a new task each second) must
-- not go back to the old set either.  Until then every send it
-- acknowledges must be on the joining member too.  The errinj point
-- sss_answer_delay_ms holds the answer on the master (src/core/errinj.h),
-- so the window is as long as the spec needs:
--
--   1. brokers 1 and 2: a master and one slave in the set;
--   2. the master holds the controller's answers; broker 3 starts,
--      catches up and the controller puts it in the set;
--   3. broker 3 is killed (kill -9): what the master appends from now on
--      is not on it (a stopped process would still get it: the kernel
--      buffers what the master sends, and it reads that after a SIGCONT);
--   4. the master is killed (kill -9), broker 3 restarts on its store and
--      is elected: a member of the SyncStateSet, designated as `mqadmin
--      electMaster -b` designates (a clean election may pick any member);
--   5. the old master rejoins on its store; `rmq audit check` over
--      everything acknowledged: lost=0.
--
-- A master that counted only the old set's acknowledgements in the
-- window acknowledges sends broker 3 never got, and the election of
-- broker 3 loses them.
local server = require("support.server")
local failover = require("support.failover")
local tmp = require("support.tmp")
local net = require("rmq.net")
local cjson = require("cjson")

local ERRINJ = 7020   -- the spec's own request code: store.errinj on that broker

local HOOK = ([[
c.processors = {
    [%d] = function(ctx, cmd)
        local v = require("rmq.store").errinj(cmd:get("name"), tonumber(cmd:get("value")))
        return { code = 0, remark = tostring(v) }
    end,
}]]):format(ERRINJ)

local function max_phy(addr)
    local r = net.call(addr, { code = 28 }, 5000)
    return r and r.code == 0 and tonumber(cjson.decode(r.body).table.commitLogMaxOffset) or nil
end

local function errinj(addr, name, value)
    local r = net.call(addr, { code = ERRINJ, ext = { name = name, value = tostring(value) } }, 5000)
    assert(r and r.code == 0, "errinj " .. name .. " on " .. addr .. ": " .. tostring(r and r.remark))
end

-- The broker id the controller gave the broker on this store.
local function broker_id(store)
    local f = io.open(store .. "/controller_broker_id.json")
    if not f then
        return nil
    end
    local t = cjson.decode(f:read("a"))
    f:close()
    return math.tointeger(t.brokerId)
end

-- The controller's SyncStateSet of the set (ids), or nil.
local function controller_sss(g)
    local r = net.call(g.ctl.addr, { code = 1004, ext = { brokerName = g.name } }, 5000)
    if not (r and r.code == 0 and r.body) then
        return nil
    end
    local ok, t = pcall(cjson.decode, r.body)
    return ok and type(t) == "table" and t.syncStateSet or nil
end

describe("controller mode: the master dies while a SyncStateSet change is being confirmed", function()
    local start = failover.suite(pending, teardown)
    if not start then
        return
    end
    local g

    it("a member that joined counts in every acknowledgement before the master applied the answer: 0 lost",
        function()
        -- Heartbeat timeout 15 s: the controller's own scan elects nobody
        -- while the spec runs (broker 3, dead for a few seconds, is still
        -- alive for it);
        -- haMaxTimeSlaveNotCatchup 30 s: nobody leaves the set meanwhile.
        g = start({ name = "bs-win", brokers = 2, hb_timeout = 15000, conf_source = HOOK,
                             broker = { haMaxTimeSlaveNotCatchup = 30000 } })
        local dir = tmp.dir()
        local acked, got = dir .. "/acked.log", dir .. "/received.log"
        local mi = g:wait_master(30000)
        assert.truthy(mi, g.ctl:log())
        assert.truthy(g:wait_sync_state_set(2, 60000), "the SyncStateSet never reached 2")
        g:audit_produce(acked)
        assert.truthy(server.eventually(function() return failover.count_lines(acked, "A") >= 50 end, 30000),
            server.read_file(acked .. ".out") .. server.read_file(acked .. ".out.err"))

        -- 2. the master holds the controller's answers; broker 3 joins
        local m = g.brokers[mi]
        errinj(m.addr, "sss_answer_delay_ms", 120000)
        g.brokers[3] = g:start_broker(3)
        local j = g.brokers[3]
        local jid = server.eventually(function() return broker_id(g.stores[3]) end, 30000)
        assert.truthy(jid, j:log())
        assert.truthy(server.eventually(function()
            for _, id in ipairs(controller_sss(g) or {}) do
                if id == jid then
                    return true
                end
            end
        end, 60000), "broker 3 never joined the controller's SyncStateSet\n" .. m:log():sub(-3000))
        -- (the master has not applied it: it holds the answer; the line
        -- "role: SyncStateSet of ... broker N caught up" says it applied)
        assert.falsy(m:log():find("broker " .. jid .. " caught up", 1, true),
            "the master applied the answer: the window is closed\n" .. m:log():sub(-3000))

        -- 3. broker 3 dies: from now on nothing reaches it
        j:kill()
        g.brokers[3] = nil
        local before = failover.count_lines(acked, "A")
        -- (a master counting without broker 3 acknowledges 200 sends in
        -- about a second; one waiting for it none: bounded, not asserted)
        server.eventually(function() return failover.count_lines(acked, "A") >= before + 200 end, 4000)
        local in_window = failover.count_lines(acked, "A") - before

        -- 4. kill -9 of the master; broker 3 back on its store, elected
        local victim, old = g:kill_master()
        j = g:restart(3)
        local r = net.call(g.ctl.addr, { code = 1002, ext = { clusterName = "FoCluster", brokerName = g.name,
            brokerId = tostring(jid), designateElect = "true" } }, 10000)
        assert.truthy(r, "ELECT_MASTER: no answer")
        assert.equal(0, r.code, r.remark)
        local new = g:wait_new_master(old, 30000)
        assert.equal(j.addr, new)
        print(("sends acknowledged after broker 3 died, before the kill: %d"):format(in_window))
        local resumed = failover.count_lines(acked, "A")
        assert.truthy(server.eventually(function()
            return failover.count_lines(acked, "A") >= resumed + 50
        end, 60000), "sends did not resume on broker 3")

        -- 5. the old master rejoins as a slave on its store
        local b = g:restart(victim)
        assert.truthy(server.eventually(function() return g:gauge(victim, "rmq_replica_role") == 0 end, 30000),
            b:log())
        g:stop_produce()
        assert.truthy(server.eventually(function()
            local want = max_phy(j.addr)
            for _, x in pairs(g.brokers) do
                if max_phy(x.addr) ~= want then
                    return false
                end
            end
            return true
        end, 60000), "the brokers' logs never matched the new master's")
        g:audit_consume(got)
        local audit = require("rmq.tools.audit")
        server.eventually(function()
            local t = audit.tally({ acked, got })
            return t.lost == 0 and t.acknowledged > 0
        end, 60000)
        g:stop_consume()
        local code, out = server.rmq(("audit check %s %s"):format(acked, got))
        print(out)
        assert.equal(0, code, out)
        assert.matches(" lost=0 ", out)
    end)
end)
