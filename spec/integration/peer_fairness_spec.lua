-- Fairness between peers (issue 21, item 2; docs/memory.md "Fairness
-- between connections"): one address opening hundreds of connections,
-- each pipelining requests, must not hold up another client.  Each
-- connection used to decode up to 16 frames per loop turn, whatever its
-- address: 200 connections of a flooding address made a turn of 3,200
-- frames that another client's request waited behind (the attacks'
-- held-pull flood: another client's send p99 65.7 ms against 11.4 idle).
-- Now the connections of one address share serverPeerMaxFramesPerTurn
-- (64) frames a turn.
--
-- What is checked is an order, not a time: the flood and the other
-- client send to the same queue, so each message's queue offset says
-- how many flood messages the broker decoded before it.  While the other
-- client's 160 pipelined sends are decoded (16 a turn on its connection:
-- 10 turns), the flood gets its address's share of each of those turns,
-- about 640 frames; before, 200 x 16 a turn, tens of thousands.
local socket = require("socket")
local codec = require("rmq.codec")
local net = require("rmq.net")
local server = require("support.server")
local slow = require("support.slowreader")

local FLOOD_CONNS, FLOOD_PER, PROBE = 200, 400, 160
local TOPIC = "FairTopic"

-- Sends what the kernel takes of each socket's pending bytes, and
-- counts the reply frames that came back (not decoded: the queue's
-- offsets tell the order).  True when everything was sent and, with
-- `replies`, every connection had that many replies.
local function pump(conns, replies)
    local done = true
    for _, c in ipairs(conns) do
        if #c.head > 0 then
            local n, err, partial = c.s:send(c.head)
            c.head = c.head:sub((n or partial or 0) + 1)
            assert(err == nil or err == "timeout", err)
            done = done and #c.head == 0
        end
        while true do
            local data, err, partial = c.s:receive(65536)
            local got = data or partial or ""
            c.inbuf = c.inbuf .. got
            if not data or err == "closed" or #got == 0 then
                break
            end
        end
        local pos = 1
        while #c.inbuf - pos + 1 >= 4 do
            local len = string.unpack(">I4", c.inbuf, pos)
            if #c.inbuf - pos + 1 < 4 + len then
                break
            end
            pos = pos + 4 + len
            c.replies = c.replies + 1
        end
        c.inbuf = c.inbuf:sub(pos)
        done = done and (replies == nil or c.replies >= replies)
    end
    return done
end

-- Reads n reply frames from a blocking socket: their decoded commands.
local function read_replies(s, n)
    local out = {}
    while #out < n do
        local head = assert(s:receive(4))
        local len = string.unpack(">I4", head)
        local rest = assert(s:receive(len))
        out[#out + 1] = assert(codec.decode(head .. rest))
    end
    return out
end

describe("fairness between peers", function()
    it("answers another client's pipelined sends while one address's 200 connections are decoded, "
        .. "at about its share of each turn", function()
        local s = server.start({
            role = "standalone", workers = 1, brokerName = "broker-fair",
            storePathRootDir = server.tmpdir() .. "/store",
            mappedFileSizeCommitLog = 64 * 1024 * 1024,
            kvConfigPath = server.tmpdir() .. "/kv.json",
        }, { "namesrvListenPort=0" })
        local ok, err = pcall(function()
            local r = assert(net.call(s.broker_addr, { code = 17, ext = {
                topic = TOPIC, defaultTopic = "TBW102", readQueueNums = "1", writeQueueNums = "1",
                perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }, 30000))
            assert.equal(0, r.code)

            -- The flood: 200 connections from 127.0.0.2, 400 sends each,
            -- written as fast as the kernel takes them.
            local host, port = s.broker_addr:match("^(.+):(%d+)$")
            local conns = {}
            for i = 1, FLOOD_CONNS do
                local c = assert(socket.tcp())
                c:settimeout(5)
                assert(c:bind("127.0.0.2", 0))
                assert(c:connect(host, tonumber(port)))
                c:settimeout(0)
                local frames = {}
                for j = 1, FLOOD_PER do
                    frames[j] = slow.send_frame(i * 1000 + j, TOPIC, 0, "flood")
                end
                conns[i] = { s = c, head = table.concat(frames), inbuf = "", replies = 0 }
            end
            assert(server.eventually(function() return pump(conns) end, 60000),
                   "the flood's frames were not all sent in 60 s")

            -- The other client, from 127.0.0.1: 160 sends in one write.
            local p = assert(socket.tcp())
            p:settimeout(60)
            assert(p:connect(host, tonumber(port)))
            local frames = {}
            for j = 1, PROBE do
                frames[j] = slow.send_frame(j, TOPIC, 0, "probe")
            end
            assert(p:send(table.concat(frames)))
            local replies = read_replies(p, PROBE)
            p:close()

            local first, last, accepted = nil, nil, 0
            for _, rep in ipairs(replies) do
                if rep.code == 0 then
                    local off = tonumber(rep.ext.queueOffset)
                    first = math.min(first or off, off)
                    last = math.max(last or off, off)
                    accepted = accepted + 1
                end
            end
            assert.is_true(accepted >= PROBE / 2, "the other client's sends were refused: " .. accepted .. " accepted")

            -- Every flood send answered (stored, or refused busy on a
            -- loaded machine: then it has no offset).
            assert.is_true(server.eventually(function() return pump(conns, FLOOD_PER) end, 120000),
                           "the flood's sends were not all answered in 120 s")
            local m = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = 0 } }, 30000))
            local max_offset = assert(tonumber(m.ext.offset))
            for _, c in ipairs(conns) do
                c.s:close()
            end

            -- Flood frames decoded while the other client's were, and after.
            local during = last - first + 1 - accepted
            local after = max_offset - 1 - last
            print(("\n    flood frames decoded while the other client's %d sends were: %d (address share %d "
                   .. "a turn); flood frames decoded after them: %d of %d"):format(accepted, during, 64, after,
                   FLOOD_CONNS * FLOOD_PER))
            -- Meaningful only if the flood was still being decoded when
            -- the other client's sends were (they did not come after it).
            assert.is_true(after > 0, "the flood was decoded before the other client's sends arrived")
            -- 10 turns of the other connection x 64 is 640; before, the
            -- flood's 200 connections had 3,200 frames a turn.
            assert.is_true(during <= 3000, ("%d flood frames were decoded while the other client's %d were")
                :format(during, accepted))
        end)
        s:stop()
        assert(ok, err)
    end)
end)
