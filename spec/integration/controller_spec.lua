-- The controller role on a real etcd: RocketMQ 5's controller requests,
-- codes and bodies; elections when a master stops heartbeating; two
-- controllers on one etcd (kill -9 of the active one); stale and forged
-- requests refused with 5.x's codes; etcd down.  The spec plays the
-- brokers' side of the protocol (what a 5.x broker in controller mode
-- sends: GET_NEXT_BROKER_ID, APPLY_BROKER_ID, REGISTER_BROKER, 904
-- heartbeats, ELECT_MASTER, ALTER_SYNC_STATE_SET).
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local server = require("support.server")
local etcd = require("support.etcd")

local req = codes.request
local SUCCESS = 0
local FENCED_MASTER_EPOCH, FENCED_SSS_EPOCH, INVALID_MASTER, INVALID_REPLICAS = 2000, 2001, 2002, 2003
local INVALID_REQUEST, NOT_LEADER, METADATA_NOT_EXIST = 2005, 2007, 2008
local NEED_TO_BE_REGISTERED, MASTER_STILL_EXIST, BROKER_ID_INVALID = 2010, 2011, 2014

local available = etcd.available()

-- `rmq admin ARGS...`: exit code, output.  Run as a child the loop
-- waits for (not io.popen, which would stop the spec's heartbeats).
local function rmq_admin(args)
    local children = require("support.children")
    local out = require("support.tmp").name()
    local argv = { "admin" }
    for _, a in ipairs(args) do
        argv[#argv + 1] = a
    end
    local p = assert(children.spawn({ file = server.build .. "/rmq", args = argv, stdout = out, stderr = out,
        env = server.env_with_home(require("support.tmp").dir()) }))
    local status = p:wait(30000)
    local f = io.open(out)
    local text = f and f:read("a") or ""
    if f then
        f:close()
    end
    return status, text
end

local function controller(e, extra)
    local overrides = { "etcdEndpoints=" .. e.url, "scanNotActiveBrokerInterval=300", "etcdLeaseTtlSeconds=2",
        "controllerMaxBrokerSets=2" }
    for _, o in ipairs(extra or {}) do
        overrides[#overrides + 1] = o
    end
    return server.start({ role = "controller" }, overrides)
end

local function call(c, code, ext, body)
    local strs = {}
    for k, v in pairs(ext or {}) do
        strs[k] = tostring(v)
    end
    return assert(net.call(c.addr, { code = code, ext = strs, body = body }, 5000))
end

local function leader_of(...)
    for _, c in ipairs({ ... }) do
        local r = call(c, req.CONTROLLER_GET_METADATA_INFO)
        if r.ext.isLeader == "true" then
            return c
        end
    end
end

-- One broker's side: apply for an id, register, heartbeat.
local function join(c, cluster, name, addr)
    local r = call(c, req.CONTROLLER_GET_NEXT_BROKER_ID, { clusterName = cluster, brokerName = name })
    assert.equal(SUCCESS, r.code, r.remark)
    local id = tonumber(r.ext.nextBrokerId)
    r = call(c, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = cluster, brokerName = name,
        appliedBrokerId = id, registerCheckCode = addr .. ";" .. os.time() })
    assert.equal(SUCCESS, r.code, r.remark)
    r = call(c, req.CONTROLLER_REGISTER_BROKER, { clusterName = cluster, brokerName = name,
        brokerId = id, brokerAddress = addr })
    assert.equal(SUCCESS, r.code, r.remark)
    return id, r
end

local function heartbeat(cs, cluster, name, id, addr, offset, epoch)
    for _, c in ipairs(cs) do
        net.oneway(c.addr, { code = req.BROKER_HEARTBEAT, ext = {
            clusterName = cluster, brokerName = name, brokerId = tostring(id), brokerAddr = addr,
            epoch = tostring(epoch or 0), maxOffset = tostring(offset or 0), confirmOffset = "0",
            heartbeatTimeoutMills = "1500", electionPriority = "0" } })
    end
end

describe("controller on etcd", function()
    if not available then
        pending(etcd.why)
        return
    end

    local e, c1, c2
    local beating = {}     -- id -> true while the spec heartbeats for it
    local stop_beats = false

    setup(function()
        e = etcd.start()
        c1 = controller(e)
        c2 = controller(e)
        assert.truthy(server.eventually(function() return leader_of(c1, c2) end, 15000))
        -- Both have seen who leads.
        assert.truthy(server.eventually(function()
            local a = call(c1, req.CONTROLLER_GET_METADATA_INFO).ext.controllerLeaderAddress
            return a ~= nil and a == call(c2, req.CONTROLLER_GET_METADATA_INFO).ext.controllerLeaderAddress
        end, 15000))
    end)

    teardown(function()
        stop_beats = true
        for _, s in pairs({ c1, c2 }) do   -- one may be nil (killed)
            if s then
                s:kill()
            end
        end
        if e then
            e:stop()
        end
    end)

    local function beat_loop(cluster, name, offsets)
        net.spawn(function()
            while not stop_beats do
                for id, addr in pairs(beating) do
                    local live = {}
                    for _, c in pairs({ c1, c2 }) do
                        live[#live + 1] = c
                    end
                    heartbeat(live, cluster, name, id, addr, offsets[id] or 0)
                end
                net.sleep(200)
            end
        end)
    end

    it("answers GET_METADATA_INFO with one leader and the peers", function()
        local l = leader_of(c1, c2)
        local other = l == c1 and c2 or c1
        local r = call(other, req.CONTROLLER_GET_METADATA_INFO)
        assert.equal("false", r.ext.isLeader)
        assert.equal(l.addr, r.ext.controllerLeaderAddress)
        -- The peers as of the leader's last campaign round (every TTL/3).
        local peers = server.eventually(function()
            local p = call(l, req.CONTROLLER_GET_METADATA_INFO).ext.peers
            return p:find(c1.addr, 1, true) and p:find(c2.addr, 1, true) and p
        end, 10000)
        assert.truthy(peers, call(l, req.CONTROLLER_GET_METADATA_INFO).ext.peers)
        -- A standby refuses what only the active controller answers.
        r = call(other, req.CONTROLLER_GET_NEXT_BROKER_ID, { clusterName = "C", brokerName = "x" })
        assert.equal(NOT_LEADER, r.code)
    end)

    it("assigns ids, elects the first master, alters the SyncStateSet with fencing, re-elects on silence", function()
        local l = leader_of(c1, c2)
        local offsets = { [1] = 100, [2] = 90, [3] = 80 }
        beat_loop("C", "bs-a", offsets)
        local id1 = join(l, "C", "bs-a", "127.0.0.1:20911")
        assert.equal(1, id1)
        beating[1] = "127.0.0.1:20911"
        assert.truthy(server.eventually(function()
            return call(l, req.CONTROLLER_REGISTER_BROKER, { clusterName = "C", brokerName = "bs-a",
                brokerId = 1, brokerAddress = "127.0.0.1:20911" }).code == SUCCESS
        end))
        -- Nobody is master yet: the first broker asking becomes it (5.x).
        local r = call(l, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-a", brokerId = 1 })
        assert.equal(SUCCESS, r.code, r.remark)
        assert.same({ "1", "127.0.0.1:20911", "1", "1" },
            { r.ext.masterBrokerId, r.ext.masterAddress, r.ext.masterEpoch, r.ext.syncStateSetEpoch })
        local body = require("rmq.fastjson").decode(r.body)
        assert.same({ 1 }, body.syncStateSet)
        assert.equal("bs-a", body.brokerMemberGroup.brokerName)

        net.sleep(500)     -- a few heartbeats of the master
        local id2 = join(l, "C", "bs-a", "127.0.0.1:20921")
        local id3, reg3 = join(l, "C", "bs-a", "127.0.0.1:20931")
        assert.same({ 2, 3 }, { id2, id3 })
        assert.equal("1", reg3.ext.masterBrokerId)       -- the master is alive: named
        beating[2], beating[3] = "127.0.0.1:20921", "127.0.0.1:20931"
        net.sleep(300)

        -- Asking again while the master is alive changes nothing.
        r = call(l, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-a", brokerId = 2 })
        assert.equal(MASTER_STILL_EXIST, r.code)

        -- The master grows its SyncStateSet: stale epochs are fenced.
        local function alter(master, epoch, set, sss_epoch)
            return call(l, req.CONTROLLER_ALTER_SYNC_STATE_SET,
                { brokerName = "bs-a", masterBrokerId = master, masterEpoch = epoch },
                cjson.encode({ syncStateSet = set, syncStateSetEpoch = sss_epoch }))
        end
        assert.equal(FENCED_MASTER_EPOCH, alter(1, 0, { 1, 2 }, 1).code)
        assert.equal(FENCED_SSS_EPOCH, alter(1, 1, { 1, 2 }, 0).code)
        assert.equal(INVALID_MASTER, alter(2, 1, { 1, 2 }, 1).code)
        assert.equal(INVALID_REPLICAS, alter(1, 1, { 1, 9 }, 1).code)
        r = alter(1, 1, { 1, 2 }, 1)
        assert.equal(SUCCESS, r.code, r.remark)
        assert.equal("2", r.ext.newSyncStateSetEpoch)
        assert.same({ syncStateSet = { 1, 2 }, syncStateSetEpoch = 2 }, cjson.decode(r.body))

        r = call(l, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = "bs-a" })
        assert.same({ "1", "127.0.0.1:20911", "1" }, { r.ext.masterBrokerId, r.ext.masterAddress, r.ext.masterEpoch })

        -- The master goes silent: broker 2 (in the SyncStateSet) wins,
        -- not broker 3, whatever offset 3 reports.
        offsets[3] = 1000000000000
        beating[1] = nil
        local info = server.eventually(function()
            local x = call(l, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = "bs-a" })
            return x.ext.masterBrokerId == "2" and x
        end, 10000)
        assert.truthy(info, "no new master within 10 s:\n" .. l:log())
        assert.same({ "127.0.0.1:20921", "2" }, { info.ext.masterAddress, info.ext.masterEpoch })
        assert.same({ syncStateSet = { 2 }, syncStateSetEpoch = 3 }, cjson.decode(info.body))

        -- The old master's view is stale now.
        assert.equal(INVALID_MASTER, alter(1, 1, { 1, 2 }, 2).code)
        assert.equal(FENCED_MASTER_EPOCH, alter(2, 1, { 2, 3 }, 3).code)
        r = alter(2, 2, { 2, 3 }, 3)
        assert.equal(SUCCESS, r.code, r.remark)

        -- GET_SYNC_STATE_DATA: BrokerReplicasInfo.
        r = call(l, req.CONTROLLER_GET_SYNC_STATE_DATA, nil, cjson.encode({ "bs-a" }))
        assert.equal(SUCCESS, r.code, r.remark)
        local t = require("rmq.fastjson").decode(r.body).replicasInfoTable["bs-a"]
        assert.equal(2, t.masterBrokerId)
        assert.same({ 2, 3 }, { t.inSyncReplicas[1].brokerId, t.inSyncReplicas[2].brokerId })
        assert.equal(1, t.notInSyncReplicas[1].brokerId)
        assert.is_false(t.notInSyncReplicas[1].alive)
    end)

    it("refuses forged and stale requests with 5.x's codes", function()
        local l = leader_of(c1, c2)
        -- Another cluster's broker claiming a set of cluster C.
        local r = call(l, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "Other", brokerName = "bs-a",
            appliedBrokerId = 4, registerCheckCode = "127.0.0.1:1;1" })
        assert.equal(INVALID_REQUEST, r.code)
        r = call(l, req.CONTROLLER_ELECT_MASTER, { clusterName = "Other", brokerName = "bs-a", brokerId = 2 })
        assert.equal(INVALID_REQUEST, r.code)
        -- An id taken by another broker (another check code).
        r = call(l, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "bs-a",
            appliedBrokerId = 2, registerCheckCode = "127.0.0.1:9;1" })
        assert.equal(BROKER_ID_INVALID, r.code)
        -- A first id other than 1 for a new set.
        r = call(l, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "bs-new",
            appliedBrokerId = 7, registerCheckCode = "127.0.0.1:9;1" })
        assert.equal(BROKER_ID_INVALID, r.code)
        -- Unknown brokers and sets.
        r = call(l, req.CONTROLLER_REGISTER_BROKER, { clusterName = "C", brokerName = "bs-a",
            brokerId = 42, brokerAddress = "127.0.0.1:1" })
        assert.equal(NEED_TO_BE_REGISTERED, r.code)
        r = call(l, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-a", brokerId = 42 })
        assert.equal(NEED_TO_BE_REGISTERED, r.code)
        r = call(l, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "nope", brokerId = 1 })
        assert.equal(NEED_TO_BE_REGISTERED, r.code)
        r = call(l, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = "nope" })
        assert.equal(METADATA_NOT_EXIST, r.code)
        -- A broker name that would be another etcd key.
        r = call(l, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "../leader",
            appliedBrokerId = 1, registerCheckCode = "127.0.0.1:9;1" })
        assert.equal(INVALID_REQUEST, r.code)
        r = call(l, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = "a/b" })
        assert.equal(METADATA_NOT_EXIST, r.code)
        -- Past controllerMaxBrokerSets (2 here: bs-a and bs-x), no new set.
        r = call(l, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "bs-x",
            appliedBrokerId = 1, registerCheckCode = "127.0.0.1:9;1" })
        assert.equal(SUCCESS, r.code, r.remark)
        r = call(l, req.CONTROLLER_APPLY_BROKER_ID, { clusterName = "C", brokerName = "bs-y",
            appliedBrokerId = 1, registerCheckCode = "127.0.0.1:9;1" })
        assert.equal(BROKER_ID_INVALID, r.code)
        assert.truthy(r.remark:find("controllerMaxBrokerSets", 1, true), r.remark)
        -- A header missing a required field, a body that is not a SyncStateSet.
        r = call(l, req.CONTROLLER_GET_REPLICA_INFO, {})
        assert.equal(1, r.code)
        r = call(l, req.CONTROLLER_ALTER_SYNC_STATE_SET, { brokerName = "bs-a", masterBrokerId = 2,
            masterEpoch = 2 }, "not json")
        assert.equal(INVALID_REQUEST, r.code)
    end)

    it("rmq admin's controller commands: 5.x's names, options and output", function()
        local l = leader_of(c1, c2)
        local other = l == c1 and c2 or c1
        -- Through the standby: the commands find the active controller.
        local code, out = rmq_admin({ "getControllerMetaData", "-a", other.addr })
        assert.equal(0, code, out)
        assert.truthy(out:find("#ControllerGroup\t/rmq/controller", 1, true), out)
        assert.truthy(out:find("#ControllerLeaderAddress\t" .. l.addr, 1, true), out)
        assert.truthy(out:find("#Peer:\t" .. c1.addr, 1, true) and out:find("#Peer:\t" .. c2.addr, 1, true), out)

        code, out = rmq_admin({ "getSyncStateSet", "-a", other.addr, "-b", "bs-a" })
        assert.equal(0, code, out)
        assert.truthy(out:find("#brokerName\tbs-a\n#MasterBrokerId\t2\n#MasterAddr\t127.0.0.1:20921\n"
            .. "#MasterEpoch\t2\n#SyncStateSetEpoch\t4\n#SyncStateSetNums\t2\n", 1, true), out)
        assert.truthy(out:find("InSyncReplica:\tReplicaIdentity{brokerName='bs-a', brokerId=3, "
            .. "brokerAddress='127.0.0.1:20931', alive=true}", 1, true), out)
        assert.truthy(out:find("NotInSyncReplica:\tReplicaIdentity{brokerName='bs-a', brokerId=1, "
            .. "brokerAddress='127.0.0.1:20911', alive=false}", 1, true), out)

        -- electMaster designates broker 3 (alive, in the SyncStateSet).
        code, out = rmq_admin({ "electMaster", "-a", l.addr, "-c", "C", "-bn", "bs-a", "-b", "3" })
        assert.equal(0, code, out)
        assert.truthy(out:find("#BrokerMasterAddr\t127.0.0.1:20931\n#MasterEpoch\t3", 1, true)
            or out:find("#BrokerMasterAddr\t127.0.0.1:20931\n#MasterEpoch\t3", 1, true), out)
        assert.truthy(out:find("\t#Broker\t1\t127.0.0.1:20911\n", 1, true), out)
        -- Broker 1 is dead: designating it fails, with 5.x's code.
        code, out = rmq_admin({ "electMaster", "-a", l.addr, "-c", "C", "-bn", "bs-a", "-b", "1" })
        assert.equal(1, code, out)
        assert.truthy(out:find("CONTROLLER_ELECT_MASTER_FAILED (code 2012)", 1, true), out)

        -- cleanBrokerMetadata: a living broker only with -l.
        code, out = rmq_admin({ "cleanBrokerMetadata", "-a", l.addr, "-bn", "bs-a", "-b", "2" })
        assert.equal(1, code, out)
        assert.truthy(out:find("code 2009", 1, true), out)
        code, out = rmq_admin({ "cleanBrokerMetadata", "-a", l.addr, "-bn", "bs-a", "-b", "1", "-c", "C" })
        assert.equal(0, code, out)
        assert.truthy(out:find("clear broker bs-a metadata from controller success!", 1, true), out)

        code, out = rmq_admin({ "getControllerConfig", "-a", c1.addr .. ";" .. c2.addr })
        assert.equal(0, code, out)
        assert.truthy(out:find("etcdEndpoints%s+=  " .. e.url:gsub("%p", "%%%0")), out)
        code, out = rmq_admin({ "updateControllerConfig", "-a", c1.addr, "-k", "notifyBrokerRoleChanged",
            "-v", "false" })
        assert.equal(0, code, out)
        assert.truthy(out:find("update controller config success![" .. c1.addr .. "]\nnotifyBrokerRoleChanged : false",
            1, true), out)
        code, out = rmq_admin({ "getControllerConfig", "-a", c1.addr .. ";" .. c2.addr })
        assert.equal(0, code, out)
        assert.truthy(out:find("notifyBrokerRoleChanged%s+=  false") and out:find("notifyBrokerRoleChanged%s+=  true"),
            out)
        code, out = rmq_admin({ "updateControllerConfig", "-a", c1.addr, "-k", "notifyBrokerRoleChanged", "-v", "true" })
        assert.equal(0, code, out)
        code, out = rmq_admin({ "updateControllerConfig", "-a", c1.addr, "-k", "etcdKeyPrefix", "-v", "/x" })
        assert.equal(1, code, out)
        assert.truthy(out:find("key 'etcdKeyPrefix' cannot be changed while rmq runs", 1, true), out)
        -- Give bs-a back its master 2 for the next case.
        beating[2] = beating[2] or "127.0.0.1:20921"
        code, out = rmq_admin({ "electMaster", "-a", l.addr, "-c", "C", "-bn", "bs-a", "-b", "2" })
        assert.equal(1, code, out)     -- 2 is not in the SyncStateSet {3} any more
    end)

    it("kill -9 of the active controller: the other takes over and the next election works", function()
        local l = leader_of(c1, c2)
        local other = l == c1 and c2 or c1
        l:kill()
        if l == c1 then c1 = nil else c2 = nil end
        local took = server.eventually(function()
            return call(other, req.CONTROLLER_GET_METADATA_INFO).ext.isLeader == "true"
        end, 15000)
        assert.truthy(took, other:log())
        -- The master (3, after electMaster) takes 2 into its SyncStateSet,
        -- then goes silent: the new active controller elects 2.
        local cur = call(other, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = "bs-a" })
        assert.equal("3", cur.ext.masterBrokerId)
        local r = call(other, req.CONTROLLER_ALTER_SYNC_STATE_SET,
            { brokerName = "bs-a", masterBrokerId = 3, masterEpoch = cur.ext.masterEpoch },
            cjson.encode({ syncStateSet = { 3, 2 }, syncStateSetEpoch = cjson.decode(cur.body).syncStateSetEpoch }))
        assert.equal(SUCCESS, r.code, r.remark)
        beating[3] = nil
        local info = server.eventually(function()
            local x = call(other, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = "bs-a" })
            return x.ext.masterBrokerId == "2" and x
        end, 10000)
        assert.truthy(info, other:log())
        assert.equal(tostring(math.tointeger(cur.ext.masterEpoch + 1)), info.ext.masterEpoch)
    end)

    it("etcd down: writes refused with CONTROLLER_NOT_LEADER, 'unreachable' logged about once a second", function()
        local l = assert(leader_of(c1 or c2, c2 or c1))
        e:kill()
        local refused = server.eventually(function()
            local r = call(l, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-a", brokerId = 3 })
            return r.code == NOT_LEADER
        end, 10000)
        assert.truthy(refused)
        for _ = 1, 50 do
            call(l, req.CONTROLLER_GET_NEXT_BROKER_ID, { clusterName = "C", brokerName = "bs-a" })
        end
        net.sleep(1500)
        local n = select(2, l:log():gsub("etcd unreachable %(", ""))
        assert.truthy(n >= 1 and n <= 20, ("%d 'etcd unreachable' lines"):format(n))
    end)
end)

describe("controller election policy", function()
    if not available then
        pending(etcd.why)
        return
    end

    local e, c, dir
    local beating, stop = {}, false

    local function write_policy(rule)
        local f = assert(io.open(dir .. "/spec_elect.lua", "w"))
        f:write(([[
return { elect = function(cands)
    local best
    for _, x in ipairs(cands) do
        if x.alive and x.inSyncStateSet and (best == nil or x.brokerId %s best) then best = x.brokerId end
    end
    return best, best == nil and "nobody" or nil
end }
]]):format(rule))
        f:close()
    end

    setup(function()
        e = etcd.start()
        dir = require("support.tmp").dir()
        write_policy(">")           -- the highest alive id of the SyncStateSet
        c = server.start({ role = "controller", electPolicy = "spec_elect" },
            { "etcdEndpoints=" .. e.url, "scanNotActiveBrokerInterval=300", "etcdLeaseTtlSeconds=2" },
            { env = { "LUA_PATH=" .. dir .. "/?.lua;;", "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin") } })
        assert.truthy(server.eventually(function() return leader_of(c) end, 15000))
        net.spawn(function()
            while not stop do
                for id, off in pairs(beating) do
                    heartbeat({ c }, "C", "bs-p", id, "127.0.0.1:" .. (30000 + id), off)
                end
                net.sleep(200)
            end
        end)
    end)

    teardown(function()
        stop = true
        if c then c:kill() end
        if e then e:stop() end
    end)

    local function master()
        return call(c, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = "bs-p" })
    end

    local function grow(set)
        local info = master()
        local body = cjson.decode(info.body)
        local r = call(c, req.CONTROLLER_ALTER_SYNC_STATE_SET, { brokerName = "bs-p",
            masterBrokerId = info.ext.masterBrokerId, masterEpoch = info.ext.masterEpoch },
            cjson.encode({ syncStateSet = set, syncStateSetEpoch = body.syncStateSetEpoch }))
        assert.equal(SUCCESS, r.code, r.remark)
    end

    it("elects with the conf's electPolicy and follows its new code after SIGHUP", function()
        for id = 1, 3 do
            assert.equal(id, (join(c, "C", "bs-p", "127.0.0.1:" .. (30000 + id))))
            beating[id] = 1000 - id * 100      -- the default would pick 1, then 2
        end
        net.sleep(500)
        local r = call(c, req.CONTROLLER_ELECT_MASTER, { clusterName = "C", brokerName = "bs-p", brokerId = 1 })
        assert.equal(SUCCESS, r.code, r.remark)
        grow({ 1, 2, 3 })
        beating[1] = nil
        assert.truthy(server.eventually(function() return master().ext.masterBrokerId == "3" end, 10000), c:log())

        write_policy("<")           -- now the lowest
        assert(c.proc:kill(1))
        assert.truthy(server.eventually(function()
            return c:log():find("SIGHUP: reloaded spec_elect on 1 workers", 1, true)
        end, 30000), c:log())
        beating[1] = 900
        net.sleep(500)
        grow({ 3, 1, 2 })
        beating[3] = nil
        assert.truthy(server.eventually(function() return master().ext.masterBrokerId == "1" end, 10000), c:log())
    end)

    it("stops on SIGTERM, revoking its etcd lease", function()
        local status = c:stop()
        assert.equal(0, status, c:log())
        assert.truthy(c:log():find("controller: stopped; etcd lease %d+ revoked"), c:log())
        -- The leader key went with the lease: a new controller is active at once.
        local c2 = controller(e)
        assert.truthy(server.eventually(function() return leader_of(c2) end, 5000), c2:log())
        c2:kill()
        c = nil
    end)
end)
