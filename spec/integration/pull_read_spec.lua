-- How a PULL reply's records are copied (pullReadGapBytes): through the
-- commit log's mapping (-1), one preadv per record (0), or one preadv per
-- run of records with the gaps between them read and dropped (8192, the
-- default, and 16384, the largest); and how they are sent without a copy
-- (pullZeroCopyMinBytes): never (0), every run of adjacent records by
-- sendfile from the file (1), or only runs of 16 KiB (32 KiB: the
-- default) and more, the shorter ones copied between them in the same
-- reply.  Whichever way, a consumer
-- gets every record of its queue byte for byte and in order: records of
-- four queues interleaved in the log, and of one queue alone (so a
-- pull's records are adjacent: one run), bodies smaller and larger than
-- the gaps, and runs that cross from one commit log file into the next
-- (64 KiB files here).  Each worker's window over the log
-- (pullReadWindowBytes: blocks the reads of spread runs took, from which
-- the other queues' pulls copy their records) is on in most of them, off
-- (0) and at its smallest (4 blocks, 256 KiB) in two; the queues are
-- pulled in turn, so one queue's pulls copy from blocks another's read,
-- and again after more records were stored behind a block read short at
-- the log's end.
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local env = require("support.broker_consume_env")

local QUEUES, N = 4, 240

local mq, send_to = env.mq, env.send_to

-- Message i's body: every byte value, and sizes from 1 byte to 20 KiB
-- (above the largest gap, and a third of a commit log file).
local function body(i)
    local len = (i % 9 == 0) and 20000 + i or (i * 37) % 1500 + 1
    local t = {}
    for b = 1, len do
        t[b] = string.char((b * 7 + i) % 256)
    end
    return table.concat(t)
end

local CONFS = {
    { pullReadGapBytes = -1, pullZeroCopyMinBytes = 0 },
    { pullReadGapBytes = 0, pullZeroCopyMinBytes = 0 },
    { pullReadGapBytes = 8192, pullZeroCopyMinBytes = 0 },
    { pullReadGapBytes = 16384, pullZeroCopyMinBytes = 0 },
    { pullReadGapBytes = 8192 },   -- the defaults
    { pullReadGapBytes = 8192, pullZeroCopyMinBytes = 1 },
    { pullReadGapBytes = 8192, pullZeroCopyMinBytes = 16384 },
    { pullReadGapBytes = -1, pullZeroCopyMinBytes = 16384 },
    { pullReadGapBytes = 8192, pullZeroCopyMinBytes = 0, pullReadWindowBytes = 0 },
    { pullReadGapBytes = 16384, pullZeroCopyMinBytes = 0, pullReadWindowBytes = 262144 },
}

for _, conf in ipairs(CONFS) do
    local gap, zc, win = conf.pullReadGapBytes, conf.pullZeroCopyMinBytes, conf.pullReadWindowBytes
    describe(("pull with pullReadGapBytes = %d, pullZeroCopyMinBytes = %s, pullReadWindowBytes = %s")
             :format(gap, zc or "default", win or "default"), function()
        local e

        setup(function()
            -- No fast failure: on a loaded machine (or under ASan) a
            -- send that waited 200 ms would be answered busy, and this
            -- spec is about what a pull reads, not flow control.
            e = env.start({ workers = 1, pullReadGapBytes = gap, pullZeroCopyMinBytes = zc,
                            pullReadWindowBytes = win,
                            brokerFastFailureEnable = false, mappedFileSizeCommitLog = 64 * 1024 })
        end)

        teardown(function()
            e:stop()
        end)

        -- Sends messages [from, to] (message i to queue i % queues),
        -- then pulls every queue in turn, 32 at a time, until each has
        -- all it was sent; checks each record against what was sent.
        local function round(p, c, topic, queues, from, to, want, offsets)
            for i = from, to do
                local q = i % queues
                local r = assert(send_to(p, topic, q, { body = body(i), keys = "k" .. i }))
                assert.equal("SEND_OK", r.status)
                want[q][#want[q] + 1] = i
            end
            local got = {}
            for q = 0, queues - 1 do got[q] = {} end
            local busy = true
            while busy do
                busy = false
                for q = 0, queues - 1 do
                    local offset = offsets[q]
                    if offset < #want[q] then
                        busy = true
                        local r = assert(c:pull(mq(topic, q), offset, 32))
                        assert.equal("FOUND", r.status)
                        for k, m in ipairs(r.messages) do
                            local i = tonumber(m.keys:match("^k(%d+)$"))
                            got[q][#got[q] + 1] = i
                            assert.equal(offset + k - 1, m.queueOffset)
                            assert.truthy(m.body == body(i), ("body of message %d (queue %d)"):format(i, q))
                        end
                        assert.equal(offset + #r.messages, r.nextBeginOffset)
                        offsets[q] = r.nextBeginOffset
                    end
                end
            end
            return got
        end

        local function check(topic, queues)
            e:route(topic, queues)
            local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = topic .. "Producer",
                                     compressMsgBodyOverHowmuch = 1 << 30 })
            local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = topic .. "Group" })
            local want, offsets = {}, {}
            for q = 0, queues - 1 do
                want[q], offsets[q] = {}, 0
            end
            -- All of them, then more behind what the first pulls read
            -- (the log's end then may be inside a block the window holds).
            local first = round(p, c, topic, queues, 1, N, want, offsets)
            local more = round(p, c, topic, queues, N + 1, N + 40, want, offsets)
            for q = 0, queues - 1 do
                local all = {}
                table.move(first[q], 1, #first[q], 1, all)
                table.move(more[q], 1, #more[q], #all + 1, all)
                assert.same(want[q], all)
            end
        end

        it("returns every record of each queue intact and in order", function()
            check("FxPullRead", QUEUES)
        end)

        it("returns a lone queue's adjacent records intact and in order", function()
            check("FxPullReadOne", 1)
        end)
    end)
end

-- {{{ Pipelined pulls to a reader that stops reading (the two cases below)

local slow = require("support.slowreader")

-- A one-worker broker whose output stops being read past 4 MiB, with
-- `extra` keys (how its pulls are sent).
local function slow_reader_broker(server, extra)
    local MiB = 1024 * 1024
    local conf = {
        role = "broker", workers = 1, brokerName = "broker-a",
        storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 16 * MiB,
        namesrvAddr = "127.0.0.1:1",
        writeBufferHighWaterMark = 4 * MiB, writeBufferLowWaterMark = 2 * MiB,
    }
    for k, v in pairs(extra) do
        conf[k] = v
    end
    return server.start(conf)
end

-- Sends np pulls (frame(i) the i-th) in one go on a socket read only once
-- they are all taken, then reads the np replies: each in order, SUCCESS,
-- and its body byte for byte ref(i), a reading connection's.
local function pipelined(server, addr, np, frame, ref)
    local net = require("rmq.net")
    local codec = require("rmq.codec")
    local sc = slow.connect(addr)
    for i = 1, np do
        sc:queue(frame(i))
    end
    local sent = server.eventually(function()
        assert(sc:pump())
        return sc:backlog() == 0
    end, 30000)
    assert.truthy(sent, "the pulls were not all taken")
    net.sleep(300)
    sc.s:settimeout(30)
    for i = 1, np do
        local len = assert(sc.s:receive(4))
        local n = string.unpack(">I4", len)
        local r = assert(codec.decode(len .. assert(sc.s:receive(n))))
        assert.equal(i, r.opaque)
        assert.equal(0, r.code)
        assert.truthy(r.body == ref(i), ("reply %d differs from a reading connection's"):format(i))
    end
    sc:close()
end

-- }}}

-- Sent without a copy to a reader that stops reading: the socket fills,
-- a sendfile takes part of a run or none, and the rest of that reply and
-- every reply after it are copied into the output behind it, in order.
-- Each of the pipelined replies is byte for byte the reply a reading
-- connection gets.
describe("pull with pullZeroCopyMinBytes to a reader that stops reading", function()
    local net = require("rmq.net")
    local server = require("support.server")

    it("gets every reply intact and in order", function()
        local s = slow_reader_broker(server, { pullZeroCopyMinBytes = 1 })
        server.with(s, function()
            local c = assert(net.connect(s.addr))
            local topic = "FxPullReadLate"
            for i = 1, 64 do
                local r = assert(c:call(slow.cmd((slow.send_frame(0, topic, 0, body(i * 9))))))
                assert(r.code == 0, r.remark)
            end
            local ref = assert(c:call(slow.cmd((slow.pull_frame(0, { topic = topic })))))
            assert.equal(0, ref.code)
            assert.truthy(#ref.body > 200 * 1024, "a reply of large records")
            -- 200 pulls in one go (~48 MB of replies if all were sent
            -- at once), on a socket read only once they are all sent.
            pipelined(server, s.addr, 200, function(i)
                return slow.pull_frame(i, { topic = topic })
            end, function()
                return ref.body
            end)
            c:close()
        end)
    end)
end)

-- Records of interleaved queues go to the socket straight from the
-- worker's window (pullReadWindowBytes), with no copy into the output:
-- to a reader that stops reading, the socket fills, a send takes part of
-- a reply or none, and the rest of it, and every reply after it, is
-- copied into the output behind it, in order, while later pulls refill
-- the window.  Each of the pipelined replies is byte for byte the reply
-- a reading connection gets.
describe("pull through the window to a reader that stops reading", function()
    local net = require("rmq.net")
    local server = require("support.server")

    it("gets every reply intact and in order", function()
        local s = slow_reader_broker(server, { pullZeroCopyMinBytes = 0, pullReadWindowBytes = 262144 })
        server.with(s, function()
            local c = assert(net.connect(s.addr))
            local topic = "FxPullReadWindowLate"
            -- 4 queues, their records interleaved one by one in the log:
            -- every pull's records are spread (gaps under pullReadGapBytes),
            -- what the window takes.  ~290 KB in all, more than the
            -- window's 256 KiB: later pulls refill slots earlier ones used.
            local Q, PER = 4, 96
            local function small(i)
                return body(i):sub(1, (i * 37) % 1500 + 1)
            end
            for i = 1, Q * PER do
                local r = assert(c:call(slow.cmd((slow.send_frame(0, topic, i % Q, small(i))))))
                assert(r.code == 0, r.remark)
            end
            -- The reference: each (queue, offset) pull from a reading connection.
            local pulls, ref = {}, {}
            for k = 0, PER // 32 - 1 do
                for q = 0, Q - 1 do
                    local o = { topic = topic, queueId = q, offset = 32 * k }
                    local r = assert(c:call(slow.cmd((slow.pull_frame(0, o)))))
                    assert.equal(0, r.code)
                    pulls[#pulls + 1] = o
                    ref[#pulls] = r.body
                end
            end
            -- 1200 pulls in one go, each queue's in turn (~30 MB of replies),
            -- on a socket read only once they are all sent.
            pipelined(server, s.addr, 1200, function(i)
                return slow.pull_frame(i, pulls[(i - 1) % #pulls + 1])
            end, function(i)
                return ref[(i - 1) % #pulls + 1]
            end)
            c:close()
        end)
    end)
end)

-- The window's send path (records to the socket straight from the
-- window) is counted: rmq_pull_window_sends_total.  Once the window
-- stops filling (a lone consumer of interleaved queues: less than half
-- of what it read was copied out), the blocks it holds still serve:
-- before, the send path refused them all from then on.
describe("pull through the window, counted", function()
    local net = require("rmq.net")
    local server = require("support.server")
    local prom = require("support.prom")

    it("sends from the window, held blocks too once it stopped filling", function()
        local s = server.start({
            role = "broker", workers = 1, brokerName = "broker-a",
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 16 * 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", pullZeroCopyMinBytes = 0, pullReadWindowBytes = 262144,
            metricsExporterType = "PROM", metricsPromExporterPort = 0,
        })
        server.with(s, function()
            local c = assert(net.connect(s.addr))
            local topic = "FxPullWindowSends"
            -- 4 queues interleaved one record by one: ~220 KB.
            for i = 0, 4 * 64 - 1 do
                local r = assert(c:call(slow.cmd((slow.send_frame(0, topic, i % 4, string.char(65 + i % 26):rep(700))))))
                assert(r.code == 0, r.remark)
            end
            local function sends()
                return prom.value(prom.scrape(s.metrics_addr), "rmq_pull_window_sends_total")
            end
            -- The worker counts a reply's path just after sending it: the
            -- count may trail the reply the client has read (seen at load
            -- 12: 0 for 1).
            local function sends_after(n)
                server.eventually(function() return sends() >= n end, 10000)
                return sends()
            end
            local function pull(q, max)
                local r = assert(c:call(slow.cmd((slow.pull_frame(0, { topic = topic, queueId = q, offset = 0, max = max })))))
                assert.equal(0, r.code, r.remark)
                return r.body
            end
            local n0 = sends()
            assert.equal(0, n0)
            -- Queue 0's 32 records span ~110 KB of the log: two blocks
            -- (128 KiB, half the window) read, ~25 KB of them copied out:
            -- sent from the window, which then stops filling.
            local b0 = pull(0, 32)
            assert.equal(1, sends_after(1))
            -- Queue 1's first 16 records lie in those blocks: sent from
            -- the window although it no longer fills.
            local b1 = pull(1, 16)
            assert.equal(2, sends_after(2))
            -- Each record its queue's own, whole: 700 bytes of its letter.
            for q, b in pairs({ [0] = b0, [1] = b1 }) do
                local n = 0
                for run in b:gmatch("(%u+)") do
                    if #run == 700 then
                        n = n + 1
                        assert.equal(string.char(65 + (4 * (n - 1) + q) % 26):rep(700), run)
                    end
                end
                assert.equal(q == 0 and 32 or 16, n)
            end
            c:close()
        end)
    end)
end)
