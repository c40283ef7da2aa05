-- The native request processors on a seeded random sequence of
-- SEND_MESSAGE_V2 / SEND_MESSAGE / SEND_BATCH_MESSAGE / PULL_MESSAGE /
-- HEART_BEAT / offset requests, valid and not (fields missing, of the
-- wrong type, out of range, given twice, odd properties strings, odd
-- batch bodies, unknown topics and groups, a broker permission changed on
-- the way), checked reply by reply against the expected replies, and at
-- the end so is every queue's stored messages, max and min offsets and
-- the consumer offsets.
--
-- The expected replies (spec/integration/native_expected/SEED.txt, one
-- line per request: the reply as support.native_compare makes it
-- comparable, plus the header's own fields) were recorded from the Lua
-- handlers that served these requests until issue 27 (nativeProcessors =
-- false at 0c3d410), which this spec then checked against the native
-- processors reply by reply, and whose texts are 4.9.8's (the fixture
-- specs check them against the Java broker's).  Those Lua copies are
-- gone: C answers every case; the expectations keep every case.  Each
-- sequence runs twice: requests reaching C from their frames, and with
-- nativeProcessors = false, where the Lua entry hands them to the same
-- C processor (native.run).
--
-- Each broker has two workers and the spec two connections to it (one
-- per worker), so what one worker changes is seen from the other.  The
-- frames are written here byte by byte (duplicate extFields keys, JSON
-- numbers and booleans as values).
--
-- The seeds are fixed (RMQ_DIFF_RECORD=DIR records the expectations of
-- the broker under test into DIR instead of checking them; RMQ_DIFF_N
-- changes the number of requests, recorded or not); a failure names the
-- seed and the request's index.
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")
local rq = require("support.requests")
local compare = require("support.native_compare")
local codes = require("rmq.codes")

local req = codes.request

local SEED = 7
local N = tonumber(os.getenv("RMQ_DIFF_N") or "") or 400
local RECORD = os.getenv("RMQ_DIFF_RECORD")
local EXPECTED = "spec/integration/native_expected"

-- {{{ A seeded generator (xorshift64*: the same sequence on every Lua)

local function rng(seed)
    local x = seed ~ 0x2545F4914F6CDD1D
    if x == 0 then
        x = 1
    end
    local r = {}
    function r.next()
        x = x ~ (x >> 12)
        x = x ~ (x << 25)
        x = x ~ (x >> 27)
        return ((x * 0x2545F4914F6CDD1D) >> 11) & 0x7FFFFFFF
    end
    -- 1..n
    function r.int(n)
        return r.next() % n + 1
    end
    function r.pick(list)
        return list[r.int(#list)]
    end
    -- true with probability p (0..1)
    function r.chance(p)
        return r.next() % 10000 < p * 10000
    end
    return r
end

-- }}}

-- {{{ Frames

local FLAG_ONEWAY = 0x2
local NULL = {}      -- an extFields value written as JSON null
local opaque = 0

-- A value as JSON: strings quoted, NULL as null, {raw = "true"} bare.
local function json_value(v)
    if v == NULL then
        return "null"
    elseif type(v) == "table" then
        return v.raw
    end
    return cjson.encode(v)
end

-- ext: a list of {key, value} written in that order (duplicates kept).
local function frame(code, ext, body, opts)
    opts = opts or {}
    opaque = opaque + 1
    local parts = {}
    for _, kv in ipairs(ext) do
        parts[#parts + 1] = cjson.encode(kv[1]) .. ":" .. json_value(kv[2])
    end
    local hdr = ('{"code":%d,"extFields":{%s},"flag":%d,"language":"JAVA","opaque":%d,'
                 .. '"serializeTypeCurrentRPC":"JSON","version":%d}')
        :format(code, table.concat(parts, ","), opts.flag or 0, opaque, opts.version or 401)
    return rq.frame(hdr, body)
end

-- The reply header's own JSON (extFields as a map, without msgId).
local function reply_header(bytes)
    local hl = string.unpack(">I4", bytes, 5) & 0xFFFFFF
    local h = cjson.decode(bytes:sub(9, 8 + hl))
    if type(h.extFields) == "table" then
        h.extFields.msgId = nil
    end
    h.remark = h.remark and h.remark:gsub("127%.0%.0%.1:%d+", "PEER")
    return h
end

-- }}}

-- {{{ The request generator

-- Mostly topics and groups that exist; a few of every other kind.
local TOPICS = {
    "DfA", "DfA", "DfA", "DfA", "DfA", "DfA", "DfW1", "DfW1", "DfW1", "DfRO", "DfWO", "DfNone", "TBW102",
    string.rep("t", 127), string.rep("u", 128), "Df Bad", "", "%RETRY%DfG", "%DLQ%DfG",
    "SCHEDULE_TOPIC_XXXX", "DfNew1", "DfNew2",
}
local GROUPS = { "DfG", "DfG", "DfG", "DfG", "DfGH", "DfGD", "DfGB", "DfGS", "DfGS", "DfGNew", "Df Bad",
                 "CID_RMQ_SYS_X", "" }
local CLIENTS = { "df-client@1", "df-client@2" }

-- Property pairs and separators: valid ones, and every odd \1 \2
-- placement.  A delay is a level due long after the run (6: 2 min; 99
-- is capped at 18), so no delivery races the requests.
local PAIRS = {
    "TAGS\1TagA", "TAGS\1TagB", "TAGS\1a|", "TAGS\1", "KEYS\1k1", "KEYS\1k1 k2",
    "WAIT\1true", "WAIT\1false", "WAIT\1FALSE", "UNIQ_KEY\1u1", "CLUSTER\1theirs",
    "DELAY\0010", "DELAY\1abc", "DELAY\1-1", "DELAY\0016", "DELAY\00199",
    "\1v", "k\1", "k\1v\1w", "", "plain", "TAGS\1x\1y", "TRAN_MSG\1true",
}

local function properties(r)
    if r.chance(0.1) then
        return nil
    end
    local parts = {}
    for i = 1, r.int(4) - 1 do
        parts[i] = r.pick(PAIRS)
    end
    local s = table.concat(parts, "\2")
    if r.chance(0.1) then
        s = "\2" .. s
    end
    if r.chance(0.1) then
        s = s .. "\2"
    end
    if r.chance(0.05) then
        s = s .. "\2\2"
    end
    return s
end

-- One message of a batch body (protocol.md 5.8).
local function batch_item(body, props, flag)
    local n = 4 * 5 + #body + 2 + #props
    return string.pack(">i4i4i4i4s4", n, 0, 0, flag or 0, body) .. string.pack(">s2", props)
end

local function batch_body(r)
    local k = r.int(10)
    if k == 1 then
        return ""
    elseif k == 2 then
        return "not a batch"
    end
    local items = {}
    for i = 1, r.int(4) do
        local props = r.pick({ "", "TAGS\1TagB", "TAGS\1TagA\2KEYS\1b" .. i, "WAIT\1false\2", "DELAY\0016",
                              "TAGS\1TagB\2" })
        items[i] = batch_item(("batch-%d-%d"):format(k, i), props, r.int(3) - 1)
    end
    local b = table.concat(items)
    if k == 3 then
        b = b:sub(1, #b - 3)                  -- truncated
    elseif k == 4 then
        b = b .. "\0\0"                       -- trailing bytes
    end
    return b
end

-- A field value: mostly `good`; in a request chosen to be odd (one in
-- five), sometimes missing or odd.
local odd_request = false

local function field(r, good, odd)
    local k = r.int(100)
    if not odd_request or k > 12 then
        return good
    elseif k <= 4 then
        return nil
    else
        return r.pick(odd or { "x", "", "1.5", " 1", "2147483648", { raw = "true" }, NULL })
    end
end

local function put(ext, key, v)
    if v ~= nil then
        ext[#ext + 1] = { key, v }
    end
end

-- Adds a duplicate of one of ext's keys, before or after (the later wins).
local function duplicate(r, ext)
    if #ext == 0 or not r.chance(odd_request and 0.2 or 0.03) then
        return
    end
    local kv = ext[r.int(#ext)]
    -- Not another topic's name: an "any queue" send to a topic created
    -- with several queues would land on a random one in each broker.
    local topic = kv[1] == "b" or kv[1] == "topic"
    local v = r.pick(topic and { "Df Bad", kv[2], NULL } or { "x", "0", "1", kv[2], NULL })
    if r.chance(0.5) then
        table.insert(ext, 1, { kv[1], v })
    else
        ext[#ext + 1] = { kv[1], v }
    end
end

-- queueId for a topic: in range, out of range, or "any" (< 0) only
-- where a single write queue makes the broker's pick certain.
local function queue_for(r, topic)
    if topic == "DfW1" and r.chance(0.4) then
        return tostring(-r.int(3))
    end
    if r.chance(0.1) then
        return tostring(r.pick({ 4, 7, 8 }))
    end
    return tostring(r.pick({ 0, 1, 2, 3 }))
end

local function gen_send(r)
    local code = r.pick({ req.SEND_MESSAGE_V2, req.SEND_MESSAGE_V2, req.SEND_MESSAGE_V2, req.SEND_MESSAGE,
                          req.SEND_BATCH_MESSAGE })
    local topic = r.pick(TOPICS)
    local batch = code == req.SEND_BATCH_MESSAGE and not r.chance(0.1) or
                  (code ~= req.SEND_BATCH_MESSAGE and r.chance(0.03))
    local body
    if batch then
        body = batch_body(r)
    else
        body = r.pick({ "hello", "", "m", string.rep("z", 300), string.rep("x", 5000), "\0\1\2" })
    end
    local v1 = code == req.SEND_MESSAGE
    local names = v1 and { "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
                           "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
                           "maxReconsumeTimes", "batch" }
                     or { "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m" }
    local ext = {}
    put(ext, names[1], field(r, "DfProducer"))
    put(ext, names[2], field(r, topic, { "", "Df Bad", NULL, string.rep("v", 200) }))
    put(ext, names[3], field(r, "TBW102", { "DfNone", "", "DfA" }))
    -- A new topic gets one queue when the producer asks for one: its
    -- "any queue" sends then land on queue 0 in both brokers.
    local new = topic:sub(1, 5) == "DfNew"
    put(ext, names[4], new and "1" or field(r, tostring(r.pick({ 4, 8, 1 })), { "0", "-1", "x", "100" }))
    local qid = new and (r.chance(0.3) and "-1" or "0") or queue_for(r, topic)
    put(ext, names[5], field(r, qid, { "2147483647", "x", "", "1e3" }))
    put(ext, names[6], field(r, tostring(r.pick({ 0, 0, 0, 1, 2, 4, 8, 12 })), { "x", "-1" }))
    put(ext, names[7], field(r, tostring(1700000000000 + r.int(1000)), { "x", "9223372036854775808" }))
    put(ext, names[8], field(r, tostring(r.pick({ 0, 0, 1, -7 })), { "x" }))
    put(ext, names[9], properties(r))
    put(ext, names[10], field(r, tostring(r.pick({ 0, 0, 1, 15, 16, 40 })), { "x", "-1" }))
    put(ext, names[11], field(r, "false", { "true", "yes" }))
    if r.chance(0.2) then
        put(ext, names[12], field(r, tostring(r.pick({ 0, 1, 16 }))))
    end
    if batch then
        put(ext, names[13], field(r, "true", { "TRUE", "false", "1" }))
    elseif r.chance(0.2) then
        put(ext, names[13], "false")
    end
    if r.chance(0.05) then
        put(ext, "unknownField", "1")
    end
    duplicate(r, ext)
    return code, ext, body, { version = r.chance(0.1) and 317 or 401 }
end

local SUBS = { "*", "*", "", "TagA", "TagA||TagB", " TagA || TagB ", "TagB", "a|", "x||a|", "||",
               "*||TagA", "NoSuchTag", "TagA||TagA" }

local function gen_pull(r)
    local ext = {}
    local topic = r.chance(0.6) and "DfA" or r.pick(TOPICS)
    put(ext, "consumerGroup", field(r, r.chance(0.5) and "DfG" or r.pick(GROUPS)))
    put(ext, "topic", field(r, topic))
    put(ext, "queueId", field(r, queue_for(r, "")))
    put(ext, "queueOffset", field(r, tostring(r.chance(0.1) and r.pick({ -1, 1000 }) or r.pick({ 0, 0, 1, 2, 3, 5 })),
                                  { "x", "-9223372036854775808", "" }))
    put(ext, "maxMsgNums", field(r, tostring(r.pick({ 32, 32, 1, 2, 0, -1, 100000 }))))
    -- FLAG_COMMIT_OFFSET 1, FLAG_SUSPEND 2, FLAG_SUBSCRIPTION 4,
    -- FLAG_CLASS_FILTER 8.
    local flag = r.pick({ 4, 4, 5, 0, 1, 6, 12, 13, 8, 7 })
    put(ext, "sysFlag", field(r, tostring(flag)))
    put(ext, "commitOffset", field(r, tostring(r.pick({ 0, 1, 2, 3, -3 }))))
    -- A held pull (Lua's) waits this long for a message none sends.
    put(ext, "suspendTimeoutMillis", r.chance(0.1) and "30" or "0")
    put(ext, "subscription", r.chance(0.9) and r.pick(SUBS) or nil)
    put(ext, "subVersion", field(r, tostring(r.pick({ 0, 0, 1, 2, 5 }))))
    put(ext, "expressionType", r.chance(0.9) and r.pick({ "TAG", "TAG", "", "SQL92" }) or nil)
    duplicate(r, ext)
    return req.PULL_MESSAGE, ext, nil, {}
end

local function gen_heartbeat(r)
    local k = r.int(20)
    if k == 1 then
        return req.HEART_BEAT, {}, "{not json", {}
    elseif k == 2 then
        -- Refused after an escaped string (the parser's arena is in use).
        return req.HEART_BEAT, {}, '{"clientID":"df\\u0041","consumerDataSet":7}', {}
    end
    local group = r.pick({ "DfG", "DfGS", "DfGB", "DfGH" })
    local body = {
        clientID = r.pick(CLIENTS),
        producerDataSet = setmetatable(r.chance(0.5) and { { groupName = "DfProducer" } } or {}, cjson.array_mt),
        consumerDataSet = { {
            groupName = group, consumeType = "CONSUME_PASSIVELY",
            messageModel = r.pick({ "CLUSTERING", "CLUSTERING", "BROADCASTING" }),
            consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
            subscriptionDataSet = { {
                topic = r.pick({ "DfA", "DfA", "DfW1", "DfRO" }), subString = r.pick(SUBS),
                tagsSet = setmetatable({}, cjson.array_mt), codeSet = setmetatable({}, cjson.array_mt),
                subVersion = r.pick({ 1, 1, 2, 3 }), expressionType = r.pick({ "TAG", "TAG", "SQL92" }),
                classFilterMode = r.chance(0.1),
            } },
        } },
    }
    return req.HEART_BEAT, {}, cjson.encode(body), {}
end

local function gen_offset(r)
    local code = r.pick({ req.QUERY_CONSUMER_OFFSET, req.UPDATE_CONSUMER_OFFSET, req.GET_MAX_OFFSET,
                          req.GET_MIN_OFFSET })
    local ext = {}
    if code == req.QUERY_CONSUMER_OFFSET or code == req.UPDATE_CONSUMER_OFFSET then
        put(ext, "consumerGroup", field(r, r.pick(GROUPS)))
    end
    put(ext, "topic", field(r, r.pick(TOPICS)))
    put(ext, "queueId", field(r, tostring(r.pick({ 0, 0, 1, 3, 4, 8, -1 }))))
    if code == req.UPDATE_CONSUMER_OFFSET then
        put(ext, "commitOffset", field(r, tostring(r.pick({ 0, 1, 5, -2, 1000 }))))
    end
    duplicate(r, ext)
    return code, ext, nil, {}
end

-- A permission without read or write for a few requests (run() puts
-- 6 back), or one a live update refuses (0, 7: only 2, 4 and 6 are).
local function gen_config(r)
    return req.UPDATE_BROKER_CONFIG, {}, ("brokerPermission=%d\n"):format(r.pick({ 4, 2, 0, 7 })), {}
end

local function gen(r)
    odd_request = r.chance(0.2)
    local k = r.int(100)
    if k <= 45 then
        return gen_send(r)
    elseif k <= 75 then
        return gen_pull(r)
    elseif k <= 83 then
        return gen_heartbeat(r)
    elseif k <= 97 then
        return gen_offset(r)
    end
    return gen_config(r)
end

-- }}}

-- A broker's conf; `dir` reuses a store (a restart), else a new one.
local function broker(native, workers, extra, dir)
    local conf = {
        role = "broker", workers = workers, brokerName = "broker-a",
        storePathRootDir = dir or (server.tmpdir() .. "/store"),
        mappedFileSizeCommitLog = 4 * 1024 * 1024,
        namesrvAddr = "127.0.0.1:1",
        nativeProcessors = native,
        maxMessageSize = 4096,
        -- A registration (after a permission change) that a lost wake-up
        -- in the registration loop delays ends soon.
        registerBrokerTimeoutMills = 1000,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    local s = server.start(conf)
    s.store_dir = conf.storePathRootDir
    return s
end

-- The fixed part of both brokers: topics (read-only, write-only, one
-- write queue, 127 bytes long) and groups (consume off, broadcast off,
-- slow-consumer settings).
local function setup_requests()
    local out = {}
    local function topic(name, r, w, perm)
        out[#out + 1] = { req.UPDATE_AND_CREATE_TOPIC, {
            { "topic", name }, { "defaultTopic", "TBW102" }, { "readQueueNums", tostring(r) },
            { "writeQueueNums", tostring(w) }, { "perm", tostring(perm) },
            { "topicFilterType", "SINGLE_TAG" }, { "order", "false" },
        } }
    end
    local function group(name, extra)
        local g = { groupName = name, consumeEnable = true, consumeBroadcastEnable = true,
                    retryQueueNums = 1, brokerId = 0, whichBrokerWhenConsumeSlowly = 1 }
        for k, v in pairs(extra) do
            g[k] = v
        end
        out[#out + 1] = { req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, cjson.encode(g) }
    end
    topic("DfA", 4, 4, 6)
    topic("DfW1", 4, 1, 6)
    topic("DfRO", 4, 4, 4)
    topic("DfWO", 4, 4, 2)
    topic(string.rep("t", 127), 2, 2, 6)
    group("DfG", {})
    group("DfGD", { consumeEnable = false })
    group("DfGB", { consumeBroadcastEnable = false })
    group("DfGS", { brokerId = 2, whichBrokerWhenConsumeSlowly = 3 })
    return out
end

-- The expected replies of a seed's run: {next = fn() -> line}, or a
-- recorder (RMQ_DIFF_RECORD) that writes each reply it is given.
local function expectations(seed)
    if RECORD then
        local f = assert(io.open(("%s/%d.txt"):format(RECORD, seed), "w"))
        return { record = function(line) f:write(line, "\n") end, close = function() f:close() end }
    end
    local f = assert(io.open(("%s/%d.txt"):format(EXPECTED, seed), "r"))
    return { next = function() return f:read("l") end, close = function() f:close() end }
end

-- Runs `n` random requests from `seed` against broker a, each reply
-- checked against the expected one; then what it stored.
local function run(a, seed, n)
    local r = rng(seed)
    local ca = { assert(net.connect(a.addr)), assert(net.connect(a.addr)) }
    local where = ("seed %d (RMQ_DIFF_N=%d)"):format(seed, n)
    local exp = expectations(seed)

    local function same(fa, what)
        local ra, ba = fa()
        assert(ra, ("%s: %s: %s"):format(where, what, tostring(ba)))
        local xa = compare.comparable(ra)
        xa.header = reply_header(ba)
        xa.header.opaque = nil
        local got = compare.dump(xa)
        if exp.record then
            exp.record(got)
        else
            local want = exp.next()
            if got ~= want then
                error(("%s: %s: not the expected reply\n  got:      %s\n  expected: %s")
                    :format(where, what, got, tostring(want)), 2)
            end
        end
        return ra
    end

    -- A generous timeout: a held pull, a SYNC_FLUSH wait, a permission
    -- change's registration, on a machine shared with other work.
    local function call(i, code, ext, body, opts, what)
        opts = opts or {}
        local f = frame(code, ext, body, opts)
        if (opts.flag or 0) & FLAG_ONEWAY ~= 0 then
            -- No reply: the next call on the same connection orders it.
            assert(ca[i]:send_raw(f))
            f = frame(req.GET_MAX_OFFSET, { { "topic", "DfA" }, { "queueId", "0" } })
            what = what .. " (oneway, then a call)"
        end
        return same(function() return ca[i]:call_raw(f, 15000) end, what)
    end

    for k, s in ipairs(setup_requests()) do
        call(1, s[1], s[2], s[3], {}, "setup " .. k)
    end
    local stats = {}
    local restore_at
    for k = 1, n do
        local code, ext, body, opts = gen(r)
        if restore_at == k then
            code, ext, body, opts = req.UPDATE_BROKER_CONFIG, {}, "brokerPermission=6\n", {}
        elseif code == req.UPDATE_BROKER_CONFIG then
            restore_at = k + r.int(6)
        end
        local conn = r.int(2)
        if code ~= req.UPDATE_BROKER_CONFIG and r.chance(0.03) then
            opts.flag = FLAG_ONEWAY
        end
        local what = ("request %d (code %d on connection %d): %s"):format(k, code, conn,
            compare.dump({ ext = ext, body = body and #body > 200 and ("%d bytes"):format(#body) or body,
                           flag = opts.flag }))
        local rep = call(conn, code, ext, body, opts, what)
        local key = code .. ":" .. rep.code
        stats[key] = (stats[key] or 0) + 1
    end
    if os.getenv("RMQ_DIFF_STATS") then
        -- {["request code:reply code"] = count}: what a seed exercises
        print(compare.dump(stats))
    end

    -- Everything stored, queue by queue, and the consumer offsets (read
    -- with the broker readable again).
    for i = 1, 2 do
        call(i, req.UPDATE_BROKER_CONFIG, {}, "brokerPermission=6\n", {}, "permission restored")
    end
    local topics = { "DfA", "DfW1", "DfRO", "DfWO", "TBW102", string.rep("t", 127), "DfNew1", "DfNew2",
                     "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT" }
    for _, g in ipairs(GROUPS) do
        topics[#topics + 1] = "%RETRY%" .. g
        topics[#topics + 1] = "%DLQ%" .. g
    end
    for _, t in ipairs(topics) do
        for q = 0, 17 do
            local function offset(code)
                return call(1, code, { { "topic", t }, { "queueId", tostring(q) } }, nil, {},
                            ("%s of %s@%d at the end"):format(code, t, q))
            end
            local max = tonumber(offset(req.GET_MAX_OFFSET).ext.offset) or 0
            offset(req.GET_MIN_OFFSET)
            local from = 0
            while from < max do
                local p = call(1, req.PULL_MESSAGE, {
                    { "consumerGroup", "DfDump" }, { "topic", t }, { "queueId", tostring(q) },
                    { "queueOffset", tostring(from) }, { "maxMsgNums", "32" }, { "sysFlag", "4" },
                    { "subscription", "*" },
                }, nil, {}, ("the messages of %s@%d from %d at the end"):format(t, q, from))
                local nxt = tonumber(p.ext.nextBeginOffset)
                if p.code ~= 0 or nxt == nil or nxt <= from then
                    break
                end
                from = nxt
            end
            if q < 4 then
                for _, g in ipairs(GROUPS) do
                    if g ~= "" and not g:find(" ") then
                        call(2, req.QUERY_CONSUMER_OFFSET, { { "consumerGroup", g }, { "topic", t },
                                                            { "queueId", tostring(q) } }, nil, {},
                             ("the offset of %s in %s@%d at the end"):format(g, t, q))
                    end
                end
            end
        end
    end
    for _, c in ipairs(ca) do
        c:close()
    end
    if not exp.record then
        assert(exp.next() == nil, where .. ": fewer replies than expected")
    end
    exp.close()
end

-- Stops a; it must exit cleanly (under --asan: with nothing leaked, or
-- the sanitizer aborts it).
local function stopped(a)
    local status, signal = a:stop()
    assert(status == 0 and (signal or 0) == 0,
           ("exit status %s, signal %s\n%s"):format(tostring(status), tostring(signal), a:log()))
end

-- Recording, the broker under test is the one whose replies are kept:
-- nativeProcessors as RMQ_DIFF_NATIVE says (default false: the Lua
-- handlers, where a base revision still has them).
local KINDS = RECORD and { os.getenv("RMQ_DIFF_NATIVE") == "true" } or { true, false }

describe("native processors on random requests", function()
    for _, native in ipairs(KINDS) do
        local kind = native and "from the frame" or "through the Lua entry (nativeProcessors = false)"
        it("answer and store as expected, on a master and then on a slave, " .. kind, function()
            local a = broker(native, 2, { slaveReadEnable = true })
            local ok, err = pcall(run, a, SEED, N)
            stopped(a)
            assert(ok, err)
            -- The same store served by a slave: sends refused, pulls
            -- never corrected (retry on the master).
            local slave = { brokerRole = "SLAVE", brokerId = 1, slaveReadEnable = true }
            a = broker(native, 2, slave, a.store_dir)
            ok, err = pcall(run, a, SEED + 2, N // 4)
            stopped(a)
            assert(ok, err)
        end)

        it("answer as expected with SYNC_FLUSH and no auto-created groups, " .. kind, function()
            local a = broker(native, 1, { flushDiskType = "SYNC_FLUSH", autoCreateSubscriptionGroup = false })
            local ok, err = pcall(run, a, SEED + 1, N // 4)
            stopped(a)
            assert(ok, err)
        end)
    end
end)
