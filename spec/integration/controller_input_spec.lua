-- Hostile and stale input to the controller, one case each, on a real
-- etcd: forged heartbeats (another cluster, absurd offsets and epochs,
-- values out of range), requests naming another cluster, a deposed
-- master's requests, and a controller whose leadership was taken from
-- under it.  Each case asserts what an operator would: the master the
-- controller names, and 5.x's response codes.  The spec plays the
-- brokers' side (as controller_spec does).
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local server = require("support.server")
local etcd = require("support.etcd")

local req = codes.request
local R = codes.response
local SUCCESS = 0
local INT64_MAX = "9223372036854775807"

describe("controller: hostile and stale input", function()
    if not etcd.available() then
        pending(etcd.why)
        return
    end

    local e, clean, unclean
    local beats = {}          -- "ctl|cluster|name|id" -> heartbeat ext, sent every 200 ms
    local stop = false

    local function call(c, code, ext, body)
        local strs = {}
        for k, v in pairs(ext or {}) do
            strs[k] = tostring(v)
        end
        return assert(net.call(c.addr, { code = code, ext = strs, body = body }, 10000))
    end

    local function beat(c, cluster, name, id, fields)
        local ext = { clusterName = cluster, brokerName = name, brokerId = tostring(id),
            brokerAddr = "127.0.0.1:" .. (40000 + id), epoch = "0", maxOffset = "0", confirmOffset = "0",
            heartbeatTimeoutMills = "1500", electionPriority = "0" }
        for k, v in pairs(fields or {}) do
            ext[k] = tostring(v)
        end
        beats[table.concat({ c.addr, cluster, name, id }, "|")] = { c = c, ext = ext }
    end

    local function silence(c, cluster, name, id)
        beats[table.concat({ c.addr, cluster, name, id }, "|")] = nil
    end

    -- A set of n brokers in cluster C: ids 1..n, 1 the master, `sss` its
    -- SyncStateSet; every broker heartbeating.
    local function make_set(c, name, n, sss)
        for id = 1, n do
            local r = call(c, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = name,
                appliedBrokerId = id, registerCheckCode = "127.0.0.1:" .. (40000 + id) .. ";1" })
            assert.equal(SUCCESS, r.code, r.remark)
            r = call(c, req.CONTROLLER_REGISTER_BROKER, { clusterName = "C", brokerName = name, brokerId = id,
                brokerAddress = "127.0.0.1:" .. (40000 + id) })
            assert.equal(SUCCESS, r.code, r.remark)
            beat(c, "C", name, id)
        end
        net.sleep(400)
        local r = call(c, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = name, brokerId = 1 })
        assert.equal(SUCCESS, r.code, r.remark)
        if #sss > 1 then
            r = call(c, req.CONTROLLER_ALTER_SYNC_STATE_SET, { brokerName = name, masterBrokerId = 1, masterEpoch = 1 },
                cjson.encode({ syncStateSet = sss, syncStateSetEpoch = 1 }))
            assert.equal(SUCCESS, r.code, r.remark)
        end
        for id = 1, n do
            beat(c, "C", name, id, { epoch = 1 })
        end
    end

    local function info(c, name)
        local r = call(c, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = name })
        assert.equal(SUCCESS, r.code, r.remark)
        return r.ext, cjson.decode(r.body)
    end

    local function master_becomes(c, name, want)
        return server.eventually(function()
            return info(c, name).masterBrokerId == want
        end, 15000)
    end

    local function controller(prefix, extra)
        local o = { "etcdEndpoints=" .. e.url, "scanNotActiveBrokerInterval=300", "etcdLeaseTtlSeconds=2",
            "etcdKeyPrefix=" .. prefix }
        for _, x in ipairs(extra or {}) do
            o[#o + 1] = x
        end
        local c = server.start({ role = "controller" }, o)
        assert.truthy(server.eventually(function()
            return call(c, req.CONTROLLER_GET_METADATA_INFO).ext.isLeader == "true"
        end, 15000), c:log())
        return c
    end

    setup(function()
        e = etcd.start()
        clean = controller("/spec/clean")
        unclean = controller("/spec/unclean", { "enableElectUncleanMaster=true" })
        net.spawn(function()
            while not stop do
                for _, b in pairs(beats) do
                    net.oneway(b.c.addr, { code = req.BROKER_HEARTBEAT, ext = b.ext })
                end
                net.sleep(200)
            end
        end)
    end)

    teardown(function()
        stop = true
        for _, c in ipairs({ clean, unclean }) do
            c:kill()
        end
        if e then e:stop() end
    end)

    it("a heartbeat naming another cluster does not keep a silent master alive", function()
        make_set(clean, "bs-cl", 2, { 1, 2 })
        -- Broker 1 of cluster C goes silent; someone beats for "Other"'s
        -- bs-cl broker 1, with the largest offset there is.
        silence(clean, "C", "bs-cl", 1)
        beat(clean, "Other", "bs-cl", 1, { epoch = 1, maxOffset = INT64_MAX })
        assert.truthy(master_becomes(clean, "bs-cl", "2"), clean:log())
        assert.equal("2", info(clean, "bs-cl").masterEpoch)
        silence(clean, "Other", "bs-cl", 1)
    end)

    it("INT64_MAX from a broker outside the SyncStateSet wins no clean election", function()
        make_set(clean, "bs-max", 3, { 1, 2 })
        beat(clean, "C", "bs-max", 3, { epoch = 1, maxOffset = INT64_MAX })
        beat(clean, "C", "bs-max", 2, { epoch = 1, maxOffset = 10 })
        -- Broker 3 asks to be master, then is designated: refused.
        local r = call(clean, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-max", brokerId = 3 })
        assert.equal(R.CONTROLLER_MASTER_STILL_EXIST, r.code, r.remark)
        r = call(clean, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-max", brokerId = 3,
            designateElect = true })
        assert.equal(R.CONTROLLER_ELECT_MASTER_FAILED, r.code, r.remark)
        assert.equal("1", info(clean, "bs-max").masterBrokerId)
        -- The master goes silent: 2, in the SyncStateSet, wins.
        silence(clean, "C", "bs-max", 1)
        assert.truthy(master_becomes(clean, "bs-max", "2"), clean:log())
        -- 2 goes silent too: nobody of the SyncStateSet is alive, and 3
        -- is not elected (the set is left without a master).
        -- (A line from before, when a loaded machine delayed 2's beats
        -- while 1 was already silent, does not count.)
        local from = #clean:log() + 1
        silence(clean, "C", "bs-max", 2)
        assert.truthy(server.eventually(function()
            return clean:log():find("no new master for bs-max: no alive member of the SyncStateSet", from, true)
        end, 15000), clean:log())
        -- The line is written as the election ends; the cleared master is
        -- stored just after it.
        assert.truthy(server.eventually(function()
            return info(clean, "bs-max").masterBrokerId == nil
        end, 15000), clean:log())
        r = call(clean, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-max", brokerId = 3 })
        assert.equal(R.CONTROLLER_ELECT_MASTER_FAILED, r.code, r.remark)
        assert.is_nil(info(clean, "bs-max").masterBrokerId)
        silence(clean, "C", "bs-max", 3)
    end)

    it("unclean election: a broker claiming a master epoch the controller never gave is not elected", function()
        make_set(unclean, "bs-ep", 3, { 1 })
        beat(unclean, "C", "bs-ep", 2, { epoch = 1, maxOffset = 100 })
        beat(unclean, "C", "bs-ep", 3, { epoch = 2147483647, maxOffset = INT64_MAX })
        silence(unclean, "C", "bs-ep", 1)
        assert.truthy(master_becomes(unclean, "bs-ep", "2"), unclean:log())
        assert.truthy(unclean:log():find("bs-ep broker 3 reports master epoch 2147483647, beyond the set's 1; "
            .. "not a candidate", 1, true), unclean:log())
        silence(unclean, "C", "bs-ep", 2)
        silence(unclean, "C", "bs-ep", 3)
    end)

    it("heartbeats with values out of range are refused; the controller keeps serving", function()
        local base = { clusterName = "C", brokerName = "bs-hb", brokerId = "1", brokerAddr = "127.0.0.1:1",
            epoch = "0", maxOffset = "0", heartbeatTimeoutMills = "1500" }
        local function hb(over, drop)
            local ext = {}
            for k, v in pairs(base) do
                ext[k] = v
            end
            for k, v in pairs(over) do
                ext[k] = v
            end
            if drop then
                ext[drop] = nil
            end
            return assert(net.call(clean.addr, { code = req.BROKER_HEARTBEAT, ext = ext }, 10000))
        end
        assert.equal(SUCCESS, hb({}).code)
        assert.equal(SUCCESS, hb({ maxOffset = INT64_MAX }).code)
        for _, case in ipairs({
            { { maxOffset = "-1" }, nil, R.CONTROLLER_INVALID_REQUEST },
            { { epoch = "-5" }, nil, R.CONTROLLER_INVALID_REQUEST },
            { {}, "clusterName", R.CONTROLLER_INVALID_REQUEST },
            { {}, "brokerId", R.CONTROLLER_INVALID_REQUEST },
            { { maxOffset = "99999999999999999999" } },
            { { maxOffset = "1e30" } },
            { { epoch = "abc" } },
            { { brokerId = "1.5" } },
        }) do
            local r = hb(case[1], case[2])
            local what = cjson.encode(case[1]) .. " without " .. tostring(case[2])
            if case[3] then
                assert.equal(case[3], r.code, what .. ": " .. tostring(r.remark))
            else
                assert.are_not.equal(SUCCESS, r.code, what)
            end
            assert.truthy(r.remark and #r.remark > 0 and not r.remark:find("traceback", 1, true)
                and not r.remark:find("%.lua"), what .. ": " .. tostring(r.remark))
        end
        assert.equal("true", call(clean, req.CONTROLLER_GET_METADATA_INFO).ext.isLeader)
    end)

    it("a heartbeat flood is bounded by controllerMaxBrokers; known brokers keep beating", function()
        local small = controller("/spec/small", { "controllerMaxBrokers=4" })
        local function hb(cluster, id)
            return assert(net.call(small.addr, { code = req.BROKER_HEARTBEAT, ext = { clusterName = cluster,
                brokerName = "bs-hf", brokerId = tostring(id), brokerAddr = "127.0.0.1:1", epoch = "0",
                maxOffset = "0", heartbeatTimeoutMills = "60000" } }, 10000))
        end
        for id = 1, 4 do
            assert.equal(SUCCESS, hb("C", id).code)
        end
        -- New identities past the bound (other clusters, other ids) are
        -- refused; the four known ones are still taken.
        for _, who in ipairs({ { "C", 5 }, { "Other", 1 }, { "Forged" .. string.rep("x", 200), 9 } }) do
            local r = hb(who[1], who[2])
            assert.equal(R.CONTROLLER_INVALID_REQUEST, r.code)
            assert.truthy(r.remark:find("controllerMaxBrokers", 1, true), r.remark)
        end
        for id = 1, 4 do
            assert.equal(SUCCESS, hb("C", id).code)
        end
        small:kill()
    end)

    it("requests naming another cluster are refused with CONTROLLER_INVALID_REQUEST", function()
        make_set(clean, "bs-oc", 2, { 1, 2 })
        local other = { clusterName = "Other", brokerName = "bs-oc" }
        local function with(t)
            local out = {}
            for k, v in pairs(other) do
                out[k] = v
            end
            for k, v in pairs(t) do
                out[k] = v
            end
            return out
        end
        for _, case in ipairs({
            { req.CONTROLLER_GET_NEXT_BROKER_ID, {} },
            { req.CONTROLLER_APPLY_BROKER_ID, { appliedBrokerId = 3, registerCheckCode = "127.0.0.1:9;1" } },
            { req.CONTROLLER_REGISTER_BROKER, { brokerId = 2, brokerAddress = "127.0.0.1:9" } },
            { req.CONTROLLER_ELECT_MASTER, { brokerId = 2, designateElect = true } },
            { req.CLEAN_BROKER_DATA, { brokerControllerIdsToClean = "2", isCleanLivingBroker = true } },
        }) do
            local r = call(clean, case[1], with(case[2]))
            assert.equal(R.CONTROLLER_INVALID_REQUEST, r.code, case[1] .. ": " .. tostring(r.remark))
        end
        -- Nothing changed: 1 is master, 2 still registered at its address.
        local ext, body = info(clean, "bs-oc")
        assert.same({ "1", "127.0.0.1:40001", "1" }, { ext.masterBrokerId, ext.masterAddress, ext.masterEpoch })
        assert.same({ 1, 2 }, body.syncStateSet)
    end)

    it("a deposed master's stale requests change nothing", function()
        make_set(clean, "bs-dep", 2, { 1, 2 })
        silence(clean, "C", "bs-dep", 1)
        assert.truthy(master_becomes(clean, "bs-dep", "2"), clean:log())
        local ext, body = info(clean, "bs-dep")
        assert.equal("2", ext.masterEpoch)
        -- Broker 1 comes back believing it is master at epoch 1.
        beat(clean, "C", "bs-dep", 1, { epoch = 1 })
        net.sleep(400)
        local r = call(clean, req.CONTROLLER_ALTER_SYNC_STATE_SET, { brokerName = "bs-dep", masterBrokerId = 1,
            masterEpoch = 1 }, cjson.encode({ syncStateSet = { 1 }, syncStateSetEpoch = 1 }))
        assert.equal(R.CONTROLLER_INVALID_MASTER, r.code, r.remark)
        -- With the current master's id but its own old epoch.
        r = call(clean, req.CONTROLLER_ALTER_SYNC_STATE_SET, { brokerName = "bs-dep", masterBrokerId = 2,
            masterEpoch = 1 }, cjson.encode({ syncStateSet = { 2, 1 }, syncStateSetEpoch = body.syncStateSetEpoch }))
        assert.equal(R.CONTROLLER_FENCED_MASTER_EPOCH, r.code, r.remark)
        -- And an old SyncStateSet epoch.
        r = call(clean, req.CONTROLLER_ALTER_SYNC_STATE_SET, { brokerName = "bs-dep", masterBrokerId = 2,
            masterEpoch = 2 }, cjson.encode({ syncStateSet = { 2, 1 }, syncStateSetEpoch = body.syncStateSetEpoch - 1 }))
        assert.equal(R.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, r.code, r.remark)
        -- It asks to be elected: the master is alive.
        r = call(clean, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-dep", brokerId = 1 })
        assert.equal(R.CONTROLLER_MASTER_STILL_EXIST, r.code, r.remark)
        assert.equal("2", r.ext.masterBrokerId)
        -- Registering again tells it who the master is.
        r = call(clean, req.CONTROLLER_REGISTER_BROKER, { clusterName = "C", brokerName = "bs-dep", brokerId = 1,
            brokerAddress = "127.0.0.1:40001" })
        assert.equal(SUCCESS, r.code, r.remark)
        assert.same({ "2", "127.0.0.1:40002", "2" }, { r.ext.masterBrokerId, r.ext.masterAddress, r.ext.masterEpoch })
        ext = info(clean, "bs-dep")
        assert.same({ "2", "2" }, { ext.masterBrokerId, ext.masterEpoch })
    end)

    it("UPDATE_CONTROLLER_CONFIG: live keys change at once, other keys and bad values are refused", function()
        local function update(text)
            return assert(net.call(clean.addr, { code = req.UPDATE_CONTROLLER_CONFIG, ext = {}, body = text }, 10000))
        end
        local function config()
            local r = call(clean, req.GET_CONTROLLER_CONFIG)
            local t = {}
            for k, v in r.body:gmatch("([^=\n]+)=([^\n]*)") do
                t[k] = v
            end
            return t
        end
        for _, case in ipairs({
            { "etcdEndpoints=http://127.0.0.1:1\n", "cannot be changed while rmq runs" },
            { "scanNotActiveBrokerInterval=5\n", "may be changed live only within 100..60000" },
            { "scanNotActiveBrokerInterval=soon\n", "scanNotActiveBrokerInterval" },
            { "electPolicy=no.such.module\n", "electPolicy" },
            -- A good entry beside a bad one: nothing is applied.
            { "enableElectUncleanMaster=true\ncontrollerMaxBrokers=1\n", "cannot be changed while rmq runs" },
        }) do
            local r = update(case[1])
            assert.equal(R.SYSTEM_ERROR, r.code, case[1])
            assert.truthy(r.remark:find(case[2], 1, true), r.remark)
        end
        assert.same({ "false", "300" }, { config().enableElectUncleanMaster, config().scanNotActiveBrokerInterval })
        -- The same value of a key that is not live, and an unknown key: fine.
        local r = update("controllerMaxBrokerSets=1024\nnoSuchKey=1\n")
        assert.equal(SUCCESS, r.code, r.remark)
        assert.equal("ignored unknown keys: noSuchKey", r.remark)

        -- A master of a set whose SyncStateSet holds it alone goes silent:
        -- no clean election, the set is left without a master.  With
        -- enableElectUncleanMaster set live, broker 2's next ELECT_MASTER
        -- (a broker asks while its set has no master) elects it.
        make_set(clean, "bs-live", 2, { 1 })
        silence(clean, "C", "bs-live", 1)
        assert.truthy(server.eventually(function()
            return clean:log():find("no new master for bs-live: no alive member of the SyncStateSet", 1, true)
        end, 15000), clean:log())
        r = update("enableElectUncleanMaster=true\nscanNotActiveBrokerInterval=200\n")
        assert.equal(SUCCESS, r.code, r.remark)
        assert.same({ "true", "200" }, { config().enableElectUncleanMaster, config().scanNotActiveBrokerInterval })
        local er = call(clean, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-live", brokerId = 2 })
        assert.equal(SUCCESS, er.code, er.remark)
        assert.equal("2", info(clean, "bs-live").masterBrokerId)
        assert.equal(SUCCESS, update("enableElectUncleanMaster=false\nscanNotActiveBrokerInterval=300\n").code)
        -- The other controller's keys did not change.
        r = call(unclean, req.GET_CONTROLLER_CONFIG)
        assert.truthy(r.body:find("scanNotActiveBrokerInterval=300\n", 1, true), r.body)
        silence(clean, "C", "bs-live", 2)
    end)

    it("a controller whose leadership was taken from under it cannot write", function()
        -- Another holder appears in P/leader (as if this controller's lease
        -- had expired and another controller had won): the next write is
        -- refused, whether or not this controller has noticed yet.
        assert.truthy(server.eventually(function()
            return call(clean, req.CONTROLLER_GET_METADATA_INFO).ext.isLeader == "true"
        end, 10000))
        local client = require("rmq.controller.etcd").new({ etcdEndpoints = e.url, etcdRequestTimeoutMillis = 2000 })
        local lkey = "/spec/clean/leader"
        local r0 = assert(client:range(lkey))
        local ok = client:txn({}, { { put = lkey, value = "127.0.0.1:1#1#1" } })
        assert.is_true(ok)
        local r = call(clean, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "bs-stolen",
            appliedBrokerId = 1, registerCheckCode = "127.0.0.1:9;1" })
        assert.equal(R.CONTROLLER_NOT_LEADER, r.code, r.remark)
        assert.truthy(server.eventually(function()
            return call(clean, req.CONTROLLER_GET_METADATA_INFO).ext.isLeader == "false"
        end, 10000))
        -- Nothing was written.
        local sets = assert(client:range("/spec/clean/sets/bs-stolen"))
        assert.equal(0, #sets.kvs)
        -- The holder goes away: the controller is active again and writes.
        assert.truthy(#r0.kvs == 1)
        client:txn({}, { { delete = lkey } })
        assert.truthy(server.eventually(function()
            return call(clean, req.CONTROLLER_GET_METADATA_INFO).ext.isLeader == "true"
        end, 10000), clean:log())
        r = call(clean, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "bs-stolen",
            appliedBrokerId = 1, registerCheckCode = "127.0.0.1:9;1" })
        assert.equal(SUCCESS, r.code, r.remark)
    end)

    it("a master elected before its first heartbeat is kept while no broker of its set is alive", function()
        -- A 5.3.3 broker asks ELECT_MASTER right after REGISTER, a second
        -- before its first heartbeat.  5.x's scan (scanNeedReelectBrokerSets)
        -- re-elects only when some broker of the set is alive; electing
        -- with nobody alive would clear the master it just chose.  (This
        -- controller is older than one heartbeat timeout by now.)
        for id = 1, 2 do
            local r = call(clean, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "bs-first",
                appliedBrokerId = id, registerCheckCode = "127.0.0.1:" .. (40000 + id) .. ";1" })
            assert.equal(SUCCESS, r.code, r.remark)
            r = call(clean, req.CONTROLLER_REGISTER_BROKER, { clusterName = "C", brokerName = "bs-first", brokerId = id,
                brokerAddress = "127.0.0.1:" .. (40000 + id) })
            assert.equal(SUCCESS, r.code, r.remark)
        end
        local r = call(clean, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-first", brokerId = 1 })
        assert.equal(SUCCESS, r.code, r.remark)
        assert.truthy(server.eventually(function()
            return clean:log():find("master 1 of bs-first is silent and no broker of the set is alive: kept", 1, true)
        end, 15000), clean:log())
        assert.is_nil(clean:log():find("master 1 of bs-first stopped heartbeating", 1, true), clean:log())
        assert.equal("1", info(clean, "bs-first").masterBrokerId)
        -- Its heartbeats start: still master 1, epoch 1.  Then broker 2
        -- beats and 1 goes silent: 2 is alive (but not in the
        -- SyncStateSet), so the scan runs the election, which keeps no
        -- master (clean elections only), as 5.x does.
        beat(clean, "C", "bs-first", 1, { epoch = 1 })
        beat(clean, "C", "bs-first", 2, { epoch = 1 })
        net.sleep(600)
        assert.same({ "1", "1" }, { info(clean, "bs-first").masterBrokerId, info(clean, "bs-first").masterEpoch })
        silence(clean, "C", "bs-first", 1)
        assert.truthy(server.eventually(function()
            return clean:log():find("master 1 of bs-first stopped heartbeating", 1, true)
        end, 15000), clean:log())
        assert.truthy(server.eventually(function()
            return info(clean, "bs-first").masterBrokerId == nil
        end, 15000), clean:log())
        silence(clean, "C", "bs-first", 2)
    end)

    it("a flood while etcd hangs: past etcdMaxCallsInFlight requests are refused at once", function()
        local capped = controller("/spec/capped", { "etcdMaxCallsInFlight=2", "etcdRequestTimeoutMillis=3000",
            "etcdLeaseTtlSeconds=6" })
        -- etcd stops answering (SIGSTOP: connections are taken by the
        -- kernel, answers never come): each call waits for its timeout.
        assert(e.proc:kill(19))
        local replies, running = {}, 0
        for _ = 1, 8 do
            running = running + 1
            net.spawn(function()
                local r = net.call(capped.addr, { code = req.CONTROLLER_GET_NEXT_BROKER_ID, ext = {
                    clusterName = "C", brokerName = "bs-flood" } }, 30000)
                replies[#replies + 1] = r or false
                running = running - 1
            end)
        end
        local done = server.eventually(function() return running == 0 end, 30000)
        assert(e.proc:kill(18))
        assert.truthy(done)
        local refused, seen = 0, {}
        for _, r in ipairs(replies) do
            assert.truthy(r)
            seen[#seen + 1] = r.code .. " " .. tostring(r.remark)
            -- (One may have been answered as the signal landed.)
            assert.truthy(r.code == R.CONTROLLER_NOT_LEADER or r.code == SUCCESS, r.remark)
            if r.code ~= SUCCESS and r.remark:find("too many etcd calls in flight (etcdMaxCallsInFlight 2)", 1, true) then
                refused = refused + 1
            end
        end
        assert.truthy(refused >= 1, table.concat(seen, "\n") .. "\n" .. capped:log())
        -- etcd answers again: the controller is (still or again) active
        -- and serves.
        assert.truthy(server.eventually(function()
            return call(capped, req.CONTROLLER_GET_NEXT_BROKER_ID, { clusterName = "C", brokerName = "bs-flood" })
                .code == SUCCESS
        end, 20000), capped:log())
        capped:kill()
    end)
end)
