-- A broker group with real processes (issue 11): a NameServer, a master
-- and a slave of broker-a.  The slave learns its master from the
-- NameServer and copies the master's topic configs, consumer offsets,
-- delay offsets and subscription groups (SlaveSynchronize; a short
-- slaveSynchronizePeriodMillis here); route data shows the slave under
-- its brokerId.  Pull replies carry the slave-read policy's
-- suggestWhichBrokerId, and a policy replaced by UPDATE_BROKER_CONFIG
-- answers the next pull; a slave that may not be read sends consumers
-- back to the master (4.9.8).
--
-- Acting master (RIP-32): with supportActingMaster on the NameServer and
-- enableSlaveActingMaster on the group, the master is SIGKILLed: the
-- route shows the slave as id 0, read-only; the slave answers pulls and
-- takes offset commits and queue locks; the master comes back, takes
-- over, and gets the slave's larger offsets.
local net = require("rmq.net")
local cjson = require("cjson")
local fastjson = require("rmq.fastjson")
local core = require("rmq.core")
local server = require("support.server")
local rq = require("support.requests")
local admin = require("support.admin")
local ns = require("support.nsclient")

local CL = 1024 * 1024

local call, create_topic = admin.call, admin.create_topic

local function send(addr, topic, qid, body, props)
    return call(addr, rq.send({ group = "SyncProducer", topic = topic, qid = qid, props = props or "TAGS\1TagA",
                                body = body }))
end

local function pull(addr, group, topic, qid, offset)
    return call(addr, rq.pull({ group = group, topic = topic, qid = qid, offset = offset }))
end

local function commit(addr, group, topic, qid, offset)
    return call(addr, { code = 15, ext = { consumerGroup = group, topic = topic,
                                           queueId = tostring(qid), commitOffset = tostring(offset) } })
end

local function query_offset(addr, group, topic, qid)
    local r = call(addr, { code = 14, ext = { consumerGroup = group, topic = topic, queueId = tostring(qid) } })
    return r.code == 0 and tonumber(r.ext.offset) or nil
end

local function body_of(addr, code)
    local r = call(addr, { code = code })
    assert.equal(0, r.code, r.remark)
    return assert(fastjson.decode(r.body))
end

local function update_config(addr, kv)
    local lines = {}
    for k, v in pairs(kv) do
        lines[#lines + 1] = k .. "=" .. tostring(v)
    end
    return call(addr, { code = 25, body = table.concat(lines, "\n") .. "\n" })
end

local function route(ns_addr, topic)
    local c = assert(net.connect(ns_addr))
    local rt = ns.route(c, topic)
    c:close()
    return rt
end

local function broker_conf(name, id, namesrv, extra)
    local conf = {
        role = "broker", workers = 2, brokerName = name, brokerClusterName = "DefaultCluster",
        brokerId = id, brokerRole = id == 0 and "ASYNC_MASTER" or "SLAVE",
        storePathRootDir = server.tmpdir() .. "/store-" .. name .. "-" .. id,
        mappedFileSizeCommitLog = CL, namesrvAddr = namesrv,
        slaveSynchronizePeriodMillis = 300, registerNameServerPeriod = 10000,
        flushConsumerOffsetInterval = 200,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return conf
end

local function start_ns(extra)
    local conf = { role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return server.start(conf)
end

local function max_phy(addr)
    return tonumber(cjson.decode(call(addr, { code = 28 }).body).table.commitLogMaxOffset)
end

-- The slave has every byte of the master's commit log (HA).
local function caught_up(m, s)
    local want = max_phy(m.addr)
    return server.eventually(function() return max_phy(s.addr) >= want end, 30000)
end

local function stop_all(list)
    for _, s in ipairs(list) do
        if s and not s.proc.exited then
            -- A clean stop exits 0 (under --asan: no leak either).
            assert.equal(0, s:stop(), s:log())
        end
    end
end

describe("slave of a broker group", function()
    local n, m, s, s_conf

    setup(function()
        n = start_ns()
        m = server.start(broker_conf("broker-a", 0, n.addr, { slaveReadEnable = true }))
        s_conf = broker_conf("broker-a", 1, n.addr)
        s = server.start(s_conf)
    end)

    teardown(function()
        stop_all({ s, m, n })
    end)

    it("registers under its brokerId and learns its master from the NameServer", function()
        create_topic(m.addr, "SyncRouted", 2)
        local rt = server.eventually(function()
            local r = route(n.addr, "SyncRouted")
            return r and r.brokerDatas[1] and r.brokerDatas[1].brokerAddrs["1"] and r
        end, 15000)
        assert.truthy(rt, "the route never showed the slave")
        assert.equal(m.addr, rt.brokerDatas[1].brokerAddrs["0"])
        assert.equal(s.addr, rt.brokerDatas[1].brokerAddrs["1"])
        local log = server.eventually(function()
            return s:log():find("masterAddr of broker group broker%-a is " .. m.addr:gsub("%p", "%%%0"))
        end, 5000)
        assert.truthy(log, s:log())
    end)

    it("takes the master's topics, offsets, delay offsets and groups within a sync period", function()
        create_topic(m.addr, "SyncTopic", 4)
        local g = call(m.addr, { code = 200, body = cjson.encode({
            groupName = "SyncGroup", consumeEnable = true, consumeFromMinEnable = true,
            consumeBroadcastEnable = true, retryQueueNums = 1, retryMaxTimes = 7, brokerId = 0,
            whichBrokerWhenConsumeSlowly = 1, notifyConsumerIdsChangedEnable = true }) })
        assert.equal(0, g.code, g.remark)
        for i = 1, 3 do
            assert.equal(0, send(m.addr, "SyncTopic", 1, "m" .. i).code)
        end
        assert.equal(0, commit(m.addr, "SyncGroup", "SyncTopic", 1, 3).code)
        -- A delayed message (level 1, 1 s): its delivery moves level 1's offset.
        assert.equal(0, send(m.addr, "SyncTopic", 0, "later", "DELAY\0011\2TAGS\1TagL").code)
        local delayed = server.eventually(function()
            local t = body_of(m.addr, 45).offsetTable
            return t and fastjson.int(t["1"]) == 1
        end, 8000)
        assert.truthy(delayed, "the master never delivered the delayed message")

        local ok = server.eventually(function()
            local topics = body_of(s.addr, 21).topicConfigTable
            local offs = body_of(s.addr, 43).offsetTable
            local groups = body_of(s.addr, 201).subscriptionGroupTable
            local delay = body_of(s.addr, 45).offsetTable
            return topics.SyncTopic and topics.SyncTopic.readQueueNums == 4
                and offs["SyncTopic@SyncGroup"] and fastjson.int(offs["SyncTopic@SyncGroup"]["1"]) == 3
                and groups.SyncGroup and groups.SyncGroup.retryMaxTimes == 7
                and delay and fastjson.int(delay["1"]) == 1
        end, 5000)
        assert.truthy(ok, "the slave did not take the master's tables:\n" .. s:log())
        -- The same DataVersion as the master's, and every worker sees them.
        assert.same(body_of(m.addr, 21).dataVersion, body_of(s.addr, 21).dataVersion)
        assert.same(body_of(m.addr, 201).dataVersion, body_of(s.addr, 201).dataVersion)
        for _ = 1, 4 do
            assert.equal(3, query_offset(s.addr, "SyncGroup", "SyncTopic", 1))
        end
        -- A topic deleted on the master goes on the slave too.
        assert.equal(0, call(m.addr, { code = 215, ext = { topic = "SyncTopic" } }).code)
        local gone = server.eventually(function()
            return body_of(s.addr, 21).topicConfigTable.SyncTopic == nil
        end, 5000)
        assert.truthy(gone)
        -- ... and the slave wrote what it took to its own store.
        local on_disk = server.eventually(function()
            local text = server.read_file(s_conf.storePathRootDir .. "/config/consumerOffset.json")
            return text:find("SyncTopic@SyncGroup", 1, true)
        end, 5000)
        assert.truthy(on_disk, "consumerOffset.json of the slave lacks the master's offset")
    end)

    it("is listed by rmq broker-status with its acknowledged offset and lag", function()
        create_topic(m.addr, "SyncStatus", 1)
        assert.equal(0, send(m.addr, "SyncStatus", 0, "status").code)
        assert.truthy(server.eventually(function()
            return body_of(s.addr, 21).topicConfigTable.SyncStatus
        end, 5000))
        local p = io.popen(server.home_prefix() .. server.build .. "/rmq broker-status -n " .. n.addr .. " --json 2>&1")
        local out = p:read("a")
        p:close()
        local rows = cjson.decode(out)
        assert.equal(2, #rows, out)
        local mr, sr = rows[1], rows[2]
        assert.equal(0, mr.id)
        assert.equal(m.addr, mr.addr)
        assert.equal("ASYNC_MASTER", mr.role)
        local master_max = tonumber(cjson.decode(call(m.addr, { code = 28 }).body).table.commitLogMaxOffset)
        assert.equal(master_max, mr.maxOffset)
        assert.equal(1, sr.id)
        assert.equal(s.addr, sr.addr)
        assert.equal("SLAVE", sr.role)
        local slave_max = tonumber(cjson.decode(call(s.addr, { code = 28 }).body).table.commitLogMaxOffset)
        assert.equal(slave_max, sr.ackOffset)
        assert.equal(master_max - slave_max, sr.lagBytes)
        if sr.lagBytes > 0 then
            -- The oldest record the slave lacks was stored a moment ago.
            assert.truthy(sr.lagSeconds >= 0 and sr.lagSeconds < 120, out)
        else
            assert.equal(0, sr.lagSeconds)
        end
        assert.truthy(math.abs(sr.lastSync - core.now_ms()) < 10000, out)
        -- The text form has one line per broker under a header.
        p = io.popen(server.home_prefix() .. server.build .. "/rmq broker-status -n " .. n.addr .. " 2>&1")
        out = p:read("a")
        p:close()
        assert.truthy(out:find("#AckOffset", 1, true), out)
        assert.truthy(out:find(s.addr, 1, true), out)
    end)

    it("refuses writes and, not readable, serves pulls but sends the consumer back to the master", function()
        create_topic(m.addr, "SyncPull", 1)
        assert.equal(0, send(m.addr, "SyncPull", 0, "x").code)
        server.eventually(function() return body_of(s.addr, 21).topicConfigTable.SyncPull end, 5000)
        local r = send(s.addr, "SyncPull", 0, "y")
        assert.are_not.equal(0, r.code)
        -- slaveReadEnable is off on the slave: 4.9.8 serves what it has
        -- (its PULL_RETRY_IMMEDIATELY is overwritten by the read's code)
        -- and suggests the master.  The message reaches the slave on its
        -- own channel, not with the topic's config: wait for it.
        server.eventually(function()
            r = pull(s.addr, "SyncReader", "SyncPull", 0, 0)
            return r.code == 0
        end, 5000)
        assert.equal(0, r.code, r.remark)
        assert.equal("1", r.ext.nextBeginOffset)
        assert.equal("0", tostring(r.ext.suggestWhichBrokerId))
        -- Made readable at run time: served, and the group's brokerId suggested.
        assert.equal(0, update_config(s.addr, { slaveReadEnable = "true", slaveReadPolicy = "rmq.policy.slave_read_always" }).code)
        r = pull(s.addr, "SyncReader", "SyncPull", 0, 0)
        assert.equal(0, r.code, r.remark)
        assert.equal("1", tostring(r.ext.suggestWhichBrokerId))
        assert.equal(0, update_config(s.addr, { slaveReadEnable = "false", slaveReadPolicy = "rmq.policy.slave_read" }).code)
        r = pull(s.addr, "SyncReader", "SyncPull", 0, 0)
        assert.same({ 0, "0" }, { r.code, tostring(r.ext.suggestWhichBrokerId) })
    end)

    it("suggests the slave by policy, and a replaced policy answers the next pull", function()
        create_topic(m.addr, "SyncPolicy", 1)
        assert.truthy(server.eventually(function()
            return body_of(s.addr, 21).topicConfigTable.SyncPolicy
        end, 5000))
        for i = 1, 3 do
            assert.equal(0, send(m.addr, "SyncPolicy", 0, "p" .. i).code)
        end
        -- (The slave's pull below counts them: replication is asynchronous.)
        assert.truthy(caught_up(m, s), "the slave never caught up")
        -- 4.9.8's rule: a consumer that keeps up stays on the master (its
        -- group's brokerId 0), native path and Lua path alike.
        for _ = 1, 4 do
            local r = pull(m.addr, "SyncPolicyReader", "SyncPolicy", 0, 0)
            assert.equal(0, r.code, r.remark)
            assert.equal("0", tostring(r.ext.suggestWhichBrokerId))
        end
        local bad = update_config(m.addr, { slaveReadPolicy = "rmq.policy.no_such_policy" })
        assert.equal(1, bad.code)
        assert.falsy(bad.remark:find("/", 1, true), bad.remark)
        -- A peer may not make the broker load a module outside rmq.policy.*
        -- (its top-level code would run on every worker): refused before
        -- any require, and the policy in force keeps answering.
        local foreign = update_config(m.addr, { slaveReadPolicy = "rmq.broker.transaction" })
        assert.equal(1, foreign.code)
        assert.truthy(foreign.remark:find("rmq.policy.*", 1, true), foreign.remark)
        assert.equal("0", tostring(pull(m.addr, "SyncPolicyReader", "SyncPolicy", 0, 0).ext.suggestWhichBrokerId))
        assert.equal(0, update_config(m.addr, { slaveReadPolicy = "rmq.policy.slave_read_always" }).code)
        for _ = 1, 4 do
            local r = pull(m.addr, "SyncPolicyReader", "SyncPolicy", 0, 0)
            assert.equal(0, r.code, r.remark)
            assert.equal("1", tostring(r.ext.suggestWhichBrokerId))
        end
        -- Our consumer follows the suggestion: its next pull goes to the slave.
        local consumer = require("rmq.client.consumer")
        local c = assert(consumer.new({ namesrvAddr = n.addr, consumerGroup = "SyncPolicyReader" }))
        local mq = { topic = "SyncPolicy", brokerName = "broker-a", queueId = 0 }
        local first = assert(c:pull(mq, 0, 32))
        assert.equal(m.addr, first.addr)
        assert.equal(1, first.suggestWhichBrokerId)
        local second, err = c:pull(mq, 0, 32)
        assert.truthy(second, err)
        assert.equal(s.addr, second.addr)
        -- That slave may not be read: it serves what it has (4.9.8) and
        -- sends the consumer back.
        assert.equal("FOUND", second.status)
        assert.equal(3, #second.messages)
        assert.equal(0, second.suggestWhichBrokerId)
        assert.equal(m.addr, assert(c:pull(mq, 0, 32)).addr)
        c:shutdown()
        assert.equal(0, update_config(m.addr, { slaveReadPolicy = "rmq.policy.slave_read" }).code)
        local r = pull(m.addr, "SyncPolicyReader", "SyncPolicy", 0, 0)
        assert.equal("0", tostring(r.ext.suggestWhichBrokerId))
    end)
end)

-- Every message of mq from offset `from` on, with our consumer: bodies in
-- order, and the addresses the pulls went to.
-- Reads mq from `from` on as 4.9.8's push consumer moves its offset
-- (DefaultMQPushConsumerImpl): FOUND and NO_MATCHED_MSG (the client's
-- name for PULL_RETRY_IMMEDIATELY) both move it to nextBeginOffset.
-- Returns the bodies, the addresses pulled and the offset reached.
local function read_like_java(c, mq, from)
    local bodies, addrs, off = {}, {}, from
    for _ = 1, 200 do
        local r, err = c:pull(mq, off, 8)
        assert.truthy(r, err)
        addrs[#addrs + 1] = r.addr
        for _, msg in ipairs(r.status == "FOUND" and r.messages or {}) do
            bodies[#bodies + 1] = msg.body
        end
        if r.status == "FOUND" or r.status == "NO_MATCHED_MSG" then
            off = r.nextBeginOffset
        elseif r.status == "NO_NEW_MSG" then
            break
        end
    end
    return bodies, addrs, off
end

local function read_queue(c, mq, from)
    local bodies, addrs, off = {}, {}, from
    for _ = 1, 200 do
        local r, err = c:pull(mq, off, 8)
        assert.truthy(r, err)
        addrs[#addrs + 1] = r.addr
        if r.status == "FOUND" then
            for _, msg in ipairs(r.messages) do
                bodies[#bodies + 1] = msg.body
            end
            off = r.nextBeginOffset
        elseif r.status == "NO_NEW_MSG" then
            break
        end
    end
    return bodies, addrs, off
end

describe("read/write separation with replication", function()
    local n, m, s

    setup(function()
        n = start_ns()
        local always = { slaveReadEnable = true, slaveReadPolicy = "rmq.policy.slave_read_always",
                         haTransferFromMinOffset = true }
        m = server.start(broker_conf("broker-a", 0, n.addr, always))
        s = server.start(broker_conf("broker-a", 1, n.addr, always))
    end)

    teardown(function()
        stop_all({ s, m, n })
    end)

    it("a consumer the policy sends to the slave reads there the same messages in order", function()
        create_topic(m.addr, "RwTopic", 2)
        assert.truthy(server.eventually(function()
            return body_of(s.addr, 21).topicConfigTable.RwTopic
        end, 5000))
        local sent = { [0] = {}, [1] = {} }
        for i = 1, 40 do
            local qid = i % 2
            local body = ("rw %d %s"):format(i, ("y"):rep(i * 7))
            assert.equal(0, send(m.addr, "RwTopic", qid, body).code)
            table.insert(sent[qid], body)
        end
        assert.truthy(caught_up(m, s), "the slave never caught up:\n" .. s:log())
        local consumer = require("rmq.client.consumer")
        local c = consumer.new({ namesrvAddr = n.addr, consumerGroup = "RwReader" })
        for qid = 0, 1 do
            local bodies, addrs = read_queue(c, { topic = "RwTopic", brokerName = "broker-a", queueId = qid }, 0)
            assert.same(sent[qid], bodies)
            -- The first pull asks the master, which sends it to the slave;
            -- every later one is answered there.
            assert.equal(m.addr, addrs[1])
            for i = 2, #addrs do
                assert.equal(s.addr, addrs[i])
            end
            assert.truthy(#addrs >= 3)
        end
        c:shutdown()
    end)
end)

describe("a slave-read policy of replication lag", function()
    local n, m, s

    setup(function()
        n = start_ns()
        -- To the slave only while it has every byte (the HA figures).
        local conf = broker_conf("broker-lag", 0, n.addr, { slaveReadEnable = true, haTransferFromMinOffset = true })
        m = server.start({ source = "local c = " .. server.serialize(conf, "") .. [[

c.slaveReadPolicy = function(f)
    if f.slaveConnected and f.slaveLagBytes == 0 then
        return 1
    end
    return 0
end
return c
]] })
    end)

    teardown(function()
        stop_all({ s, m, n })
    end)

    it("sees the slave's acknowledged offset", function()
        create_topic(m.addr, "LagTopic", 1)
        for i = 1, 5 do
            assert.equal(0, send(m.addr, "LagTopic", 0, "lag " .. i).code)
        end
        local r = pull(m.addr, "LagReader", "LagTopic", 0, 0)
        assert.equal(0, r.code, r.remark)
        assert.equal("0", tostring(r.ext.suggestWhichBrokerId))   -- no slave yet
        s = server.start(broker_conf("broker-lag", 1, n.addr, { slaveReadEnable = true }))
        assert.truthy(caught_up(m, s))
        local steered = server.eventually(function()
            return tostring(pull(m.addr, "LagReader", "LagTopic", 0, 0).ext.suggestWhichBrokerId) == "1"
        end, 10000)
        assert.truthy(steered, "the policy never saw the slave caught up")
    end)
end)

describe("acting master", function()
    local n, m, s, m_conf, m_ports

    setup(function()
        n = start_ns({ supportActingMaster = true })
        m_conf = broker_conf("broker-a", 0, n.addr, { enableSlaveActingMaster = true, haTransferFromMinOffset = true })
        -- The master is restarted below on the same ports (as an operator
        -- restarts it): its VIP port, listenPort and haListenPort
        -- (listenPort - 2 .. listenPort + 1), out of the ephemeral range.
        m_ports = { "listenPort=" .. (server.fixed_ports(4) + 2) }
        m = server.start(m_conf, m_ports)
        s = server.start(broker_conf("broker-a", 1, n.addr, { enableSlaveActingMaster = true }))
    end)

    teardown(function()
        stop_all({ s, m, n })
    end)

    it("keeps consumers reading and committing through the slave while the master is gone, "
        .. "then the master takes over with the larger offsets", function()
        create_topic(m.addr, "ActTopic", 2)
        local sent = {}
        for i = 1, 20 do
            sent[i] = "act " .. i
            assert.equal(0, send(m.addr, "ActTopic", 0, sent[i]).code)
        end
        assert.truthy(caught_up(m, s), "the slave never caught up:\n" .. s:log())
        local consumer = require("rmq.client.consumer")
        local mq = { topic = "ActTopic", brokerName = "broker-a", queueId = 0 }
        -- Half of it read and committed on the master; the slave takes the offset.
        local c = consumer.new({ namesrvAddr = n.addr, consumerGroup = "ActGroup" })
        local first = assert(c:pull(mq, 0, 10))
        assert.equal(10, #first.messages)
        assert.truthy(c:update_offset(mq, 10))
        c:shutdown()
        assert.truthy(server.eventually(function()
            return query_offset(s.addr, "ActGroup", "ActTopic", 0) == 10
        end, 5000), "the slave never took the master's offset")

        m:kill()
        -- The NameServer drops the master with its connection: the slave,
        -- lowest id, is shown as id 0 and the queues lose PERM_WRITE.
        local rt = server.eventually(function()
            local r = route(n.addr, "ActTopic")
            return r and r.brokerDatas[1] and r.brokerDatas[1].brokerAddrs["0"] == s.addr and r
        end, 5000)
        assert.truthy(rt, "the route never showed the slave as acting master")
        assert.equal(4, rt.queueDatas[1].perm)
        -- It serves pulls although slaveReadEnable is off (so does 4.9.8's).
        local served = pull(s.addr, "ActGroup", "ActTopic", 0, 0)
        assert.equal(0, served.code, s:log())
        -- Its next registration tells it it has no master (brokerRuntimeInfo
        -- then names none): from there on it acts as master.
        local alone = server.eventually(function()
            return cjson.decode(call(s.addr, { code = 28 }).body).table.masterAddr == nil
        end, 15000)
        assert.truthy(alone, "the slave never learned its master is gone:\n" .. s:log())
        -- A consumer started now reads on from the committed offset, with
        -- nothing lost, and commits there.
        c = consumer.new({ namesrvAddr = n.addr, consumerGroup = "ActGroup" })
        assert.equal(10, c:query_offset(mq))
        local rest, addrs, next_off = read_queue(c, mq, 10)
        assert.same({ table.unpack(sent, 11, 20) }, rest)
        assert.equal(s.addr, addrs[1])
        assert.truthy(c:update_offset(mq, next_off))
        c:shutdown()
        assert.equal(20, query_offset(s.addr, "ActGroup", "ActTopic", 0))
        -- Orderly consumers can lock their queues there.
        local lock = call(s.addr, { code = 41, body = cjson.encode({
            consumerGroup = "ActGroup", clientId = "127.0.0.1@act",
            mqSet = { { topic = "ActTopic", brokerName = "broker-a", queueId = 1 } } }) })
        assert.equal(0, lock.code, lock.remark)
        assert.equal(1, #cjson.decode(lock.body).lockOKMQSet)

        -- The master returns with its store (offset 10 there): it takes
        -- over in the route and gets the slave's larger offset.
        m = server.start(m_conf, m_ports)
        local back = server.eventually(function()
            local r = route(n.addr, "ActTopic")
            return r and r.brokerDatas[1].brokerAddrs["0"] == m.addr
        end, 15000)
        assert.truthy(back, "the master did not take over the route")
        local reconciled = server.eventually(function()
            return query_offset(m.addr, "ActGroup", "ActTopic", 0) == 20
        end, 15000)
        assert.truthy(reconciled, "the master never got the slave's offset:\n" .. s:log())
        assert.equal(20, query_offset(s.addr, "ActGroup", "ActTopic", 0))
        -- New messages on the master are read from there on.
        assert.equal(0, send(m.addr, "ActTopic", 0, "act 21").code)
        c = consumer.new({ namesrvAddr = n.addr, consumerGroup = "ActGroup" })
        assert.equal(20, c:query_offset(mq))
        local more = read_queue(c, mq, 20)
        assert.same({ "act 21" }, more)
        c:shutdown()
    end)
end)

describe("acting master, before the slave learns its master is gone", function()
    local n, m, s

    setup(function()
        n = start_ns({ supportActingMaster = true })
        m = server.start(broker_conf("broker-a", 0, n.addr, { enableSlaveActingMaster = true }))
        -- The slave registers (and so learns of a dead master) every 30 s,
        -- RocketMQ's default: the reads below come before that.
        s = server.start(broker_conf("broker-a", 1, n.addr,
                                     { enableSlaveActingMaster = true, registerNameServerPeriod = 30000 }))
    end)

    teardown(function()
        stop_all({ s, n })
    end)

    it("serves a consumer with committed offsets every new message from the slave (none skipped)", function()
        create_topic(m.addr, "GapTopic", 1)
        local consumer = require("rmq.client.consumer")
        local mq = { topic = "GapTopic", brokerName = "broker-a", queueId = 0 }
        for i = 1, 5 do
            assert.equal(0, send(m.addr, "GapTopic", 0, "old " .. i).code)
        end
        local c = consumer.new({ namesrvAddr = n.addr, consumerGroup = "GapGroup" })
        local old = read_like_java(c, mq, 0)
        assert.equal(5, #old)
        assert.truthy(c:update_offset(mq, 5))
        c:shutdown()
        -- 20 new messages, replicated, the offset synced; then the master dies.
        local sent = {}
        for i = 1, 20 do
            sent[i] = "new " .. i
            assert.equal(0, send(m.addr, "GapTopic", 0, sent[i]).code)
        end
        assert.truthy(caught_up(m, s), "the slave never caught up:\n" .. s:log())
        assert.truthy(server.eventually(function()
            return query_offset(s.addr, "GapGroup", "GapTopic", 0) == 5
        end, 10000), "the slave never took the master's offset")
        m:kill()
        assert.truthy(server.eventually(function()
            local r = route(n.addr, "GapTopic")
            return r and r.brokerDatas[1] and r.brokerDatas[1].brokerAddrs["0"] == s.addr
        end, 10000), "the route never showed the slave as acting master")
        -- A consumer started now pulls the slave from its committed offset:
        -- every new message, none skipped (4.9.8's slave serves them too).
        c = consumer.new({ namesrvAddr = n.addr, consumerGroup = "GapGroup" })
        assert.equal(5, c:query_offset(mq))
        local got, addrs, next_off = read_like_java(c, mq, 5)
        assert.same(sent, got)
        assert.equal(s.addr, addrs[1])
        assert.equal(25, next_off)
        c:shutdown()
    end)
end)
