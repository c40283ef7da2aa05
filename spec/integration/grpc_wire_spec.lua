-- rmq's gRPC port below the SDK (spec/interop/grpc_node/wire.js): batch
-- sends, gzip, unknown fields, malformed requests, methods not served
-- yet, oversized messages, and peers that misbehave at the HTTP/2 level
-- (rapid reset, idle streams, not HTTP/2 at all).  Each is answered or
-- closed as gRPC says, and the server keeps serving the next call.
local cjson = require("cjson")
local children = require("support.children")
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
        local p = assert(children.spawn({ file = "node", args = { "wire.js" }, cwd = gn.DIR, stdout = out,
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
        local p = assert(children.spawn({ file = "node", args = { "wire.js" }, cwd = gn.DIR, stdout = out,
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

    -- {{{ HTTP/2 below any SDK: raw frames (spec/support/h2raw.lua)

    local h2 = require("support.h2raw")
    -- HTTP/2 error codes (RFC 9113 7).
    local PROTOCOL, FLOW_CONTROL, FRAME_SIZE, COMPRESSION, CALM = 1, 3, 6, 9, 11
    local T_SETTINGS, T_PUSH_PROMISE, T_PING, T_GOAWAY = 4, 5, 6, 7
    local END_STREAM = 1

    local function varint(v)
        local out = {}
        while v >= 128 do
            out[#out + 1] = string.char(v % 128 + 128)
            v = v // 128
        end
        out[#out + 1] = string.char(v)
        return table.concat(out)
    end

    -- A QueryRouteRequest for TOPIC, `size` bytes long when given (an
    -- unknown bytes field 99 makes up the rest: skipped, as protobuf
    -- readers skip unknown fields).
    local function route_req(size)
        local resource = "\x12" .. varint(#TOPIC) .. TOPIC
        local req = "\x0a" .. varint(#resource) .. resource
        if size then
            local pad = size - #req - 2 - 3   -- field 99's tag (2 bytes), its length (3)
            assert(pad >= 16384 and pad < 2097152)
            req = req .. "\x9a\x06" .. varint(pad) .. ("x"):rep(pad)
            assert(#req == size)
        end
        return req
    end

    -- gzip (RFC 1952) of raw: zlib's deflate stream in a gzip wrapper.
    local function gzip(raw)
        local core = require("rmq.core")
        local z = core.deflate(raw)
        return "\x1f\x8b\x08\0\0\0\0\0\0\xff" .. z:sub(3, -5) .. string.pack("<I4I4", core.crc32(raw), #raw)
    end

    local function pump_until(c, done, what)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return done(c)
        end, 30000), what)
    end

    -- A connection error as the client sees it: GOAWAY with its code (and
    -- the last stream id the server took), then the server's close.
    local function conn_error(c, code, last, what)
        pump_until(c, function() return c.closed end, what .. ": the connection was not closed")
        assert.equal(code, c.goaway, what .. ": GOAWAY's error code")
        if last ~= nil then
            assert.equal(last, c.goaway_last, what .. ": GOAWAY's last stream id")
        end
        c:close()
    end

    it("sends a connection error's GOAWAY, its code and last stream id, before it closes", function()
        -- PUSH_PROMISE from a client (PROTOCOL_ERROR), with stream 1 open
        -- and 2,000 PINGs behind it: read and dropped, not answered.
        local c = h2.connect(s.grpc_addr)
        c:open("Telemetry")
        c:frame(T_PUSH_PROMISE, 4, 1, string.pack(">I4", 2))
        for _ = 1, 2000 do
            c:frame(T_PING, 0, 0, "pingpong")
        end
        conn_error(c, PROTOCOL, 1, "PUSH_PROMISE")
        conn_error(h2.connect(s.grpc_addr, nil, string.pack(">I2I4", 4, 0x80000000)), FLOW_CONTROL, 0,
                   "SETTINGS_INITIAL_WINDOW_SIZE 2^31")
        c = h2.connect(s.grpc_addr)
        c:frame(T_PING, 0, 0, "ping")
        conn_error(c, FRAME_SIZE, 0, "a PING of 4 bytes")
        c = h2.connect(s.grpc_addr)
        c:open_block(1, "\xff\x7f")   -- index 254: in neither HPACK table
        conn_error(c, COMPRESSION, nil, "a header block that does not decode")
        -- The next connection is served.
        c = h2.connect(s.grpc_addr)
        local id = c:open("QueryRoute")
        c:data(id, route_req(), true)
        pump_until(c, function() return c.ended[id] end, "not served after the connection errors")
        assert.equal(0, h2.grpc_status(c.block[id]))
        c:close()
    end)

    it("answers the last call before it closes after the client's GOAWAY", function()
        local c = h2.connect(s.grpc_addr)
        local id = c:open("QueryRoute")
        c:data(id, route_req(), true)
        c:frame(T_GOAWAY, 0, 0, string.pack(">I4I4", 0, 0))
        pump_until(c, function() return c.closed end, "not closed after the client's GOAWAY")
        assert.equal("end", c.ended[id])
        assert.equal(0, h2.grpc_status(c.block[id]))
        c:close()
    end)

    it("takes a gzip message inflating to grpcMaxInboundMessageSize and refuses one a byte longer", function()
        local c = h2.connect(s.grpc_addr)
        local block = h2.headers_block("QueryRoute", { ["grpc-encoding"] = "gzip" })
        local at, over = c:open("QueryRoute", block), c:open("QueryRoute", block)
        c:data(at, gzip(route_req(65536)), true, true)
        c:data(over, gzip(route_req(65537)), true, true)
        pump_until(c, function() return c.ended[at] and c.ended[over] end, "not answered")
        assert.equal(0, h2.grpc_status(c.block[at]))
        assert.equal(RESOURCE_EXHAUSTED, h2.grpc_status(c.block[over]))
        assert.matches("inflated message larger than max", c.block[over])
        c:close()
    end)

    it("answers HEADERS on a stream id below one opened, never used, with GOAWAY PROTOCOL_ERROR", function()
        local c = h2.connect(s.grpc_addr)
        local id = c:open("QueryRoute")
        c:data(id, route_req(), true)
        pump_until(c, function() return c.ended[id] end, "stream 1 not answered")
        -- Trailers on stream 1, which has ended (a client's may race the
        -- server's end): dropped, the connection serves on.
        c:open_block(1, h2.literal("x-late", "1"), END_STREAM)
        c:open_block(5, h2.headers_block("QueryRoute"))
        c:data(5, route_req(), true)
        pump_until(c, function() return c.ended[5] end, "stream 5 not answered")
        assert.equal(0, h2.grpc_status(c.block[5]))
        -- Stream 3 was skipped: opening it now is below 5.
        c:open_block(3, h2.headers_block("QueryRoute"), END_STREAM)
        conn_error(c, PROTOCOL, 5, "HEADERS on stream 3 after 5")
    end)

    it("resets a malformed request PROTOCOL_ERROR: pseudo-headers out of order, repeated, unknown or missing, connection-specific fields", function()
        local L = h2.literal
        local PATH = "/apache.rocketmq.v2.MessagingService/QueryRoute"
        local function block(fields, raw)
            local parts = { raw or "" }
            for _, f in ipairs(fields) do
                parts[#parts + 1] = L(f[1], f[2])
            end
            return table.concat(parts)
        end
        local function good(drop, add, at)
            local f = { { ":method", "POST" }, { ":scheme", "http" }, { ":path", PATH }, { ":authority", "rmq" },
                        { "content-type", "application/grpc" }, { "te", "trailers" } }
            if drop then
                table.remove(f, drop)
            end
            if add then
                table.insert(f, at or #f + 1, add)
            end
            return f
        end
        local cases = {
            { "a regular field before a pseudo-header", block(good(3, { ":path", PATH }, 6)) },
            { "a repeated :path", block(good(nil, { ":path", PATH }, 4)) },
            { "an unknown pseudo-header", block(good(nil, { ":protocol", "websocket" }, 4)) },
            { ":status in a request (HPACK static index 8)", block(good(), "\x88") },
            { "no :method", block(good(1)) },
            { "no :scheme", block(good(2)) },
            { "no :path", block(good(3)) },
            { "an empty :path", block(good(3, { ":path", "" }, 3)) },
            { "connection", block(good(nil, { "connection", "keep-alive" })) },
            { "keep-alive", block(good(nil, { "keep-alive", "timeout=5" })) },
            { "proxy-connection", block(good(nil, { "proxy-connection", "close" })) },
            { "transfer-encoding", block(good(nil, { "transfer-encoding", "chunked" })) },
            { "transfer-encoding (HPACK static index 57)", block(good()) .. "\xb9" },
            { "upgrade", block(good(nil, { "upgrade", "h2c" })) },
            { "te other than trailers", block(good(6, { "te", "gzip" })) },
            { "an upper-case name", block(good(5, { "Content-Type", "application/grpc" }, 5)) },
        }
        local c = h2.connect(s.grpc_addr)
        local ids = {}
        for i, case in ipairs(cases) do
            ids[i] = c.next_id
            c:open_block(ids[i], case[2], END_STREAM)
        end
        -- A pseudo-header in trailers.
        local tid = c:open("QueryRoute")
        c:open_block(tid, L(":path", PATH), END_STREAM)
        -- And a well-formed request on the same connection, served.
        local ok = c:open("QueryRoute")
        c:data(ok, route_req(), true)
        pump_until(c, function() return c.ended[ok] and c.ended[tid] end, "not answered")
        for i, case in ipairs(cases) do
            assert.equal("rst:" .. PROTOCOL, c.ended[ids[i]], case[1])
        end
        assert.equal("rst:" .. PROTOCOL, c.ended[tid], "a pseudo-header in trailers")
        assert.equal(0, h2.grpc_status(c.block[ok]))
        assert.is_nil(c.goaway)
        c:close()
    end)

    it("applies the last of a setting's values in one SETTINGS frame, and bounds SETTINGS with GOAWAY ENHANCE_YOUR_CALM", function()
        -- A stream whose window the client raised by 1,000,000, then
        -- INITIAL_WINDOW_SIZE 2^31-1 and 65,535 in one frame: the last
        -- applies (no change); each in turn would take the stream's
        -- window past 2^31-1 on the way (FLOW_CONTROL_ERROR).
        local c = h2.connect(s.grpc_addr)
        local id = c:open("QueryRoute")
        c:window_update(id, 1000000)
        c:frame(T_SETTINGS, 0, 0, string.pack(">I2I4I2I4", 4, 0x7fffffff, 4, 65535))
        c:data(id, route_req(), true)
        pump_until(c, function() return c.ended[id] or c.closed end, "not answered")
        assert.is_nil(c.goaway)
        assert.equal("end", c.ended[id])
        assert.equal(0, h2.grpc_status(c.block[id]))
        c:close()
        -- 33 settings in one frame: more than grpcMaxSettingsEntries (32).
        c = h2.connect(s.grpc_addr)
        c:frame(T_SETTINGS, 0, 0, string.pack(">I2I4", 4, 65535):rep(33))
        conn_error(c, CALM, 0, "33 settings in a frame")
        assert.matches("a SETTINGS frame of 33 settings %(grpcMaxSettingsEntries 32%); GOAWAY", s:log())
        -- 300 SETTINGS frames at once: more than grpcMaxSettingsPerSecond (100).
        c = h2.connect(s.grpc_addr)
        for _ = 1, 300 do
            c:frame(T_SETTINGS, 0, 0, string.pack(">I2I4", 4, 65535))
        end
        conn_error(c, CALM, 0, "300 SETTINGS frames")
        assert.matches("more than 100 SETTINGS frames in a second %(grpcMaxSettingsPerSecond%); GOAWAY", s:log())
    end)

    -- }}}

    it("closes peers that do not speak HTTP/2", function()
        local r, why = run("garbage")
        assert.is_true(r.http1.closed, why)
        assert.is_true(r.junk.closed, why)
        assert.equal(OK, r.after.status, why)
    end)
end)
