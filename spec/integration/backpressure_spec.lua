-- Backpressure on accepted connections (src/net/conn.h): a peer that
-- sends requests but never reads its replies slows itself only.  The
-- broker stops reading its requests once more than
-- writeBufferHighWaterMark bytes of replies wait for it, closes it when
-- that lasts serverChannelWriteTimeoutMillis, and its memory comes back;
-- meanwhile other clients are served as usual.  And a connection with
-- serverChannelMaxInFlight requests unanswered (held long-poll pulls) is
-- not read further until one of them ends.
local net = require("rmq.net")
local core = require("rmq.core")
local server = require("support.server")
local codec = require("rmq.codec")
local slow = require("support.slowreader")

local SANITIZED = os.getenv("RMQ_SERVER_ASAN_OPTIONS") ~= nil
local MiB = 1024 * 1024

local function broker(extra)
    local conf = {
        role = "broker", workers = 1, brokerName = "broker-a",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 16 * MiB,
        namesrvAddr = "127.0.0.1:1",  -- no NameServer: clients go direct
        logLevel = "debug",
    }
    for k, v in pairs(extra) do conf[k] = v end
    return server.start(conf)
end

local function produce(c, topic, qid, n, size)
    local body = string.rep("m", size)
    for _ = 1, n do
        local r = assert(c:call(slow.cmd((slow.send_frame(0, topic, qid, body)))))
        assert(r.code == 0, r.remark)
    end
end

local function max_offset(c, topic, qid)
    local t0 = core.mono_ms()
    local r, err = c:call({ code = 30, ext = { topic = topic, queueId = qid } }, 5000)
    assert(r, "another client's GET_MAX_OFFSET: " .. tostring(err))
    assert.equal(0, r.code)
    return core.mono_ms() - t0, tonumber(r.ext.offset)
end

local function percentile(list, p)
    local t = { table.unpack(list) }
    table.sort(t)
    return t[math.max(1, math.ceil(#t * p))]
end

describe("backpressure", function()
    it("a connection that sends pulls and never reads is paused, then closed; "
       .. "RSS stays bounded and falls back, other clients are served", function()
        local CAP = 1 * MiB
        local s = broker({ writeBufferHighWaterMark = CAP, writeBufferLowWaterMark = CAP // 2,
                           serverChannelWriteTimeoutMillis = 3000 })
        server.with(s, function()
            local c = assert(net.connect(s.addr))
            local topic = "SlowReaderTopic"
            -- 64 messages of 4 KiB: every pull of 32 answers ~130 KiB.
            produce(c, topic, 0, 64, 4096)
            -- Warm the paths the slow reader takes, with a reader.
            for _ = 1, 20 do
                local r = assert(c:call(slow.cmd((slow.pull_frame(0, { topic = topic })))))
                assert.equal(0, r.code)
                assert.truthy(#r.body > 100 * 1024)
            end
            net.sleep(200)
            local base = slow.rss_kb(s.pid)

            local sc = slow.connect(s.addr)
            local _, port = sc.s:getsockname()
            local peer = "127.0.0.1:" .. port
            local closed_line = "closing connection from " .. peer:gsub("%.", "%%.")
                .. ": %d+ bytes of replies unread"
            local paused_line = "connection from " .. peer:gsub("%.", "%%.") .. " paused"
            -- ~2,000 pulls/s, each answered with ~130 KiB nobody reads:
            -- unbounded, that is ~260 MB/s of replies.
            local lat, peak, opaque = {}, base, 1
            local t0 = core.mono_ms()
            local closed = false
            while core.mono_ms() - t0 < 15000 do
                for _ = 1, 40 do
                    sc:queue(slow.pull_frame(opaque, { topic = topic }))
                    opaque = opaque + 1
                end
                sc:pump()
                lat[#lat + 1] = max_offset(c, topic, 0)
                peak = math.max(peak, slow.rss_kb(s.pid))
                if s:log():match(closed_line) then
                    closed = true
                    break
                end
                net.sleep(20)
            end
            local elapsed = core.mono_ms() - t0
            local log = s:log()
            assert.truthy(log:match(paused_line), "no pause logged for " .. peer)
            assert.truthy(closed, "not closed after the write timeout")
            -- It was over the mark for 3 s (the sweep checks every 750 ms).
            assert.truthy(elapsed >= 2500, ("closed after only %.0f ms"):format(elapsed))
            sc:close()
            -- The other client kept being answered promptly.
            for _ = 1, 20 do
                lat[#lat + 1] = max_offset(c, topic, 0)
            end
            net.sleep(500)
            local after = slow.rss_kb(s.pid)
            local p95, worst = percentile(lat, 0.95), percentile(lat, 1)
            print(("\n    slow reader: sent %d pulls (%.0f KiB), RSS %d -> peak %d -> after %d KiB; "
                   .. "other client: %d requests, p95 %.1f ms, max %.1f ms; closed after %.0f ms")
                :format(opaque - 1, sc.sent // 1024, base, peak, after, #lat, p95, worst, elapsed))
            -- Bounded: the cap plus what the broker's own working set
            -- moves by (sanitizer builds keep freed memory in quarantine).
            local margin = (SANITIZED and 64 or 16) * 1024
            assert.truthy(peak - base < CAP // 1024 + margin,
                          ("RSS grew %d KiB (cap %d KiB)"):format(peak - base, CAP // 1024))
            assert.truthy(after - base < margin,
                          ("RSS still %d KiB above the start after the close"):format(after - base))
            -- Other clients: answered, not held behind the slow reader
            -- (held, they would wait its 3 s write timeout): p95 under
            -- 300 ms (100 ms failed once with three suites on 2 cores,
            -- load 15), the worst under a second.
            assert.truthy(p95 < 300, ("p95 %.1f ms"):format(p95))
            assert.truthy(worst < 1000, ("worst %.1f ms"):format(worst))
            c:close()
        end)
    end)

    it("a reader that stops reading and comes back gets every reply, in order", function()
        local CAP = 1 * MiB
        local s = broker({ writeBufferHighWaterMark = CAP, writeBufferLowWaterMark = CAP // 2 })
        server.with(s, function()
            local c = assert(net.connect(s.addr))
            local topic = "LateReaderTopic"
            produce(c, topic, 0, 64, 4096)
            net.sleep(200)
            local base = slow.rss_kb(s.pid)
            -- 400 pulls in one go: ~52 MB of replies if all were queued.
            local N = 400
            local sc = slow.connect(s.addr)
            for i = 1, N do
                sc:queue(slow.pull_frame(i, { topic = topic }))
            end
            assert(sc:pump())
            assert.equal(0, sc:backlog())
            net.sleep(500)
            local held = slow.rss_kb(s.pid) - base
            assert.truthy(s:log():match("paused"), "no pause logged")
            -- Now read: the broker resumes as its output drains and
            -- dispatches the requests waiting in its input buffer.
            sc.s:settimeout(10)
            local got = {}
            for _ = 1, N do
                local len = assert(sc.s:receive(4))
                local n = string.unpack(">I4", len)
                local frame = assert(sc.s:receive(n))
                local r = assert(codec.decode(len .. frame))
                assert.equal(0, r.code)
                got[#got + 1] = r.opaque
            end
            sc:close()
            print(("\n    late reader: RSS +%d KiB while %d pulls waited; %d replies read")
                :format(held, N, #got))
            for i = 1, N do
                assert.equal(i, got[i])
            end
            local margin = (SANITIZED and 64 or 16) * 1024
            assert.truthy(held < CAP // 1024 + margin, ("RSS grew %d KiB while paused"):format(held))
            c:close()
        end)
    end)

    it("gives back the memory of replies queued past the mark when their connection closes", function()
        local s = broker({})
        server.with(s, function()
            local c = assert(net.connect(s.addr))
            local topic = "HeldBigTopic"
            produce(c, topic, 1, 1, 16)
            net.sleep(200)
            local base = slow.rss_kb(s.pid)
            -- 200 long polls at the end of queue 1, on a socket never read.
            local N = 200
            local sc = slow.connect(s.addr)
            for i = 1, N do
                sc:queue(slow.pull_frame(i, { topic = topic, queueId = 1, offset = 1,
                                              suspendMillis = 20000 }))
            end
            assert(sc:pump())
            net.sleep(300)
            -- One message of 256 KiB wakes them all: already dispatched,
            -- they all answer, ~50 MB past writeBufferHighWaterMark.
            produce(c, topic, 1, 1, 256 * 1024)
            local peak = base
            server.eventually(function()
                peak = math.max(peak, slow.rss_kb(s.pid))
                return peak - base > 40 * 1024
            end, 5000)
            sc:close()
            local after
            server.eventually(function()
                after = slow.rss_kb(s.pid)
                return after - base < 8 * 1024
            end, SANITIZED and 500 or 5000)
            print(("\n    %d held pulls answered past the mark: RSS %d -> peak %d -> after close %d KiB")
                :format(N, base, peak, after))
            assert.truthy(peak - base > 20 * 1024, "the replies were not queued?")
            if not SANITIZED then   -- ASan keeps freed memory in quarantine
                assert.truthy(after - base < 8 * 1024,
                              ("RSS still %d KiB above the start after the close"):format(after - base))
            end
            -- The broker serves on.
            assert.truthy(max_offset(c, topic, 1) < 1000)
            c:close()
        end)
    end)

    it("stops reading a connection with serverChannelMaxInFlight requests held "
       .. "until one of them ends", function()
        local s = broker({ serverChannelMaxInFlight = 4 })
        server.with(s, function()
            local topic = "HeldPullTopic"
            local c = assert(net.connect(s.addr))
            produce(c, topic, 0, 1, 16)   -- creates the topic; queue 1 stays empty
            local done, order = 0, {}
            local HOLD = 1500
            -- Four long polls on the empty queue fill the connection's
            -- in-flight limit for HOLD ms ...
            for i = 1, 4 do
                net.spawn(function()
                    local r = assert(c:call(slow.cmd((slow.pull_frame(0, {
                        topic = topic, queueId = 1, suspendMillis = HOLD }))), 10000))
                    assert.equal(19, r.code)   -- PULL_NOT_FOUND when the hold ends
                    order[#order + 1] = "pull" .. i
                    done = done + 1
                end)
            end
            -- ... so a fifth request on it (sent in the same write, so
            -- already read by the broker) waits until one pull ends.
            local t0 = core.mono_ms()
            local fifth
            net.spawn(function()
                local ms = max_offset(c, topic, 0)
                fifth = core.mono_ms() - t0
                order[#order + 1] = "fifth"
                done = done + 1
                assert.truthy(ms)
            end)
            -- Another connection is not held back meanwhile.
            local other = assert(net.connect(s.addr))
            net.sleep(100)
            local ms = max_offset(other, topic, 0)
            order[#order + 1] = "other"
            assert.truthy(server.eventually(function() return done == 5 end, 10000),
                          "only " .. done .. " of 5 answered")
            print(("\n    other connection: %.1f ms; the fifth request on the full one: %.0f ms "
                   .. "(pulls held %d ms); order %s"):format(ms, fifth, HOLD, table.concat(order, " ")))
            local pos = {}
            for i, v in ipairs(order) do pos[v] = i end
            assert.equal(1, pos.other)
            assert.truthy(pos.fifth > 2, "the fifth was answered before any pull ended")
            assert.truthy(fifth >= HOLD * 0.6, ("the fifth was answered after %.0f ms"):format(fifth))
            -- Once the pulls are over the connection is read as usual.
            local again = max_offset(c, topic, 0)
            assert.truthy(again < 1000)
            other:close()
            c:close()
        end)
    end)
end)
