-- rmq's gRPC port below the SDK (spec/interop/grpc_node/wire.js): batch
-- sends, gzip, unknown fields, malformed requests, methods not served
-- yet, oversized messages, and peers that misbehave at the HTTP/2 level
-- (rapid reset, idle streams, not HTTP/2 at all).  Each is answered or
-- closed as gRPC says, and the server keeps serving the next call.
local cjson = require("cjson")
local proc = require("rmq.proc")
local net = require("rmq.net")
local codes = require("rmq.codes")
local gn = require("support.grpc_node")
local grpc = require("rmq.client.grpc")
local server = require("support.server")

local TOPIC = "GrpcWireTopic"
-- ASan's quarantine and shadow memory make RSS meaningless: the bounds
-- are checked in the plain build only.
local SANITIZED = os.getenv("RMQ_SERVER_ASAN_OPTIONS") ~= nil

-- gRPC status codes and v2 Code values the answers carry.
local UNIMPLEMENTED, INVALID_ARGUMENT, RESOURCE_EXHAUSTED = 12, 3, 8
local OK, BODY_TOO_LARGE, INVALID_RECEIPT_HANDLE = 20000, 41301, 40013
local BAD_REQUEST = 40000

local rss_kb = require("support.slowreader").rss_kb   -- VmRSS in KiB

describe("rmq's gRPC port", function()
    local s

    setup(function()
        s = gn.start({ grpcMaxInboundMetadataSize = 16384, grpcMaxInboundMessageSize = 65536,
                       grpcMaxConnectionBufferBytes = 1048576,
                       maxMessageSize = 16384, grpcRequestTimeoutMillis = 1500,
                       grpcMaxConcurrentStreams = 16, grpcMaxResetsPerSecond = 200,
                       serverChannelWriteTimeoutMillis = 2000,
                       enableMixedMessageType = true,  -- for a MIXED topic (the types case)
                       recallMessageEnable = true }, { node = true, topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    local function run(case, vars)
        vars = vars or {}
        vars.TOPIC = TOPIC
        vars.CASE = case
        local status, res, why = gn.run(s, "wire.js", vars, case)
        assert.equal(0, status, why)
        assert.truthy(res and not res.error, why)
        return res, why
    end

    it("answers batches, gzip, unknown fields, malformed and unserved calls cleanly", function()
        local r, why = run("calls")
        -- A batch: one result per message, each stored.
        assert.equal(0, r.batch.grpc, why)
        assert.equal(OK, r.batch.status, why)
        assert.same({ OK, OK, OK }, r.batch.entries)
        assert.equal(3, #r.batch.offsets)
        assert.equal(OK, r.gzip.status, why)
        assert.equal(OK, r.unknownFields.status, why)
        assert.equal(INVALID_ARGUMENT, r.garbage.grpc, why)
        assert.matches("does not parse", r.garbage.details)
        -- Receiving rides on the broker's POP: without it, UNIMPLEMENTED
        -- naming the method, for a server stream and a unary call alike;
        -- with it, 5.x's answers (no lease: INVALID_RECEIPT_HANDLE).
        if r.receive.code == UNIMPLEMENTED then
            assert.matches("ReceiveMessage is not served", r.receive.details)
            assert.equal(UNIMPLEMENTED, r.ack.code, why)
            assert.matches("AckMessage is not served", r.ack.details)
        else
            assert.equal(0, r.receive.code, why)
            assert.equal(0, r.ack.code, why)
            assert.equal(INVALID_RECEIPT_HANDLE, r.ack.status, why)
        end
        -- A handle this server never issued is refused before the broker.
        assert.equal(0, r.badAck.code, why)
        assert.equal(INVALID_RECEIPT_HANDLE, r.badAck.status, why)
        assert.equal(0, r.fwdForged.code, why)
        assert.equal(INVALID_RECEIPT_HANDLE, r.fwdForged.status, why)
        assert.equal(0, r.fwdNoOffset.code, why)
        assert.equal(INVALID_RECEIPT_HANDLE, r.fwdNoOffset.status, why)
        assert.equal("commit log offset is empty", r.fwdNoOffset.message)
        assert.equal(UNIMPLEMENTED, r.unknownMethod.code)
        assert.equal(UNIMPLEMENTED, r.otherService.code)
        -- 40,000 bytes of headers against grpcMaxInboundMetadataSize: reset.
        assert.truthy(r.bigHeaders.rst, why)
        assert.is_true(r.bigHeaders.rst > 0, why)
        assert.equal(OK, r.after.status, why)
    end)

    it("checks a message's type against its topic's message.type as 5.x (MIXED and unset take all)", function()
        local T = { NORMAL = 1, FIFO = 2, DELAY = 3, TRANSACTION = 4 }
        local topics = { "WireTypeNormal:NORMAL", "WireTypeFifo:FIFO", "WireTypeDelay:DELAY",
                         "WireTypeTx:TRANSACTION", "WireTypeMixed:MIXED" }
        for _, spec in ipairs(topics) do
            local name, ty = spec:match("^(.-):(.*)$")
            local r = assert(net.call(s.broker_addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
                topic = name, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4, perm = 6,
                topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false,
                attributes = "+message.type=" .. ty } }, 5000))
            assert.equal(0, r.code, r.remark)
        end
        topics[#topics + 1] = TOPIC .. ":"
        local r, why = run("types", { TYPE_TOPICS = table.concat(topics, ",") })
        for _, spec in ipairs(topics) do
            local name, ty = spec:match("^(.-):(.*)$")
            local open = ty == "MIXED" or ty == ""
            for kind in pairs(T) do
                local got = r[name].sent[kind]
                assert.equal(0, got.grpc, why)
                if open or kind == ty then
                    assert.equal(OK, got.code, name .. " " .. kind .. ": " .. tostring(got.message))
                else
                    assert.equal(40014, got.code, name .. " " .. kind)
                    assert.equal(("TopicMessageType validate failed, the expected type is %s, but actual type is %s")
                        :format(ty, kind), got.message)
                end
            end
            if open then
                assert.same({ 1, 2, 3, 4 }, r[name].accepts, why)
            else
                assert.same({ T[ty] }, r[name].accepts, why)
            end
        end
    end)

    it("recalls a timer message with the handle its send returned (RecallMessage)", function()
        local r, why = run("recall")
        assert.equal(OK, r.sent.code, why)
        assert.truthy(#r.sent.handle > 0, why)
        assert.equal(OK, r.recall.code, why)
        assert.equal(r.sent.messageId, r.recall.messageId)
        assert.equal(BAD_REQUEST, r.forged.code, why)
        assert.equal("recall handle is invalid", r.forged.message)
        assert.equal(40402, r.otherTopic.code, why)
        assert.equal("", r.plainHandle)
        assert.equal(UNIMPLEMENTED, r.PullMessage.code)
        assert.equal("PullMessage is not served by this rmq yet", r.PullMessage.details)
        assert.equal(UNIMPLEMENTED, r.SyncLiteSubscription.code)
        assert.equal("SyncLiteSubscription is not served by this rmq (the broker has no lite topics)",
                     r.SyncLiteSubscription.details)
        -- The recalled message is never delivered: its queue holds it
        -- (offset counted) but the timer drops it; not waited for here
        -- (an hour ahead), the broker's recall spec covers delivery.
    end)

    -- The send processor takes a gRPC send's header typed; what its
    -- header rules refuse still gets their remark (the send as text).
    it("refuses a send to a topic the broker's name rules refuse, with their remark", function()
        local c = assert(grpc.connect(s.grpc_addr))
        local _, err = c:send("Bad Topic!", "x")
        assert.matches("contains illegal characters", err)
        _, err = c:send(string.rep("t", 128), "x")
        assert.matches("longer than topic max length", err)
        local e = assert(c:send(TOPIC, "after the refusals"))
        assert.truthy(e.message_id ~= nil and e.message_id ~= "")
        c:close()
    end)

    it("refuses a message over grpcMaxInboundMessageSize and a body over maxMessageSize", function()
        local r, why = run("oversize", { BIG = 200000, BODY = 20000 })
        assert.equal(RESOURCE_EXHAUSTED, r.overInbound.code, why)
        assert.matches("larger than max", r.overInbound.details)
        assert.equal(0, r.overBody.grpc, why)
        assert.equal(BODY_TOO_LARGE, r.overBody.entry, why)
        assert.equal(OK, r.after.status, why)
    end)

    it("closes a rapid-reset connection and serves the next one", function()
        local r, why = run("flood", { STREAMS = 3000 })
        assert.is_true(r.closed, why)
        assert.is_true(r.opened < 3000, "the flood was never stopped: " .. why)
        assert.equal(OK, r.after.status, why)
        assert.matches("rapid reset", s:log())
    end)

    it("bounds idle streams: past grpcMaxConcurrentStreams refused, the rest reset after grpcRequestTimeoutMillis", function()
        local before = rss_kb(s.pid)
        local r, why = run("idle", { STREAMS = 64 })
        assert.equal(OK, r.served.status, why)
        -- Every stream ended by the server: those past the 16 allowed
        -- are refused (REFUSED_STREAM) unless the client queued them
        -- until a slot freed, the others reset (CANCEL) once idle.
        assert.equal(64, r.closedStreams, why)
        assert.is_true(r.cancel >= 16, why)
        assert.equal(64, r.cancel + r.refused, why)
        -- Bounded: 64 idle streams cost next to nothing.
        assert.is_true(SANITIZED or rss_kb(s.pid) - before < 32 * 1024, "RSS grew by more than 32 MiB")
    end)

    it("resets a call whose answer waits grpcRequestTimeoutMillis for a window the client never opens", function()
        local h2 = require("support.h2raw")
        -- SETTINGS_INITIAL_WINDOW_SIZE (4) = 0: no DATA may reach us
        local c = h2.connect(s.grpc_addr, nil, string.pack(">I2I4", 4, 0))
        local id = c:open("QueryRoute", nil, false)
        c:data(id, "", true)   -- a whole (empty) request: its answer is a message
        assert.is_truthy(server.eventually(function()
            c:pump()   -- (PINGs answered: the connection is alive)
            return c.ended[id] ~= nil
        end, 30000), "the call still waits for a window")
        assert.equal("rst:8", c.ended[id])   -- CANCEL
        c:close()
    end)

    it("closes a peer that never reads its answers, serving others meanwhile, memory flat", function()
        local before = rss_kb(s.pid)
        local r, why = run("noread")
        assert.is_true(r.sent > 0, why)
        -- Its answers pile up in the socket (the server then stops
        -- reading it, and closes it after serverChannelWriteTimeoutMillis)
        -- or, DATA being flow-controlled, in at most grpcMaxConcurrentStreams
        -- open calls (the rest refused): which comes first depends on the
        -- machine's speed; either way memory stays flat and others are served.
        if r.closed then
            assert.matches("replies unread", s:log())
        end
        assert.equal(OK, r.served.status, why)
        assert.is_true(SANITIZED or rss_kb(s.pid) - before < 32 * 1024, "RSS grew by more than 32 MiB")
    end)

    it("sends GOAWAY to open connections when it stops", function()
        local s2 = gn.start()
        local out = s2.dir .. "/goaway.out"
        local p = assert(proc.spawn({ file = "node", args = { "wire.js" }, cwd = gn.DIR, stdout = out,
            stderr = s2.dir .. "/goaway.err",
            env = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"), "HOME=" .. s2.dir,
                    "ENDPOINT=" .. s2.grpc_addr, "TOPIC=" .. TOPIC, "CASE=goaway" } }))
        local open = server.eventually(function() return server.read_file(out):find("OPEN", 1, true) end, 20000)
        assert.equal(0, s2:stop())
        local status = p:wait(30000)
        if status == nil then
            p:kill(9)
            p:wait(5000)
        end
        local text = server.read_file(out)
        assert.truthy(open, text)
        assert.equal(0, status, text)
        local r = cjson.decode(text:match("(%b{})%s*$"))
        assert.equal(0, r.goaway, text)   -- GOAWAY NO_ERROR
    end)

    it("serves 5.x's offset RPCs: QueryOffset, UpdateOffset, GetOffset", function()
        local r, why = run("offsets", { GROUP = "GrpcWireOffsets" })
        assert.same({ 0, OK, 0 }, { r.beginBefore.code, r.beginBefore.status, r.beginBefore.offset }, why)
        assert.equal(OK, r.endBefore.status, why)
        -- the queue's end moved by the messages sent to it meanwhile
        assert.is_true(r.endAfter.offset >= r.endBefore.offset, why)
        local q0 = require("rmq.net").call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = "0" } }, 5000)
        assert.equal(tonumber(q0.ext.offset), r.endAfter.offset, why)
        -- an hour ago is before every message: the queue's start
        assert.same({ OK, 0 }, { r.byTime.status, r.byTime.offset }, why)
        assert.equal(OK, r.update.status, why)
        assert.same({ OK, 2 }, { r.get.status, r.get.offset }, why)
        local c = require("rmq.net").call(s.broker_addr, { code = 14, ext = { consumerGroup = "GrpcWireOffsets", topic = TOPIC,
                                                               queueId = "0" } }, 5000)
        assert.equal("2", c.ext.offset)
        -- a group that committed nothing: the broker's answer passed on,
        -- 4.9.8's 0 for a queue that starts at 0 (else OFFSET_NOT_FOUND)
        assert.same({ OK, 0 }, { r.getNone.status, r.getNone.offset }, why)
        assert.equal(BAD_REQUEST, r.noGroup.status, why)
        assert.equal(INVALID_ARGUMENT, r.garbage.code, why)
        assert.matches("QueryOffsetRequest does not parse", r.garbage.details)
    end)

    it("refuses confs it cannot serve: a connection buffer under one message", function()
        local ok, err = pcall(gn.start, { grpcMaxInboundMessageSize = 65536, grpcMaxConnectionBufferBytes = 65536 })
        assert.is_false(ok)
        assert.matches("grpcMaxConnectionBufferBytes' must be at least grpcMaxInboundMessageSize %+ 5", tostring(err))
    end)

    it("lists a gRPC consumer as the group's consumer while its session lasts", function()
        local out = s.dir .. "/consumer.out"
        local p = assert(proc.spawn({ file = "node", args = { "wire.js" }, cwd = gn.DIR, stdout = out,
            stderr = s.dir .. "/consumer.err",
            env = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"), "HOME=" .. s.dir,
                    "ENDPOINT=" .. s.grpc_addr, "TOPIC=" .. TOPIC, "CASE=consumer",
                    "GROUP=GrpcWireGroup", "CLIENT_ID=wire-host@4242@0@grpc", "HOLD_MS=60000" } }))
        local function ids()
            local r = net.call(s.broker_addr, { code = 38, ext = { consumerGroup = "GrpcWireGroup" } }, 5000)
            return r and r.code == 0 and r.body or ""
        end
        local listed = server.eventually(function()
            return server.read_file(out):find("OPEN", 1, true) and ids():find("wire-host@4242@0@grpc", 1, true)
        end, 20000)
        p:kill(9)
        p:wait(5000)
        assert.truthy(listed, "not listed: " .. ids() .. " " .. server.read_file(out))
        -- The connection gone, the broker forgets it (its close hook).
        assert.truthy(server.eventually(function()
            return not ids():find("wire-host@4242@0@grpc", 1, true)
        end, 20000), "still listed after the client went: " .. ids())
    end)

    it("closes peers that do not speak HTTP/2", function()
        local r, why = run("garbage")
        assert.is_true(r.http1.closed, why)
        assert.is_true(r.junk.closed, why)
        assert.equal(OK, r.after.status, why)
    end)
end)
