-- The requests a broker answers in C (send, batch send, pull, heartbeat,
-- offsets; route in the NameServer) answer exactly as their Lua handlers
-- do: the same requests, in the same order, to one broker with the
-- native processors (the default) and one with nativeProcessors = false
-- get the same codes, remarks, extFields and messages, for the common
-- case C serves and for every case it hands to Lua (refusals,
-- auto-created topics and groups, retry topics, delays, a broker made
-- read-only at run time).
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")
local rq = require("support.requests")
local load = require("support.load")
local codes = require("rmq.codes")
local message = require("rmq.client.message")
local compare = require("support.native_compare")

local req, R = codes.request, codes.response

local function broker(native, flush, workers)
    return server.start({
        role = "broker", workers = workers or 1, brokerName = "broker-a",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 1024 * 1024,
        namesrvAddr = "127.0.0.1:1",
        nativeProcessors = native,
        maxMessageSize = 4096,
        flushDiskType = flush,
    })
end

local function send_req(topic, queue, props, body, code)
    local cmd = rq.send({ group = "NpGroup", topic = topic, qid = queue, born = 1796034593124,
                          props = props or "WAIT\1true\2TAGS\1TagA\2KEYS\1k1", body = body or "hello",
                          ext = { m = tostring(code == req.SEND_BATCH_MESSAGE) } })
    cmd.code = code or req.SEND_MESSAGE_V2
    return cmd
end

-- No subscription field at all when sub is nil.
local function pull_req(group, topic, queue, offset, sys_flag, sub, max)
    return rq.pull({ group = group, topic = topic, qid = queue, offset = offset, max = max,
                     sysflag = sys_flag, expr = "TAG", ext = { subscription = sub or false } })
end

local function heartbeat_req(client, group, topic, sub)
    return {
        code = req.HEART_BEAT,
        body = cjson.encode({
            clientID = client,
            producerDataSet = { { groupName = "NpGroup" } },
            consumerDataSet = { {
                groupName = group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
                consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
                subscriptionDataSet = { {
                    topic = topic, subString = sub, tagsSet = {}, codeSet = {}, subVersion = 1,
                    expressionType = "TAG", classFilterMode = false,
                } },
            } },
        }),
    }
end

-- A batch of three messages (protocol.md 5.8): totalSize, magicCode,
-- bodyCRC, flag, body length, body, properties length, properties.
local function batch_body()
    local out = {}
    for i = 1, 3 do
        local body = ("batch-%d "):format(i) .. string.rep("b", 400)
        local props = "TAGS\1TagB"
        local n = 4 * 5 + #body + 2 + #props
        out[i] = string.pack(">i4i4i4i4s4", n, 0, 0, 0, body) .. string.pack(">s2", props)
    end
    return table.concat(out)
end

local comparable = compare.comparable

describe("native processors", function()
    local a, b, ca, cb

    setup(function()
        a, b = broker(true), broker(false)
        ca, cb = assert(net.connect(a.addr)), assert(net.connect(b.addr))
    end)

    teardown(function()
        ca:close()
        cb:close()
        -- A clean exit (under --asan: nothing leaked, or the sanitizer
        -- aborts it).
        for _, s in ipairs({ a, b }) do
            local status, signal = s:stop()
            assert(status == 0 and (signal or 0) == 0,
                   ("exit status %s, signal %s\n%s"):format(tostring(status), tostring(signal), s:log()))
        end
    end)

    -- Sends the request to both and checks that they answer alike.
    local function both(r, what)
        local ra, rb = assert(ca:call(r)), assert(cb:call(r))
        assert.same(comparable(rb), comparable(ra), what)
        return ra
    end

    it("answer sends as the Lua handlers do, stored the same way", function()
        -- First send: auto-created from TBW102 (Lua), then the common case.
        assert.equal(R.SUCCESS, both(send_req("NpT", 0), "auto-create").code)
        for q = 0, 3 do
            local r = both(send_req("NpT", q, nil, ("m%d"):format(q)), "queue " .. q)
            assert.equal(R.SUCCESS, r.code)
            assert.equal(tostring(q), r.ext.queueId)
        end
        both(send_req("NpT", 0, "TAGS\1TagB\2WAIT\1false\2CLUSTER\1theirs"), "cluster replaced")
        both(send_req("NpT", 1, "", "no properties"), "no properties")
        both(send_req("NpT", 2, nil, "v1", req.SEND_MESSAGE), "SEND_MESSAGE (v1 header)")
        local batch = both(send_req("NpT", 3, "TAGS\1TagB", batch_body(), req.SEND_BATCH_MESSAGE), "batch")
        assert.equal(R.SUCCESS, batch.code)
        assert.equal(3, select(2, batch.ext.msgId:gsub("%x+", "")))
        -- Handed to Lua: refusals and decisions.
        local refusals = {
            { send_req("NpT", 9), R.SYSTEM_ERROR },                                -- queue out of range
            { send_req("SCHEDULE_TOPIC_XXXX", 0), R.NO_PERMISSION },               -- system topic
            { send_req("NpT", 0, nil, string.rep("x", 5000)), R.MESSAGE_ILLEGAL },   -- over maxMessageSize
            { send_req("%RETRY%NpGroup", 0), R.SUCCESS },                          -- retry topic (group auto-created)
            { send_req("NpT", 0, "DELAY\0012\2TAGS\1TagA"), R.SUCCESS },           -- parked until due
            { send_req("Np Bad", 0), R.SYSTEM_ERROR },                            -- bad topic name
        }
        for i, case in ipairs(refusals) do
            assert.equal(case[2], both(case[1], "case " .. i).code, "case " .. i)
        end
        local bad = send_req("NpT", 0)
        bad.ext.f = "x"
        assert.equal(R.SYSTEM_ERROR, both(bad, "sysFlag not a number").code)
        bad.ext.f, bad.ext.b = 0, nil
        assert.equal(R.SYSTEM_ERROR, both(bad, "no topic").code)
        -- A oneway send is stored with no answer.
        for _, c in ipairs({ ca, cb }) do
            assert(c:oneway(send_req("NpT", 0, nil, "oneway")))
        end
        local qa = assert(ca:call({ code = req.GET_MAX_OFFSET, ext = { topic = "NpT", queueId = 0 } }))
        assert.same(comparable(assert(cb:call({ code = req.GET_MAX_OFFSET,
                                                ext = { topic = "NpT", queueId = 0 } }))), comparable(qa))
    end)

    it("answer a broker made read-only at run time as Lua does", function()
        for _, c in ipairs({ ca, cb }) do
            local r = assert(c:call({ code = req.UPDATE_BROKER_CONFIG, body = "brokerPermission=4\n" }))
            assert.equal(R.SUCCESS, r.code, r.remark)
        end
        local r = both(send_req("NpT", 0), "read-only")
        assert.equal(R.NO_PERMISSION, r.code)
        assert.matches("sending message is forbidden", r.remark)
        for _, c in ipairs({ ca, cb }) do
            assert.equal(R.SUCCESS, assert(c:call({ code = req.UPDATE_BROKER_CONFIG,
                                                    body = "brokerPermission=6\n" })).code)
        end
        assert.equal(R.SUCCESS, both(send_req("NpT", 0), "writable again").code)
    end)

    it("answer pulls, heartbeats and offsets as the Lua handlers do", function()
        local SUB, COMMIT, SUSPEND = 0x4, 0x1, 0x2
        -- Own subscription: everything, one tag, two tags, a tag no message has.
        for _, sub in ipairs({ "*", "TagA", "TagA || TagB", " TagB ||TagB", "NoSuchTag", "||" }) do
            for q = 0, 3 do
                local r = both(pull_req("NpG", "NpT", q, 0, SUB, sub), sub .. " q" .. q)
                assert.is_true(r.code == R.SUCCESS or r.code == R.PULL_NOT_FOUND
                               or r.code == R.PULL_RETRY_IMMEDIATELY, sub)
            end
        end
        both(pull_req("NpG", "NpT", 0, 1, SUB, "*", 1), "one message from offset 1")
        -- Asking for more than the store returns: the same records (C
        -- sizes its slices by the store's transfer limit, not the ask).
        local many = both(pull_req("NpG", "NpT", 0, 0, SUB, "*", 2147483647), "maxMsgNums at int max")
        assert.equal(R.SUCCESS, many.code)
        both(pull_req("NpG", "NpT", 0, 1000, SUB, "*"), "offset moved (Lua)")
        both(pull_req("NpG", "NpT", 0, 3, SUB, "*"), "offset at the end, no hold")
        both(pull_req("NpG", "NpT", 7, 0, SUB, "*"), "queue out of range")
        both(pull_req("NpG", "NoSuchTopic", 0, 0, SUB, "*"), "no topic")
        both(pull_req("Np Bad", "NpT", 0, 0, SUB, "*"), "bad group name")
        -- The group's subscription from its heartbeat (Java's default).
        both(pull_req("NpH", "NpT", 0, 0, 0), "no heartbeat yet")
        local hb = heartbeat_req("np-client@1", "NpH", "NpT", "TagA || TagB")
        assert.equal(R.SUCCESS, both(hb, "first heartbeat (Lua)").code)
        assert.equal(R.SUCCESS, both(hb, "repeat heartbeat (C)").code)
        for q = 0, 3 do
            both(pull_req("NpH", "NpT", q, 0, COMMIT, nil), "registered q" .. q)
        end
        local changed = heartbeat_req("np-client@1", "NpH", "NpT", "TagB")
        both(changed, "changed heartbeat")
        both(pull_req("NpH", "NpT", 3, 0, 0), "after the change")
        local garbage = { code = req.HEART_BEAT, body = "{not json" }
        assert.equal(R.SYSTEM_ERROR, both(garbage, "unparsable heartbeat").code)
        -- Refused after a string with an escape (the parser's arena in use).
        garbage.body = '{"clientID":"np\\u0041","consumerDataSet":7}'
        assert.equal(R.SYSTEM_ERROR, both(garbage, "heartbeat refused after an escaped string").code)
        -- A suspended pull with nothing new is held by Lua; both answer
        -- PULL_NOT_FOUND after the hold.
        local held = pull_req("NpG", "NpT", 1, 50, SUB | SUSPEND, "*")
        held.ext.queueOffset = nil
        both(held, "no queueOffset")
        -- Offsets.
        local function offset_req(code, ext)
            return { code = code, ext = ext }
        end
        both(offset_req(req.QUERY_CONSUMER_OFFSET, { consumerGroup = "NpO", topic = "NpT", queueId = 0 }),
             "no offset yet (Lua)")
        both(offset_req(req.UPDATE_CONSUMER_OFFSET, { consumerGroup = "NpO", topic = "NpT", queueId = 0,
                                                      commitOffset = 2 }), "update")
        both(offset_req(req.UPDATE_CONSUMER_OFFSET, { consumerGroup = "NpO", topic = "NpT", queueId = 9,
                                                      commitOffset = 2 }), "update, queue out of range")
        both(offset_req(req.UPDATE_CONSUMER_OFFSET, { consumerGroup = "NpO", topic = "Nope", queueId = 0,
                                                      commitOffset = 2 }), "update, no topic")
        local q = both(offset_req(req.QUERY_CONSUMER_OFFSET,
                                  { consumerGroup = "NpO", topic = "NpT", queueId = 0 }), "query")
        assert.equal("2", q.ext.offset)
        for _, code in ipairs({ req.GET_MAX_OFFSET, req.GET_MIN_OFFSET }) do
            for qid = 0, 4 do
                both(offset_req(code, { topic = "NpT", queueId = qid }), "max/min " .. qid)
            end
            both(offset_req(code, { topic = "NpT", queueId = -1 }), "negative queue")
        end
        -- The commit made by a pull with FLAG_COMMIT_OFFSET.
        local commit = pull_req("NpH", "NpT", 0, 0, COMMIT, nil)
        commit.ext.commitOffset = 1
        both(commit, "pull committing 1")
        assert.equal("1", both(offset_req(req.QUERY_CONSUMER_OFFSET,
                                          { consumerGroup = "NpH", topic = "NpT", queueId = 0 }),
                               "committed by the pull").ext.offset)
    end)
end)

describe("brokerPermission changed in another worker", function()
    -- Two workers, one connection to each: the change is made through
    -- the first, the pull and the send go through the second (whose Lua
    -- conf copy is older).  Both brokers refuse, as Java would.
    it("is seen by the next pull and send of every worker", function()
        for _, native in ipairs({ true, false }) do
            local s = broker(native, nil, 2)
            local ok, err = pcall(function()
                local x, y = assert(net.connect(s.addr)), assert(net.connect(s.addr))
                local pull = pull_req("NpG", "NpT", 0, 0, 0x4, "*")
                local sent = assert(y:call(send_req("NpT", 0)))
                assert.equal(R.SUCCESS, sent.code)
                assert.equal(R.SUCCESS, assert(y:call(pull)).code)
                local _, phy = message.decode_offset_msg_id(sent.ext.msgId)
                local back = { code = req.CONSUMER_SEND_MSG_BACK,
                               ext = { offset = phy, group = "NpG", delayLevel = -1 } }
                for _, perm in ipairs({ 2, 4, 6 }) do
                    local r = assert(x:call({ code = req.UPDATE_BROKER_CONFIG,
                                              body = ("brokerPermission=%d\n"):format(perm) }))
                    assert.equal(R.SUCCESS, r.code, r.remark)
                    local want_pull = (perm & 4) ~= 0 and R.SUCCESS or R.NO_PERMISSION
                    local want_send = (perm & 2) ~= 0 and R.SUCCESS or R.NO_PERMISSION
                    local what = ("native=%s brokerPermission=%d"):format(tostring(native), perm)
                    assert.equal(want_pull, assert(y:call(pull)).code, what .. ": pull")
                    assert.equal(want_send, assert(y:call(send_req("NpT", 0))).code, what .. ": send")
                    assert.equal(want_send, assert(y:call(back)).code, what .. ": send back")
                end
                x:close()
                y:close()
            end)
            s:stop()
            assert(ok, err)
        end
    end)
end)

describe("native send with SYNC_FLUSH", function()
    it("answers each send once an fsync covers it, as the Lua handler does", function()
        local a, b = broker(true, "SYNC_FLUSH"), broker(false, "SYNC_FLUSH")
        local ok, err = pcall(function()
            local ca, cb = assert(net.connect(a.addr)), assert(net.connect(b.addr))
            local reqs = {
                send_req("NsT", 0), send_req("NsT", 1), send_req("NsT", 2, "WAIT\1false\2TAGS\1TagA"),
                send_req("NsT", 3, "TAGS\1TagB", batch_body(), req.SEND_BATCH_MESSAGE),
            }
            for i, r in ipairs(reqs) do
                local ra, rb = assert(ca:call(r)), assert(cb:call(r))
                assert.same(comparable(rb), comparable(ra), "send " .. i)
                assert.equal(R.SUCCESS, ra.code, ra.remark)
            end
            -- Many waiting at once (16 connections): every one answered
            -- by the group commits.
            local n, jobs = 200, {}
            for i = 1, n do
                jobs[i] = i
            end
            local res = load.run(a.addr, 16, jobs, function(conn, i)
                local r = assert(conn:call(send_req("NsT", i % 4, nil, "burst " .. i)))
                assert.equal(R.SUCCESS, r.code, r.remark)
            end, 60000)
            assert.equal(0, res.failed, res.errors[1])
            assert.equal(n, res.done)
            local max = 0
            for q = 0, 3 do
                local r = assert(ca:call({ code = req.GET_MAX_OFFSET, ext = { topic = "NsT", queueId = q } }))
                max = max + tonumber(r.ext.offset)
            end
            assert.equal(n + 3 + 3, max)
            ca:close()
            cb:close()
        end)
        -- A clean stop with nothing left waiting.
        assert.equal(0, a:stop())
        assert.equal(0, b:stop())
        assert(ok, err)
    end)
end)

describe("SYNC_FLUSH waits", function()
    -- The flush thread made slow (errinj flush_delay_ms, set through a
    -- conf processor): waits that time out, whose connection closes, and
    -- that are pending when the server stops.
    local function slow_broker(native)
        return server.start({ source = ([[
            return {
                role = "broker", workers = 1, brokerName = "broker-a",
                storePathRootDir = %q, mappedFileSizeCommitLog = 1048576,
                namesrvAddr = "127.0.0.1:1", nativeProcessors = %s,
                flushDiskType = "SYNC_FLUSH", syncFlushTimeout = 2000,
                processors = {
                    [7001] = function(ctx, cmd)
                        require("rmq.store").errinj("flush_delay_ms", tonumber(cmd:get("ms")))
                        return { code = 0 }
                    end,
                },
            }
        ]]):format(server.tmpdir() .. "/store", tostring(native)) })
    end

    local function delay(c, ms)
        local r = assert(c:call({ code = 7001, ext = { ms = ms } }))
        assert.equal(0, r.code, r.remark)
    end

    it("end alike in C and in Lua, and leave nothing behind", function()
        local seen = {}
        for _, native in ipairs({ true, false }) do
            local s = slow_broker(native)
            local out = {}
            local ok, err = pcall(function()
                local c = assert(net.connect(s.addr))
                out[#out + 1] = comparable(assert(c:call(send_req("NsW", 0))))   -- auto-created
                -- 300 ms against a 2 s timeout: durable however loaded the
                -- machine (against 1 s, a run under --asan at load 8 timed out).
                delay(c, 300)
                -- A wait whose connection closes before the flush.
                local gone = assert(net.connect(s.addr))
                net.spawn(function() gone:call(send_req("NsW", 1, nil, "closed early")) end)
                net.sleep(50)
                gone:close()
                out[#out + 1] = comparable(assert(c:call(send_req("NsW", 2, nil, "durable"))))
                -- One that times out (stored, maybe not durable).
                delay(c, 3500)
                out[#out + 1] = comparable(assert(c:call(send_req("NsW", 3, nil, "late"), 8000)))
                delay(c, 0)
                -- One pending when the server is told to stop (the flush
                -- thread still in its long sleep): answered while the
                -- worker drains, durable or not.
                local last
                local probe = assert(net.connect(s.addr))
                local function q0_max()
                    local r = assert(probe:call({ code = req.GET_MAX_OFFSET, ext = { topic = "NsW", queueId = 0 } }))
                    return tonumber(r.ext.offset)
                end
                local stored = q0_max()
                net.spawn(function() last = { c:call(send_req("NsW", 0, nil, "at shutdown"), 5000) } end)
                -- Stopped once the broker has it (stored, waiting for the flush).
                assert(server.eventually(function() return q0_max() > stored end, 3000), "the last send was not stored")
                probe:close()
                local status, signal = s:stop()
                out[#out + 1] = { status = status, signal = signal or 0 }
                assert(server.eventually(function() return last end, 3000), "the last send got no answer")
                out[#out + 1] = last[1] and comparable(last[1]) or tostring(last[2])
                c:close()
            end)
            if not ok then
                s:kill()
            end
            assert(ok, err)
            seen[#seen + 1] = out
        end
        -- The last send ends as the race between the flush and the drain
        -- goes, in each run on its own: either answer, with its remark
        -- and fields as C and Lua give them for that code.
        local last = { seen[1][5], seen[2][5] }
        seen[1][5], seen[2][5] = nil, nil
        assert.same(seen[2], seen[1])
        assert.equal(R.SUCCESS, seen[1][2].code)
        assert.equal(R.FLUSH_DISK_TIMEOUT, seen[1][3].code)
        assert.same({ status = 0, signal = 0 }, seen[1][4])
        for i = 1, 2 do
            assert.is_true(type(last[i]) == "table", "the last send: " .. tostring(last[i]))
            assert.is_true(last[i].code == R.SUCCESS or last[i].code == R.FLUSH_DISK_TIMEOUT)
        end
        if last[1].code == last[2].code then
            assert.same(last[1], last[2])
        end
    end)
end)

describe("native route processor", function()
    it("answers GET_ROUTEINFO_BY_TOPIC as the Lua handler does", function()
        local function standalone(native)
            local dir = server.tmpdir()
            return server.start({
                role = "standalone", namesrvListenPort = 0, workers = 1, brokerName = "broker-a",
                storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
                mappedFileSizeCommitLog = 1024 * 1024, nativeProcessors = native,
            })
        end
        local a, b = standalone(true), standalone(false)
        local ok, err = pcall(function()
            local ca, cb = assert(net.connect(a.addr)), assert(net.connect(b.addr))
            for _, r in ipairs({
                { code = req.GET_ROUTEINFO_BY_TOPIC, ext = { topic = "TBW102" } },
                { code = req.GET_ROUTEINFO_BY_TOPIC, ext = { topic = "TBW102" }, version = 317 },
                { code = req.GET_ROUTEINFO_BY_TOPIC, ext = { topic = "TBW102", acceptStandardJsonOnly = "TRUE" },
                  version = 317 },
                { code = req.GET_ROUTEINFO_BY_TOPIC, ext = { topic = "NoSuchTopic" } },
                { code = req.GET_ROUTEINFO_BY_TOPIC, ext = {} },
            }) do
                local ra, rb = assert(ca:call(r)), assert(cb:call(r))
                assert.equal(rb.code, ra.code)
                assert.equal(rb.remark, ra.remark)
                if ra.code == R.SUCCESS then
                    -- The same route, but each names its own broker port.
                    local ba = ra.body:gsub(":%d+", ":P")
                    local bb = rb.body:gsub(":%d+", ":P")
                    assert.equal(bb, ba)
                end
            end
            ca:close()
            cb:close()
        end)
        a:stop()
        b:stop()
        assert(ok, err)
    end)
end)
