-- Who may replicate from a master (issue 21 item 7), with real processes
-- on loopback addresses (127.0.0.0/8 is all local): RocketMQ's HA
-- protocol has no authentication, and 4.9.8 serves the whole commit log
-- to any peer that sends an 8-byte offset.  rmq serves the brokers
-- registered for its brokerName at the NameServers, haMasterAddress and
-- haAllowedAddresses; an unknown peer is held unread while the master
-- asks the NameServers again (a new slave may connect before the master
-- has seen its registration), then closed without a byte.
local net = require("rmq.net")
local socket = require("socket")
local cjson = require("cjson")
local server = require("support.server")
local rq = require("support.requests")
local nsclient = require("support.nsclient")

local FILE = 64 * 1024

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function runtime(addr)
    local r = call(addr, { code = 28 })
    assert.equal(0, r.code, r.remark)
    return cjson.decode(r.body).table
end

local function send(addr, topic, body)
    local r = call(addr, rq.send({ group = "HaAllowedP", topic = topic, queues = 1, born = 1796034593124,
                                   body = body }))
    assert.equal(0, r.code, r.remark)
end

-- A raw HA client from local address `from`: sends offset 0, then reads
-- until the master closes, `secs` pass, or what came holds `until_text`.
-- -> bytes received, closed?
local function raw_slave(ha_addr, from, secs, until_text)
    local host, port = ha_addr:match("^(.*):(%d+)$")
    local c = assert(socket.tcp())
    assert(c:bind(from, 0))
    c:settimeout(5)
    assert(c:connect(host, tonumber(port)))
    assert(c:send(string.pack(">i8", 0)))
    c:settimeout(0.2)
    local got, closed = "", false
    local t0 = socket.gettime()
    while socket.gettime() - t0 < secs do
        local data, err, part = c:receive(65536)
        got = got .. (data or part or "")
        if err == "closed" then
            closed = true
            break
        end
        if until_text and got:find(until_text, 1, true) then
            break
        end
    end
    c:close()
    return got, closed
end

describe("HA port: who may replicate", function()
    local ns, master, slave, mdir

    local function broker_conf(role, id, dir, extra)
        local c = {
            role = "broker", workers = 1, brokerName = "broker-hal", brokerClusterName = "HalCluster",
            brokerId = id, brokerRole = role, storePathRootDir = dir, mappedFileSizeCommitLog = FILE,
            namesrvAddr = ns.addr, haSendHeartbeatInterval = 1000, registerNameServerPeriod = 10000,
            haTransferFromMinOffset = true,
        }
        for k, v in pairs(extra or {}) do
            c[k] = v
        end
        return c
    end

    setup(function()
        ns = server.start({ role = "namesrv" })
        mdir = server.tmpdir() .. "/master"
        master = server.start(broker_conf("ASYNC_MASTER", 0, mdir))
        send(master.addr, "TBW102", "before any slave: the master's secret")
    end)

    teardown(function()
        for _, s in ipairs({ slave, master, ns }) do
            if s and not s.proc.exited then
                assert.equal(0, s:stop(), s:log())
            end
        end
    end)

    it("gives an unknown peer not one byte, and says so in its log", function()
        local t0 = socket.gettime()
        local bytes, closed = raw_slave(master.ha_addr, "127.0.0.5", 20)
        print(("\nunknown peer 127.0.0.5: %d bytes, closed after %.1f s"):format(#bytes, socket.gettime() - t0))
        assert.is_true(closed, "the master never closed an unknown peer")
        assert.equal(0, #bytes)
        assert.matches("HA: refusing peer 127.0.0.5:%d+: not a broker registered for this brokerName", master:log())
        -- the master serves on: remoting answers
        assert.truthy(runtime(master.addr).commitLogMaxOffset)
    end)

    it("serves a slave registered after the master read the list (held, then served)", function()
        -- A broker of this brokerName registers from 127.0.0.6 (its
        -- registration lives as long as this connection), then its HA
        -- client connects at once: the master has not seen it yet.
        local c = assert(net.connect(ns.addr))
        local r = nsclient.register(c, { cluster = "HalCluster", name = "broker-hal", id = 7,
                                         addr = "127.0.0.6:10911", topics = {}, counter = 1 })
        assert.equal(0, r.code, r.remark)
        local t0 = socket.gettime()
        local bytes = raw_slave(master.ha_addr, "127.0.0.6", 15, "the master's secret")
        local took = socket.gettime() - t0
        c:close()
        print(("\nslave registered from 127.0.0.6 after the list was read: %d bytes (first frame after %.1f s)")
            :format(#bytes, took))
        assert.is_true(#bytes >= 12, "no frame for a registered slave")
        local phy = string.unpack(">i8", bytes)
        assert.equal(0, phy)
        assert.truthy(bytes:find("the master's secret", 1, true))
    end)

    it("a new slave held while the master writes past a file still gets that file (issue 21)", function()
        -- 4.9.8 gives a new slave (offset 0) the master's last file as it
        -- is when the slave connects.  A slave held unread (not yet seen
        -- registered) while the master wrote past a file boundary used to
        -- get the file current when it was served: the bytes between were
        -- never replicated and its log never equalled the master's (what
        -- scripts/netns-ha.sh saw without haAllowAnyAddress).
        local dir = server.tmpdir() .. "/m3"
        local m3 = server.start(broker_conf("ASYNC_MASTER", 0, dir, {
            brokerName = "broker-hal3", haTransferFromMinOffset = false, haUnknownPeerHoldMillis = 30000 }))
        local reg
        local ok, err = pcall(function()
            send(m3.addr, "TBW102", "m3: in the first file")
            local host, port = m3.ha_addr:match("^(.*):(%d+)$")
            local c = assert(socket.tcp())
            assert(c:bind("127.0.0.12", 0))
            c:settimeout(5)
            assert(c:connect(host, tonumber(port)))
            assert(c:send(string.pack(">i8", 0)))
            -- held: the master writes on, past its first file
            for _ = 1, 24 do
                send(m3.addr, "TBW102", string.rep("x", 4096))
            end
            assert.truthy(tonumber(runtime(m3.addr).commitLogMaxOffset) > FILE)
            reg = assert(net.connect(ns.addr))
            local r = nsclient.register(reg, { cluster = "HalCluster", name = "broker-hal3", id = 1,
                                               addr = "127.0.0.12:10911", topics = {}, counter = 1 })
            assert.equal(0, r.code, r.remark)
            c:settimeout(20)
            local hdr = assert(c:receive(12))
            c:close()
            local phy = string.unpack(">i8", hdr)
            print(("\nslave held while the master passed a file: first frame at %d"):format(phy))
            assert.equal(0, phy)
        end)
        if reg then
            reg:close()
        end
        assert.equal(0, m3:stop(), m3:log())
        assert(ok, err)
    end)

    it("replicates to a real slave registered at the NameServer, as before", function()
        local sdir = server.tmpdir() .. "/slave"
        slave = server.start(broker_conf("SLAVE", 1, sdir))
        send(master.addr, "TBW102", "after the slave")
        local want = tonumber(runtime(master.addr).commitLogMaxOffset)
        assert.truthy(server.eventually(function()
            return tonumber(runtime(slave.addr).commitLogMaxOffset) >= want
        end, 20000), master:log())
        assert.equal("1", runtime(master.addr).haConnectionCount)
    end)

    it("serves haAllowedAddresses, and no one else, on a master without slaves", function()
        local dir = server.tmpdir() .. "/m2"
        local m2 = server.start(broker_conf("ASYNC_MASTER", 0, dir, {
            brokerName = "broker-hal2", haAllowedAddresses = "127.0.0.8",
            haUnknownPeerHoldMillis = 1000, haUnknownPeersMax = 1 }))
        local ok, err = pcall(function()
            send(m2.addr, "TBW102", "m2 data")
            local bytes = raw_slave(m2.ha_addr, "127.0.0.8", 10, "m2 data")
            assert.truthy(bytes:find("m2 data", 1, true), "no frame for an address in haAllowedAddresses")
            -- One unknown peer held (haUnknownPeersMax = 1), then closed
            -- after haUnknownPeerHoldMillis; a second one meanwhile is
            -- closed at once.  Neither gets a byte.
            local host, port = m2.ha_addr:match("^(.*):(%d+)$")
            local first = assert(socket.tcp())
            assert(first:bind("127.0.0.9", 0))
            first:settimeout(5)
            assert(first:connect(host, tonumber(port)))
            assert(first:send(string.pack(">i8", 0)))
            local t0 = socket.gettime()
            local second, closed = raw_slave(m2.ha_addr, "127.0.0.10", 20)
            assert.is_true(closed)
            assert.equal(0, #second)
            first:settimeout(20)
            local data, e, part = first:receive(1)
            local took = socket.gettime() - t0
            first:close()
            print(("\nhaUnknownPeerHoldMillis 1000: held peer closed after %.1f s, %d bytes"):format(took,
                #(data or part or "")))
            assert.equal("closed", e)
            assert.equal(0, #(data or part or ""))
            assert.matches("enough unknown peers wait already", m2:log())
        end)
        assert.equal(0, m2:stop(), m2:log())
        assert(ok, err)
    end)
end)
