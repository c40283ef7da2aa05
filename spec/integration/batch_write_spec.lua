-- serverBatchWriteEnable (docs/configuration.md; net/sendbatch.h): a
-- worker writes one loop turn's replies to all its connections in one
-- system call (io_uring sends) instead of one write(2) each.  What a
-- client sees must not change with it: every pipelined request on every
-- connection answered once, in the order sent, with the stream intact
-- (a socket that took only part of its replies gets the rest later), a
-- connection that goes away mid-stream not holding up the others, and
-- every acknowledged message stored.  Checked with the key on (the
-- default) and off.
local socket = require("socket")
local codec = require("rmq.codec")
local net = require("rmq.net")
local server = require("support.server")
local slow = require("support.slowreader")

-- More connections than one batched call takes (SENDBATCH_MAX 64): the
-- rest of a turn goes by write(2) in the same flush.
local CONNS, PER = 80, 100
local TOPIC = "BatchWriteTopic"

-- Sends what the kernel takes of each connection's pending requests and
-- decodes the replies that came back; true when every live connection
-- had `want` replies.
local function pump(conns, want)
    local done = true
    for _, c in ipairs(conns) do
        if not c.gone then
            if #c.head > 0 then
                local n, err, partial = c.s:send(c.head)
                c.head = c.head:sub((n or partial or 0) + 1)
                assert(err == nil or err == "timeout", err)
            end
            while true do
                local data, err, partial = c.s:receive(65536)
                local got = data or partial or ""
                c.inbuf = c.inbuf .. got
                assert(err ~= "closed", "the broker closed a connection")
                if not data or #got == 0 then
                    break
                end
            end
            local pos = 1
            while #c.inbuf - pos + 1 >= 4 do
                local len = string.unpack(">I4", c.inbuf, pos)
                if #c.inbuf - pos + 1 < 4 + len then
                    break
                end
                c.replies[#c.replies + 1] = assert(codec.decode(c.inbuf:sub(pos, pos + 3 + len)))
                pos = pos + 4 + len
            end
            c.inbuf = c.inbuf:sub(pos)
            done = done and #c.replies >= want
        end
    end
    return done
end

local function run(batch)
    local s = server.start({
        role = "standalone", workers = 1, brokerName = "broker-bw",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 64 * 1024 * 1024,
        kvConfigPath = server.tmpdir() .. "/kv.json",
        serverBatchWriteEnable = batch,
    }, { "namesrvListenPort=0" })
    local ok, err = pcall(function()
        local r = assert(net.call(s.broker_addr, { code = 17, ext = {
            topic = TOPIC, defaultTopic = "TBW102", readQueueNums = "2", writeQueueNums = "2",
            perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }, 30000))
        assert.equal(0, r.code)
        local host, port = s.broker_addr:match("^(.+):(%d+)$")
        -- CONNS connections pipelining PER sends each to queue 0, and one
        -- more that sends as many to queue 1 and hangs up without reading
        -- a reply (its own queue: queue 0 then holds exactly what was
        -- acknowledged).
        local conns = {}
        for i = 1, CONNS + 1 do
            local c = assert(socket.tcp())
            c:settimeout(5)
            assert(c:connect(host, tonumber(port)))
            c:settimeout(0)
            local frames = {}
            for j = 1, PER do
                frames[j] = slow.send_frame(i * 100000 + j, TOPIC, i > CONNS and 1 or 0, ("m%d-%d"):format(i, j))
            end
            conns[i] = { s = c, head = table.concat(frames), inbuf = "", replies = {} }
        end
        local quitter = table.remove(conns)
        assert(quitter.s:send(quitter.head:sub(1, #quitter.head // 2)))
        quitter.s:close()
        assert(server.eventually(function() return pump(conns, PER) end, 120000),
               "the pipelined sends were not all answered in 120 s")
        local stored = 0
        for i, c in ipairs(conns) do
            assert.equal(PER, #c.replies, "connection " .. i .. " got more replies than it sent requests")
            for j, rep in ipairs(c.replies) do
                -- In the order sent: the byte stream was cut nowhere.
                assert.equal(i * 100000 + j, rep.opaque)
                assert.is_true(rep.code == 0 or rep.code == 2,
                               "send " .. j .. " on connection " .. i .. ": code " .. tostring(rep.code))
                if rep.code == 0 then
                    stored = stored + 1
                end
            end
            c.s:close()
        end
        assert.is_true(stored > 0, "every send was refused busy")
        -- Every acknowledged message is in queue 0, and nothing else (a
        -- busy refusal stores nothing).
        local m = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = 0 } }, 30000))
        assert.equal(stored, tonumber(m.ext.offset),
                     ("%d acknowledged, the queue holds %s"):format(stored, tostring(m.ext.offset)))
        -- The broker still serves a new client.
        local again = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = 0 } }, 30000))
        assert.equal(0, again.code)
    end)
    s:stop()
    assert(ok, err)
end

describe("replies written for all connections in one call (serverBatchWriteEnable)", function()
    it("answers every pipelined send of 80 connections (more than one batched call takes) in order, one connection hanging up mid-stream, "
        .. "with the key on", function()
        run(true)
    end)
    it("and with it off (one write(2) per connection)", function()
        run(false)
    end)
end)
