-- acl_client_spec: the project's client signing its requests (ACL 1.0,
-- protocol.md §8.2), what a server receives, and the refusals a broker
-- with aclEnable answers, as the user sees them.
local cjson = require("cjson")
local net = require("rmq.net")
local server = require("support.server")
local fixtures = require("support.fixtures")
local credentials = require("rmq.client.credentials")
local fx_it = fixtures.gate(it, pending)

-- The client-to-server frames of the fixture files named, in order.
local function requests(names)
    local out = {}
    for _, name in ipairs(names) do
        for _, row in ipairs(fixtures.frames(name .. ".jsonl")) do
            if row.dir == "c2s" then
                out[#out + 1] = row
            end
        end
    end
    return out
end

local CPP_FRAMES = { "send-cpp", "heartbeat-cpp", "pull-cpp" }

-- A code no RocketMQ peer sends: the echo server answers it with the
-- extFields it received (JSON) and the body length in the remark.
local ECHO = 7201

local ECHO_CONF = ([[
local cjson = require("cjson")
local function echo(_, cmd)
    return { code = 0, body = cjson.encode(cmd.ext), remark = tostring(cmd.body_len) }
end
return { role = "namesrv", workers = 1, processors = { [%d] = echo } }
]]):format(ECHO)

describe("client signing", function()
    local echo

    setup(function()
        echo = server.start({ source = ECHO_CONF })
    end)

    teardown(function()
        if echo then
            echo:stop()
        end
    end)

    after_each(function()
        net.credentials(nil)
    end)

    local function received(cmd)
        cmd.code = cmd.code or ECHO
        local r = assert(net.call(echo.addr, cmd, 5000))
        assert.equal(0, r.code, r.remark)
        return cjson.decode(r.body), tonumber(r.remark)
    end

    fx_it("signs a request as the Java client (mqadmin) signed the captured one", function()
        -- mqadmin signs with conf/tools.yml's rocketmq2 / 12345678.
        local creds = credentials.of({ accessKey = "rocketmq2", secretKey = "12345678" })
        local n = 0
        for _, row in ipairs(requests({ "update-and-create-topic", "cluster-info", "route-rocketmq-header" })) do
            local ext = row.decoded.extFields
            if type(ext) == "table" and ext.AccessKey == "rocketmq2" then
                local mine = {}
                for k, v in pairs(ext) do
                    if k ~= "AccessKey" and k ~= "Signature" then
                        mine[k] = v
                    end
                end
                local got = received({ ext = mine, credentials = creds, serialize = row.decoded.serializeType })
                assert.equal("rocketmq2", got.AccessKey)
                assert.equal(ext.Signature, got.Signature, row.file)
                n = n + 1
            end
        end
        assert.equal(4, n)
    end)

    fx_it("signs numbers, booleans and the body as the cpp client signed its SEND_MESSAGE_V2", function()
        -- rocketmq-client-cpp without credentials: AccessKey "", an empty
        -- secret, OnsChannel and the header's JSON numbers signed as text.
        local row = fixtures.frames("send-cpp.jsonl")[1]
        local ext = row.decoded.extFields
        local mine, numbers = {}, 0
        for k, v in pairs(ext) do
            if k ~= "AccessKey" and k ~= "Signature" then
                -- as the Lua caller would have them: integers, booleans
                if type(v) == "number" then
                    v = assert(math.tointeger(v))
                    numbers = numbers + 1
                end
                mine[k] = v
            end
        end
        assert.is_true(numbers > 3)
        local body = assert(require("rmq.codec").decode(row.raw)).body
        local got, blen = received({ ext = mine, body = body,
                                     credentials = { accessKey = "", secretKey = "" } })
        assert.equal(#body, blen)
        assert.equal(ext.Signature, got.Signature)
    end)

    it("sends nothing extra without credentials", function()
        local got = received({ ext = { topic = "T" } })
        assert.same({ topic = "T" }, got)
    end)

    it("replaces AccessKey, SecurityToken and Signature already in the fields", function()
        local creds = { accessKey = "ak", secretKey = "sk", securityToken = "tok" }
        local got = received({ ext = { topic = "T", AccessKey = "forged", Signature = "forged" },
                               body = "payload", credentials = creds })
        assert.equal("ak", got.AccessKey)
        assert.equal("tok", got.SecurityToken)
        -- sorted keys: AccessKey, SecurityToken, topic; then the body
        assert.equal(require("rmq.acl").hmac("sk", "aktokTpayload"), got.Signature)
    end)

    it("signs every request of the state with its default credentials, unless told not to", function()
        net.credentials({ accessKey = "ak", secretKey = "sk" })
        local got = received({ ext = { topic = "T" } })
        assert.equal("ak", got.AccessKey)
        assert.equal(require("rmq.acl").hmac("sk", "akT"), got.Signature)
        -- a request's own credentials win; false sends it unsigned
        got = received({ ext = { topic = "T" }, credentials = { accessKey = "other", secretKey = "x" } })
        assert.equal("other", got.AccessKey)
        got = received({ ext = { topic = "T" }, credentials = false })
        assert.same({ topic = "T" }, got)
        -- conn:call and oneway go through the same encoder
        local c = assert(net.connect(echo.addr))
        local r = assert(c:call({ code = ECHO, ext = { topic = "T" } }, 5000))
        assert.equal("ak", cjson.decode(r.body).AccessKey)
        c:close()
        net.credentials(nil)
        assert.same({ topic = "T" }, (received({ ext = { topic = "T" } })))
    end)

    it("leaves _UNIQUE_KEY_QUERY out of the signature, as the 4.9.8 broker checks it", function()
        local got = received({ ext = { topic = "T", key = "k", _UNIQUE_KEY_QUERY = "true" },
                               credentials = { accessKey = "ak", secretKey = "sk" } })
        assert.equal("true", got._UNIQUE_KEY_QUERY)
        assert.equal(require("rmq.acl").hmac("sk", "akkT"), got.Signature)
    end)

    it("refuses malformed credentials with a clear error", function()
        local ok, err = pcall(net.call, echo.addr, { code = ECHO, credentials = { accessKey = "ak" } })
        assert.is_false(ok)
        assert.matches("credentials: secretKey must be a string", err)
        ok, err = pcall(net.call, echo.addr, { code = ECHO, credentials = "ak:sk" })
        assert.is_false(ok)
        assert.matches("field 'credentials' must be a table or false", err)
        assert.has_error(function() credentials.of({ accessKey = "ak" }) end,
            "credentials: accessKey given without secretKey")
        assert.has_error(function() credentials.of({ secretKey = "sk", accessKey = "" }) end,
            "credentials: accessKey must be a non-empty string")
        assert.is_nil(credentials.of({}))
        -- the echo server is still there
        assert.same({ topic = "T" }, (received({ ext = { topic = "T" } })))
    end)
end)


-- {{{ Against brokers with aclEnable

local admin = require("rmq.admin")
local codes = require("rmq.codes")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local env = require("support.broker_consume_env")

local TOPIC, GROUP = "FxAclTopic", "FxAclGroup"
local USER = { accessKey = "RocketMQ", secretKey = "12345678" }
local ADMIN = { accessKey = "rocketmq2", secretKey = "12345678" }
local WRONG = { accessKey = "RocketMQ", secretKey = "1234567" }

-- 4.9.8's distribution/conf/plain_acl.yml, cut to one user account that
-- may use TOPIC and GROUP (and send replies: SEND_REPLY_MESSAGE needs PUB
-- on the cluster's reply topic, as in 5.x), and one admin account.
local function write_acl(white)
    return require("support.acl_yml").write({
        white = { white or "10.10.103.*" },
        accounts = {
            { accessKey = USER.accessKey, secretKey = USER.secretKey, defaultTopicPerm = "DENY",
              defaultGroupPerm = "SUB", groupPerms = { GROUP .. "=SUB" },
              topicPerms = { TOPIC .. "=PUB|SUB", env.CLUSTER .. "_REPLY_TOPIC=PUB" } },
            { accessKey = ADMIN.accessKey, secretKey = ADMIN.secretKey, admin = true },
        },
    })
end

local function with_creds(t, creds)
    local out = {}
    for k, v in pairs(t) do
        out[k] = v
    end
    for k, v in pairs(creds or {}) do
        out[k] = v
    end
    return out
end

-- `rmq ARGS` with the environment's credentials unset (or set by
-- prefix, "K=V ..."): exit code and output (stdout and stderr).
local function rmq(args, prefix)
    local p = io.popen(server.home_prefix() .. ("env -u RMQ_ACCESS_KEY -u RMQ_SECRET_KEY %s %s/rmq %s 2>&1"):format(prefix or "",
        server.build, args))
    local out = p:read("a")
    local _, _, code = p:close()
    return code, out
end

local function cli_creds(c)
    return ("--access-key %s --secret-key %s"):format(c.accessKey, c.secretKey)
end

describe("the client against a broker with aclEnable", function()
    local e

    setup(function()
        e = env.start({ aclEnable = true, aclFile = write_acl(), traceTopicEnable = true })
    end)

    teardown(function()
        if e then
            e:stop()
        end
    end)

    local function ctx(creds)
        return with_creds({ namesrvAddr = e.ns_addr, timeout = 3000 }, creds)
    end

    it("creates a topic with an admin account; refused without one, as 4.9.8 words it", function()
        local o = { clusterName = env.CLUSTER, topic = TOPIC, readQueueNums = "4", writeQueueNums = "4" }
        local _, err = admin.run("updateTopic", o, ctx())
        assert.truthy(err)
        assert.equal(1, err.exit)
        assert.matches("refused UPDATE_AND_CREATE_TOPIC: SYSTEM_ERROR %(code 1%): "
            .. "org%.apache%.rocketmq%.acl%.common%.AclException: No accessKey is configured", tostring(err))
        _, err = admin.run("updateTopic", o, ctx(USER))
        assert.matches("Need admin permission for request code=17, but accessKey=RocketMQ is not", tostring(err))
        _, err = admin.run("updateTopic", o, ctx({ accessKey = "rocketmq2", secretKey = "x" }))
        assert.matches("Check signature failed for accessKey=rocketmq2", tostring(err))
        local r = assert(admin.run("updateTopic", o, ctx(ADMIN)))
        assert.truthy(r)
        assert.truthy(server.eventually(function() return e:lookup(TOPIC) end, 5000))
    end)

    it("sends with credentials; no, wrong or unknown ones are the user's error, not a traceback", function()
        local p = producer.new(with_creds({ namesrvAddr = e.ns_addr, producerGroup = "FxAclProducer" }, USER))
        for i = 1, 4 do
            local r, err = p:send({ topic = TOPIC, body = "acl " .. i, tags = "TagA", keys = "k" .. i })
            assert.truthy(r, err)
            assert.equal("SEND_OK", r.status)
        end
        local cases = {
            { nil, "No accessKey is configured" },
            { WRONG, "Check signature failed for accessKey=RocketMQ" },
            { { accessKey = "nobody", secretKey = "x" }, "No acl config for nobody" },
        }
        for _, case in ipairs(cases) do
            local q = producer.new(with_creds({ namesrvAddr = e.ns_addr, producerGroup = "FxAclProducer",
                                                retryTimesWhenSendFailed = 0 }, case[1]))
            local r, err, code = q:send({ topic = TOPIC, body = "refused" })
            assert.is_nil(r)
            assert.equal(codes.response.SYSTEM_ERROR, code)
            assert.matches("AclException: " .. case[2], err, 1, true)
            assert.not_matches("traceback", err)
        end
        -- a topic the account has no permission for
        local r, err = p:send({ topic = "FxAclOther", body = "x" })
        assert.is_nil(r)
        assert.matches("No default permission for topic:FxAclOther", err, 1, true)
    end)

    it("consumes with credentials (heartbeat, pull, offset commit); a wrong secret fails start()", function()
        local got = {}
        local c = consumer.new(with_creds({ namesrvAddr = e.ns_addr, consumerGroup = GROUP,
                                            consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET",
                                            persistConsumerOffsetInterval = 200 }, USER))
        c:subscribe(TOPIC, "*")
        c:on_message(function(msgs)
            for _, m in ipairs(msgs) do
                got[m.body] = true
            end
            return "CONSUME_SUCCESS"
        end)
        c:start()
        assert.truthy(server.eventually(function()
            return got["acl 1"] and got["acl 2"] and got["acl 3"] and got["acl 4"]
        end, 10000))
        c:shutdown()
        -- the commits were taken: the group's offsets are at the end
        local stats = assert(admin.run("consumerProgress", { consumerGroup = GROUP }, ctx(ADMIN)))
        assert.truthy(stats)
        local bad = consumer.new(with_creds({ namesrvAddr = e.ns_addr, consumerGroup = GROUP }, WRONG))
        bad:subscribe(TOPIC, "*")
        bad:on_message(function() return "CONSUME_SUCCESS" end)
        local ok, err = pcall(bad.start, bad)
        assert.is_false(ok)
        assert.matches("^heartbeat refused by 127%.0%.0%.1:%d+: code 1 .*Check signature failed for accessKey=RocketMQ",
            err)
        -- a pull without credentials gets the refusal as an error
        local anon = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = GROUP })
        local res, perr, pcode = anon:pull({ topic = TOPIC, brokerName = env.BROKER, queueId = 0 }, 0, 8)
        assert.is_nil(res)
        assert.equal(codes.response.SYSTEM_ERROR, pcode)
        assert.matches("No accessKey is configured", perr, 1, true)
    end)

    it("changes a broker config with an admin account only", function()
        local o = { brokerAddr = e.addr, key = "slaveReadEnable", value = "true" }
        local _, err = admin.run("updateBrokerConfig", o, ctx(USER))
        assert.matches("Need admin permission for request code=25", tostring(err), 1, true)
        assert(admin.run("updateBrokerConfig", o, ctx(ADMIN)))
        local conf = assert(admin.run("getBrokerConfig", { brokerAddr = e.addr }, ctx(ADMIN)))
        assert.matches("slaveReadEnable", require("cjson").encode(conf))
    end)

    it("takes --access-key/--secret-key (or RMQ_ACCESS_KEY/RMQ_SECRET_KEY) on rmq send, consume and admin", function()
        local ns = "-n " .. e.ns_addr
        local code, out = rmq(("send %s -t %s %s 'from the cli'"):format(ns, TOPIC, cli_creds(USER)))
        assert.equal(0, code, out)
        assert.matches("^SEND_OK msgId=", out)
        code, out = rmq(("send %s -t %s 'from env'"):format(ns, TOPIC),
            "RMQ_ACCESS_KEY=RocketMQ RMQ_SECRET_KEY=12345678")
        assert.equal(0, code, out)
        -- the flags win over the environment
        code, out = rmq(("send %s -t %s %s 'flags win'"):format(ns, TOPIC, cli_creds(USER)),
            "RMQ_ACCESS_KEY=RocketMQ RMQ_SECRET_KEY=wrong")
        assert.equal(0, code, out)
        code, out = rmq(("send %s -t %s %s x"):format(ns, TOPIC, cli_creds(WRONG)))
        assert.equal(1, code)
        assert.matches("^rmq: send failed %(code 1%): .*Check signature failed for accessKey=RocketMQ", out)
        assert.not_matches("traceback", out)
        code, out = rmq(("send %s -t %s x"):format(ns, TOPIC))
        assert.equal(1, code)
        assert.matches("No accessKey is configured", out, 1, true)
        -- half a pair is a usage error, before anything is sent
        code, out = rmq(("send %s -t %s --access-key RocketMQ x"):format(ns, TOPIC))
        assert.equal(2, code)
        assert.equal("rmq: send: credentials: --access-key given without --secret-key\n", out)
        code, out = rmq(("send %s -t %s x"):format(ns, TOPIC), "RMQ_SECRET_KEY=12345678")
        assert.equal(2, code)
        assert.matches("RMQ_SECRET_KEY given without RMQ_ACCESS_KEY", out, 1, true)

        code, out = rmq(("consume %s -t %s -g %s -c 2 --json %s"):format(ns, TOPIC, "FxAclCliGroup", cli_creds(USER)))
        assert.equal(0, code, out)
        local n = 0
        for line in out:gmatch("[^\n]+") do
            assert.equal(TOPIC, require("cjson").decode(line).topic)
            n = n + 1
        end
        assert.equal(2, n)
        code, out = rmq(("consume %s -t %s -g %s -c 1 %s"):format(ns, TOPIC, "FxAclCliGroup", cli_creds(WRONG)))
        assert.equal(1, code)
        assert.matches("rmq: consume: heartbeat refused by .*Check signature failed", out)

        code, out = rmq(("admin updateTopic %s -c %s -t FxAclCliTopic %s"):format(ns, env.CLUSTER, cli_creds(ADMIN)))
        assert.equal(0, code, out)
        assert.matches("create topic to .* success", out)
        code, out = rmq(("admin updateTopic %s -c %s -t FxAclCliTopic --access-key=RocketMQ --secret-key=12345678")
            :format(ns, env.CLUSTER))
        assert.equal(1, code)
        assert.matches("Need admin permission for request code=17", out, 1, true)
        code, out = rmq(("admin getBrokerConfig %s -b %s"):format(ns, e.addr),
            "RMQ_ACCESS_KEY=rocketmq2 RMQ_SECRET_KEY=12345678")
        assert.equal(0, code, out)
        -- the help lists them
        code, out = rmq("send --help")
        assert.equal(0, code)
        assert.matches("--access-key VALUE", out, 1, true)
    end)

    it("signs the transactional producer, the trace producer and the trace query", function()
        local code, out = rmq(("send -n %s -t %s --transaction commit -g FxAclTxGroup %s 'in a transaction'")
            :format(e.ns_addr, TOPIC, cli_creds(USER)))
        assert.equal(0, code, out)
        assert.matches("^SEND_OK .* transaction=COMMIT", out)
        local p = producer.new(with_creds({ namesrvAddr = e.ns_addr, producerGroup = "FxAclTraced",
                                            enableMsgTrace = true }, USER))
        local r = assert(p:send({ topic = TOPIC, body = "traced" }))
        assert.truthy(require("rmq.client.trace").flush(p, 5000))
        -- the trace topic takes PUB from any valid account (4.9.8's rule);
        -- reading it is a SUB the user account has not: the admin reads
        local trace = require("rmq.client.trace")
        local recs = server.eventually(function()
            local t = trace.query({ e.ns_addr }, r.msgId, { credentials = ADMIN })
            return t and #t > 0 and t
        end, 5000)
        assert.truthy(recs)
        assert.equal("Pub", recs[1].type)
        local none, err = trace.query({ e.ns_addr }, r.msgId, { credentials = USER })
        assert.is_true(none == nil or #none == 0, err)
        code, out = rmq(("trace -n %s %s %s"):format(e.ns_addr, cli_creds(ADMIN), r.msgId))
        assert.equal(0, code, out)
        assert.matches("Pub", out)
    end)

    it("signs request-reply: the requester's channel heartbeat, the responder's pull and reply", function()
        local request = require("rmq.client.request")
        e:route(env.CLUSTER .. "_REPLY_TOPIC", 1)   -- as request_reply_spec
        local requester = producer.new(with_creds({ namesrvAddr = e.ns_addr, producerGroup = "FxAclRequester" }, USER))
        local responder = producer.new(with_creds({ namesrvAddr = e.ns_addr, producerGroup = "FxAclResponder" }, USER))
        local c = consumer.new(with_creds({ namesrvAddr = e.ns_addr, consumerGroup = GROUP }, USER))
        local from, running, stopped = {}, true, false
        for q = 0, 3 do
            from[q] = assert(c:max_offset({ topic = TOPIC, brokerName = env.BROKER, queueId = q }))
        end
        net.spawn(function()
            while running do
                for q = 0, 3 do
                    local r = running and c:pull({ topic = TOPIC, brokerName = env.BROKER, queueId = q }, from[q], 32)
                    if r then
                        from[q] = r.nextBeginOffset or from[q]
                        for _, m in ipairs(r.messages) do
                            local rep = request.create_reply(m, "pong to " .. m.body)
                            if rep then
                                assert(responder:send_reply(rep))
                            end
                        end
                    end
                end
                net.sleep(5)
            end
            stopped = true
        end)
        local reply, err = requester:request({ topic = TOPIC, body = "ping" }, 5000)
        running = false
        assert.truthy(server.eventually(function() return stopped end, 3000))
        assert.truthy(reply, err)
        assert.equal("pong to ping", reply.body)
    end)

    it("takes the credentials on rmq broker-status, top, topic-route, cluster-list and repl", function()
        local ns = "-n " .. e.ns_addr
        local code, out = rmq(("broker-status %s %s"):format(ns, cli_creds(ADMIN)))
        assert.equal(0, code, out)
        assert.matches("MASTER", out)
        local _, bare = rmq(("broker-status %s"):format(ns))
        assert.matches("no answer", bare, 1, true)
        code, out = rmq(("top %s --once --json -i 100 %s"):format(ns, cli_creds(ADMIN)))
        assert.equal(0, code, out)
        assert.matches(TOPIC, out, 1, true)
        code, out = rmq(("topic-route %s %s %s"):format(ns, TOPIC, cli_creds(USER)))
        assert.equal(0, code, out)
        code, out = rmq(("cluster-list %s %s"):format(ns, cli_creds(USER)))
        assert.equal(0, code, out)
        code, out = rmq(("repl %s %s -e 'return get_broker_config{brokerAddr = %q}'"):format(ns, cli_creds(ADMIN),
            e.addr))
        assert.equal(0, code, out)
        assert.matches("slaveReadEnable", out, 1, true)
        code, out = rmq(("repl %s -e 'return get_broker_config{brokerAddr = %q}'"):format(ns, e.addr))
        assert.equal(1, code, out)
        assert.matches("No accessKey is configured", out, 1, true)
    end)

    it("signs the bench's load generator in C (rmq bench produce)", function()
        local cmd = ("bench produce -n %s -t %s -s 128 -c 4 -d 1 --json"):format(e.ns_addr, TOPIC)
        local code, out = rmq(cmd .. " " .. cli_creds(USER))
        assert.equal(0, code, out)
        local s = require("cjson").decode(out:match("\n(%b{})\n"))
        assert.is_true(s.ok > 0)
        assert.equal(0, s.failed)
        code, out = rmq(cmd .. " " .. cli_creds(WRONG))
        assert.equal(2, code, out)
        s = require("cjson").decode(out:match("\n(%b{})\n"))
        assert.equal(0, s.ok)
        assert.is_true(s.failed > 0)
    end)

    it("signs the request load generator's frame (rmq.bench.requests) once, in C", function()
        local bench = require("rmq.bench")
        local frame = require("rmq.codec").encode({ code = codes.request.GET_MAX_OFFSET, opaque = 1,
                                                    ext = { topic = TOPIC, queueId = "0" } })
        local opts = { addr = e.addr, frame = frame, connections = 2, seconds = 0.3, warmup_ms = 0 }
        local unsigned = assert(bench.requests(opts))
        assert.equal(0, unsigned.ok)
        assert.is_true(unsigned.errors > 0)
        opts.credentials = USER
        local signed = assert(bench.requests(opts))
        assert.is_true(signed.ok > 0)
        assert.equal(0, signed.errors)
    end)

    fx_it("answers the cpp client's captured frames (AccessKey \"\") as 4.9.8 does", function()
        -- A 4.9.8 broker looks the empty AccessKey up as an account:
        -- "No acl config for " (checked against a real 4.9.8 broker; an
        -- absent AccessKey would be "No accessKey is configured").
        local n = 0
        for _, row in ipairs(requests(CPP_FRAMES)) do
            local c = assert(net.connect(e.addr))
            local r = assert(c:call_raw(row.raw, 5000))
            c:close()
            assert.equal(codes.response.SYSTEM_ERROR, r.code, row.file)
            assert.matches("^org%.apache%.rocketmq%.acl%.common%.AclException: No acl config for , ", r.remark)
            n = n + 1
        end
        assert.equal(4, n)
    end)
end)

describe("a broker whose plain_acl.yml white-lists 127.0.0.1", function()
    fx_it("takes the cpp client's frames (AccessKey \"\", no account) as a broker without ACL does", function()
        local white = env.start({ aclEnable = true, aclFile = write_acl("127.0.0.1") })
        local plain = env.start({})
        local ok, err = pcall(function()
            for _, row in ipairs(requests(CPP_FRAMES)) do
                local got = {}
                for i, addr in ipairs({ white.addr, plain.addr }) do
                    local c = assert(net.connect(addr))
                    got[i] = assert(c:call_raw(row.raw, 5000))
                    c:close()
                end
                assert.not_equal(codes.response.SYSTEM_ERROR, got[1].code, got[1].remark)
                assert.equal(got[2].code, got[1].code, row.file)
            end
        end)
        white:stop()
        plain:stop()
        assert(ok, err)
    end)
end)

-- }}}

-- {{{ The broker's own requests

describe("the web console of a broker with aclEnable", function()
    it("signs its requests with consoleAccessKey's account, never the broker's credentials", function()
        local http = require("support.http")
        local acl = write_acl()
        local conf = with_creds({ aclEnable = true, aclFile = acl, metricsExporterType = "PROM",
                                  metricsPromExporterPort = 0 }, ADMIN)
        local own = env.start(with_creds(conf, { consoleAccessKey = USER.accessKey,
                                                 consoleSecretKey = USER.secretKey }))
        local unsigned = env.start(conf)
        local ok, err = pcall(function()
            local status, t = http.json(own.broker.metrics_addr, "/api/topics")
            assert.equal(200, status, require("cjson").encode(t))
            assert.is_table(t.topics)
            -- The broker signs its own requests as the admin; the console does not.
            status, t = http.json(unsigned.broker.metrics_addr, "/api/topics")
            assert.is_true(status >= 400)
            assert.matches("No accessKey is configured", t.error, 1, true)
        end)
        own:stop()
        unsigned:stop()
        assert(ok, err)
    end)
end)

describe("a broker's own credentials (accessKey / secretKey in its conf)", function()
    local ns, acl_path

    setup(function()
        acl_path = write_acl()
        local dir = server.tmpdir()
        ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = dir .. "/kv.json",
                            aclEnable = true, aclFile = acl_path })
    end)

    teardown(function()
        if ns then
            ns:stop()
        end
    end)

    local function broker(name, extra)
        local conf = { role = "broker", workers = 1, brokerName = name, brokerClusterName = "FxAclCluster",
                       storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 4 * 1024 * 1024,
                       namesrvAddr = ns.addr, registerNameServerPeriod = 10000 }
        for k, v in pairs(extra or {}) do
            conf[k] = v
        end
        return server.start(conf)
    end

    -- The brokers the NameServer lists, asked with the admin account.
    local function listed()
        local info = assert(require("rmq.admin.remote").cluster_info(
            require("rmq.admin.remote").context(ns.addr, 3000, ADMIN)))
        local out = {}
        for name in pairs(info.brokerAddrTable or {}) do
            out[#out + 1] = name
        end
        table.sort(out)
        return table.concat(out, ",")
    end

    it("registers with a NameServer that has aclEnable only when signed by an admin account", function()
        local anon = broker("broker-anon")
        local user = broker("broker-user", USER)
        local adm = broker("broker-admin", ADMIN)
        local ok, err = pcall(function()
            assert.equal("broker-admin", server.eventually(function()
                local l = listed()
                return l ~= "" and l
            end, 5000))
            -- the refusals are in the brokers' logs, as 4.9.8 words them
            assert.truthy(server.eventually(function()
                return anon:log():find("No accessKey is configured", 1, true)
            end, 5000), anon:log())
            assert.truthy(server.eventually(function()
                return user:log():find("Need admin permission for request code=103, but accessKey=RocketMQ is not",
                    1, true)
            end, 5000), user:log())
            -- a signed UNREGISTER_BROKER at the admin broker's stop
            assert.equal(0, adm:stop())
            assert.matches("unregistered broker broker%-admin", adm:log())
            assert.equal("", server.eventually(function()
                local l = listed()
                return l == "" and l
            end, 5000))
        end)
        anon:stop()
        user:stop()
        adm:stop()
        assert(ok, err)
    end)

    it("refuses half a pair at conf check", function()
        local dir = server.tmpdir()
        local path = dir .. "/broker.lua"
        local f = assert(io.open(path, "w"))
        f:write(('return { role = "broker", brokerName = "b", storePathRootDir = %q, accessKey = "RocketMQ" }')
            :format(dir .. "/store"))
        f:close()
        local p = io.popen(server.home_prefix() .. ("%s -t %s 2>&1"):format(server.binary, path))
        local out = p:read("a")
        local _, _, status = p:close()
        assert.is_true(status ~= 0, out)
        assert.matches("key 'accessKey' needs secretKey too", out, 1, true)
    end)
end)

describe("a slave of a master with aclEnable", function()
    it("syncs the master's tables when it has credentials, and logs the refusal when it has none", function()
        local e = env.start({ aclEnable = true, aclFile = write_acl() })
        local slaves = {}
        local ok, err = pcall(function()
            assert(admin.run("updateTopic", { clusterName = env.CLUSTER, topic = "FxAclSynced" },
                             { namesrvAddr = e.ns_addr, accessKey = ADMIN.accessKey, secretKey = ADMIN.secretKey }))
            for i, creds in ipairs({ USER, false }) do
                local conf = { role = "broker", workers = 1, brokerName = env.BROKER,
                               brokerClusterName = env.CLUSTER, brokerRole = "SLAVE", brokerId = i,
                               storePathRootDir = server.tmpdir() .. "/store",
                               mappedFileSizeCommitLog = 16 * 1024 * 1024, namesrvAddr = e.ns_addr,
                               slaveSynchronizePeriodMillis = 500, haListenPort = 0 }
                if creds then
                    conf.accessKey, conf.secretKey = creds.accessKey, creds.secretKey
                end
                slaves[i] = server.start(conf)
            end
            assert.truthy(server.eventually(function()
                return slaves[1]:log():find("slave sync: %d+ topic configs from master") ~= nil
            end, 8000), slaves[1]:log())
            -- the signed slave serves the master's topic config
            local r = assert(net.call(slaves[1].addr, { code = codes.request.GET_ALL_TOPIC_CONFIG,
                                                        credentials = USER }, 3000))
            assert.equal(0, r.code, r.remark)
            assert.truthy(r.body:find("FxAclSynced", 1, true))
            assert.truthy(server.eventually(function()
                return slaves[2]:log():find("slave sync: topic configs from master [^\n]*No accessKey is configured")
                    ~= nil
            end, 8000), slaves[2]:log())
        end)
        for _, s in pairs(slaves) do
            s:stop()
        end
        e:stop()
        assert(ok, err)
    end)
end)

-- }}}
