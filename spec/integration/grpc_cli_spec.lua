-- `rmq send --grpc` and `rmq consume --grpc`: the CLI through RocketMQ
-- 5's gRPC API (src/grpc/client.c, rmq.grpc, rmq.client.grpc) against a
-- real standalone with grpcServerPort: plaintext, TLS (the CLI's --tls,
-- --tls-trust) and ACL (--access-key/--secret-key signing 5.x's
-- authorization header), and the errors a user sees.
local cjson = require("cjson")
local net = require("rmq.net")
local gclient = require("rmq.client.grpc")
local gn = require("support.grpc_node")
local server = require("support.server")

local TOPIC = "GrpcCliTopic"


-- A standalone with gRPC and TOPIC for the describe this is called in:
-- started in its setup (handed to set), stopped in its teardown.
local function with_node(set)
    local s
    setup(function()
        s = gn.start({}, { topics = { TOPIC } })
        set(s)
    end)
    teardown(function()
        gn.stop(s)
    end)
end

-- A new group pops from the queues' end (as 5.x): one receive first
-- places it, through the same client module the CLI uses.
local function place_group(s, group, opts)
    local c = assert(gclient.connect(s.grpc_addr, opts))
    local msgs, err = c:receive(group, TOPIC, { poll_ms = 500 })
    c:close()
    assert(msgs, err)
end

-- build/rmq ARGS (each quoted for the shell): exit code, output.
local function cli(args)
    local q = {}
    for i, a in ipairs(args) do
        q[i] = "'" .. tostring(a):gsub("'", "'\\''") .. "'"
    end
    return server.rmq(table.concat(q, " "))
end

local function json_lines(out)
    local rows = {}
    for l in out:gmatch("[^\n]+") do
        if l:match("^{") then
            rows[#rows + 1] = cjson.decode(l)
        end
    end
    return rows
end

describe("rmq send/consume --grpc", function()
    local s
    with_node(function(n) s = n end)

    it("sends through SendMessage and consumes through ReceiveMessage + AckMessage", function()
        place_group(s, "GrpcCliGroup")
        local ids = {}
        for i = 1, 3 do
            local code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--tags", "TagA",
                                           "-k", "key" .. i, "--json", "grpc-body-" .. i })
            assert.equal(0, code, out)
            local r = json_lines(out)[1]
            assert.equal("SEND_OK", r.status, out)
            assert.truthy(r.msgId and #r.msgId > 0, out)
            ids[r.msgId] = i
        end
        local code, out = cli({ "consume", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-g", "GrpcCliGroup",
                                       "-c", "3", "--json" })
        assert.equal(0, code, out)
        local rows = json_lines(out)
        assert.equal(3, #rows, out)
        local bodies = {}
        for _, r in ipairs(rows) do
            bodies[#bodies + 1] = r.body
            assert.equal("TagA", r.tags)
            assert.truthy(ids[r.msgId], "an id the sends printed: " .. out)
            assert.equal(TOPIC, r.topic)
        end
        table.sort(bodies)
        assert.same({ "grpc-body-1", "grpc-body-2", "grpc-body-3" }, bodies)
        -- Acknowledged: nothing comes back once the invisible time would
        -- have passed (a short one here), while a new send does.
        place_group(s, "GrpcCliGroup")
        code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "grpc-body-4" })
        assert.equal(0, code, out)
        assert.matches("^SEND_OK msgId=%S+ queueOffset=%d+", out)
        code, out = cli({ "consume", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-g", "GrpcCliGroup",
                                 "-c", "1", "--json" })
        assert.equal(0, code, out)
        rows = json_lines(out)
        assert.equal(1, #rows, out)
        assert.equal("grpc-body-4", rows[1].body)
    end)

    it("a tag filter passes only matching messages", function()
        place_group(s, "GrpcCliTags")
        for _, t in ipairs({ "TagX", "TagY", "TagX" }) do
            local code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--tags", t, "b-" .. t })
            assert.equal(0, code, out)
        end
        local code, out = cli({ "consume", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-g", "GrpcCliTags",
                                       "-e", "TagY", "-c", "1", "--json" })
        assert.equal(0, code, out)
        local rows = json_lines(out)
        assert.equal(1, #rows, out)
        assert.equal("TagY", rows[1].tags)
    end)

    it("says what went wrong: an unknown topic, nothing listening, a bad option", function()
        local code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", "NoSuchGrpcTopic", "x" })
        assert.equal(1, code)
        assert.matches("QueryRoute", out)
        assert.matches("TOPIC_NOT_FOUND", out:upper():gsub(" ", "_"), 1, true)
        code, out = cli({ "send", "--grpc", "-n", "127.0.0.1:1", "-t", TOPIC, "x" })
        assert.equal(1, code)
        assert.matches("cannot connect to 127.0.0.1:1", out, 1, true)
        code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--transaction", "commit", "x" })
        assert.equal(2, code)
        assert.matches("--grpc takes neither", out, 1, true)
        -- and the server serves on
        code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "still" })
        assert.equal(0, code, out)
    end)
end)

-- What the topic's queues hold (remoting GET_MAX_OFFSET, 4 queues): in
-- all, and each queue's.
local function stored(s)
    local n, per = 0, {}
    for q = 0, 3 do
        local r = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = q } }, 5000))
        assert(r.code == 0, r.remark)
        per[q] = tonumber(r.ext.offset)
        n = n + per[q]
    end
    return n, per
end

describe("rmq bench produce --grpc", function()
    local s
    with_node(function(n) s = n end)

    it("sends through SendMessage: what it reports is what the topic holds, each message with its own id", function()
        place_group(s, "GrpcBenchGroup")
        local before, per0 = stored(s)
        local code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-s", "128",
                                "-c", "8", "-d", "1", "--json" })
        assert.equal(0, code, out)
        local total = tonumber(out:match("%[Complete%] Send Total: (%d+) | Send TPS: %d+ | Max RT%(ms%)"))
        assert.truthy(total and total > 0, out)
        assert.matches("p99 RT%(ms%): [%d.]+ | Send Failed: 0", out)
        local j = json_lines(out)[1]
        assert.equal(total, j.ok, out)
        local after, per1 = stored(s)
        assert.equal(before + total, after)
        -- Spread over the route's queues (the client picks each send's, as
        -- the 5.x SDK does), each message its own id, the body as sized.
        for q = 0, 3 do
            assert.is_true(total < 4 or per1[q] > per0[q], "nothing sent to queue " .. q)
        end
        local c = assert(gclient.connect(s.grpc_addr))
        local ids, n = {}, 0
        while n < math.min(total, 64) do
            local msgs = assert(c:receive("GrpcBenchGroup", TOPIC, { batch = 32, poll_ms = 2000 }))
            assert.is_true(#msgs > 0, "received " .. n .. " of " .. total)
            for _, m in ipairs(msgs) do
                local id = m.system_properties.message_id
                assert.matches("^01%x+$", id)
                assert.equal(34, #id)
                assert.is_nil(ids[id], "a message id seen twice: " .. id)
                ids[id] = true
                assert.equal(128, #m.body)
                n = n + 1
            end
        end
        c:close()
    end)

    -- A header value given as a Lua number is a string made for the run
    -- and kept by it.  Before, the string was popped at once: the garbage
    -- collection a tick runs freed it and every later send read freed
    -- memory (under --asan: heap-use-after-free in the generator).
    it("keeps a header value given as a number for the whole run (rmq.bench.produce)", function()
        local c = assert(gclient.connect(s.grpc_addr))
        local headers = c:headers()
        local route = assert(c:query_route(TOPIC))
        c:close()
        headers["x-mq-bench-run"] = 4242
        local targets = {}
        for _, mq in ipairs(route.message_queues) do
            targets[#targets + 1] = { addr = s.grpc_addr, brokerName = mq.broker and mq.broker.name, queueId = mq.id }
        end
        local before = stored(s)
        local ticks = 0
        local st = assert(require("rmq.bench").produce({
            targets = targets, topic = TOPIC, size = 64, concurrency = 4, connections = 4, seconds = 3, rate = 200,
            grpc = true, headers = headers,
            tick = function()
                ticks = ticks + 1
                -- Free what is garbage, and take its memory for new strings.
                collectgarbage("collect")
                local junk = {}
                for i = 1, 2000 do
                    junk[i] = ("junk%d"):format(i)
                end
                assert(#junk[2000] > 0)
            end,
        }))
        assert.is_true(ticks > 0, "no tick ran")
        assert.is_true(st.ok > 0)
        assert.equal(0, st.failed)
        assert.equal(before + st.ok, stored(s))
    end)

    it("sends no faster than --rate, gRPC and remoting alike", function()
        for _, args in ipairs({ { "--grpc", "-n", s.grpc_addr }, { "--uniq-key", "-n", s.listen_addr } }) do
            local before = stored(s)
            local cmd = { "bench", "produce", "-t", TOPIC, "-s", "64", "-c", "16", "-d", "2", "--rate", "50" }
            for _, a in ipairs(args) do
                cmd[#cmd + 1] = a
            end
            -- A duration: the monotonic clock.
            local t0 = require("rmq.core").mono_ms()
            local code, out = cli(cmd)
            local wall = (require("rmq.core").mono_ms() - t0) / 1000
            assert.equal(0, code, out)
            local total = tonumber(out:match("%[Complete%] Send Total: (%d+)"))
            assert.truthy(total and total > 0, out)
            -- The generator's own clock runs inside the command's: at
            -- most 50 a second of it, and the first one.
            assert.is_true(total <= 50 * wall + 1, ("%d sends in %.1f s at --rate 50"):format(total, wall))
            assert.equal(before + total, stored(s))
        end
    end)

    it("says what went wrong: an unknown topic, nothing listening, options it does not take", function()
        local code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", "NoSuchGrpcTopic", "-d", "1" })
        assert.equal(1, code)
        assert.matches("QueryRoute", out)
        code, out = cli({ "bench", "produce", "--grpc", "-n", "127.0.0.1:1", "-t", TOPIC, "-d", "1" })
        assert.equal(1, code)
        assert.matches("cannot connect to 127.0.0.1:1", out, 1, true)
        code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--uniq-key" })
        assert.equal(1, code)
        assert.matches("no --serialize or --uniq-key", out, 1, true)
        code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--rate", "fast" })
        assert.equal(1, code)
        assert.matches("--rate N", out, 1, true)
    end)

    it("every send it counted is still there after a kill -9 (each answer waits for the commit)", function()
        local dir = server.tmpdir()
        local conf = { role = "standalone", namesrvListenPort = 0, workers = 2, brokerName = "broker-grpc",
                       grpcServerPort = 0, storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
                       mappedFileSizeCommitLog = 4 * 1024 * 1024 }
        local s3 = server.start(conf)
        local ok, err = pcall(function()
            gn.create_topic(s3, TOPIC)
            -- The topic's config is on disk before the kill (the main thread writes it).
            assert(server.eventually(function()
                local f = io.open(dir .. "/store/config/topics.json")
                local text = f and f:read("a") or ""
                if f then
                    f:close()
                end
                f = io.open(dir .. "/store/config/topics.json.journal")
                text = text .. (f and f:read("a") or "")
                if f then
                    f:close()
                end
                return text:find(TOPIC, 1, true) ~= nil
            end, 30000), "topics.json has no " .. TOPIC)
            -- Paced at 5,000 sends a second; then the kill.
            local code, out = cli({ "bench", "produce", "--grpc", "-n", s3.grpc_addr, "-t", TOPIC, "-s", "256",
                                    "-c", "32", "-d", "1", "--rate", "5000", "--json" })
            assert.equal(0, code, out)
            local acked = json_lines(out)[1].ok
            assert.is_true(acked > 0, out)
            s3:kill()
            s3 = server.start(conf)
            local n = stored(s3)
            assert.is_true(n >= acked, ("%d acknowledged, %d recovered"):format(acked, n))
        end)
        gn.stop(s3)
        assert(ok, err)
    end)

    it("ends on time when the server sends GOAWAY, counting the sends it refused as failed", function()
        -- 200 streams a second a connection: the bench's one connection is past it at once.
        local s2 = gn.start({ grpcMaxStreamsPerSecond = 200 }, { topics = { TOPIC } })
        local ok, err = pcall(function()
            local code, out = cli({ "bench", "produce", "--grpc", "-n", s2.grpc_addr, "-t", TOPIC, "-s", "64",
                                    "-c", "8", "--connections", "1", "-d", "2" })
            assert.equal(2, code, out)
            assert.matches("GOAWAY ENHANCE_YOUR_CALM", out, 1, true)
            local failed = tonumber(out:match("%[Complete%] Send Total: %d+ | .* | Send Failed: (%d+)"))
            assert.truthy(failed and failed > 0, out)
            -- and the server serves a new connection
            code, out = cli({ "send", "--grpc", "-n", s2.grpc_addr, "-t", TOPIC, "after" })
            assert.equal(0, code, out)
        end)
        gn.stop(s2)
        assert(ok, err)
    end)
end)

describe("rmq send/consume --grpc with TLS and ACL", function()
    local s, pem
    local ADMIN, ADMIN_SECRET, USER, USER_SECRET = "rmqadmin", "adminsecret1", "grpccli", "grpcclisecret"

    setup(function()
        local dir = server.tmpdir()
        local key
        pem, key = gn.make_cert(dir)
        local path = gn.acl_file(dir, { ADMIN, ADMIN_SECRET }, { USER, USER_SECRET }, { TOPIC .. "=PUB|SUB" })
        s = gn.start({ aclEnable = true, aclFile = path, accessKey = ADMIN, secretKey = ADMIN_SECRET,
                       ["tls.server.mode"] = "enforcing", ["tls.enable"] = true, ["tls.server.certPath"] = pem,
                       ["tls.server.keyPath"] = key })
        net.tls({ trustCertPath = pem, authServer = true })
        gn.create_topic(s, TOPIC, { ADMIN, ADMIN_SECRET })
        net.tls(false)
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("signs with --access-key/--secret-key over --tls; a wrong secret is refused UNAUTHENTICATED", function()
        local auth = { "--tls", "--tls-trust", pem, "--access-key", USER, "--secret-key", USER_SECRET }
        local function rmq(args)
            for _, a in ipairs(auth) do
                args[#args + 1] = a
            end
            return cli(args)
        end
        -- The group placed through rmq.client.grpc, signed and over TLS.
        net.tls({ trustCertPath = pem, authServer = true })
        place_group(s, "GrpcCliSecure", { credentials = { accessKey = USER, secretKey = USER_SECRET } })
        net.tls(false)
        local code, out = rmq({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--json", "secure-body" })
        assert.equal(0, code, out)
        assert.equal("SEND_OK", json_lines(out)[1].status)
        code, out = rmq({ "consume", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-g", "GrpcCliSecure", "-c", "1",
                          "--json" })
        assert.equal(0, code, out)
        assert.equal("secure-body", json_lines(out)[1].body)
        -- a wrong secret
        code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--tls", "--tls-trust", pem,
                                 "--access-key", USER, "--secret-key", "wrong-secret", "x" })
        assert.equal(1, code)
        assert.matches("gRPC status 16", out, 1, true)
        assert.matches("Check signature failed for accessKey=" .. USER, out, 1, true)
        -- plaintext to an enforcing TLS port
        code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "--access-key", USER,
                                 "--secret-key", USER_SECRET, "x" })
        assert.equal(1, code, out)
    end)

    it("benchmarks signed sends over TLS (bench produce --grpc); a wrong secret is refused", function()
        local code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-s", "64", "-c", "4",
                                "-d", "1", "--tls", "--tls-trust", pem, "--access-key", USER,
                                "--secret-key", USER_SECRET })
        assert.equal(0, code, out)
        local total = tonumber(out:match("%[Complete%] Send Total: (%d+)"))
        assert.truthy(total and total > 0, out)
        assert.matches("Send Failed: 0", out, 1, true)
        code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-s", "64", "-c", "4",
                          "-d", "1", "--tls", "--tls-trust", pem, "--access-key", USER,
                          "--secret-key", "wrong-secret" })
        assert.equal(1, code, out)
        assert.matches("Check signature failed for accessKey=" .. USER, out, 1, true)
    end)
end)
