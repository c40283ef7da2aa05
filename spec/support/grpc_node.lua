-- The Node.js scripts of spec/interop/grpc_node (RocketMQ 5's SDK from
-- npm, rocketmq-client-nodejs, installed by scripts/test.sh; and node's
-- own http2 module for hostile peers) against a standalone rmq with
-- grpcServerPort.
--
--   local gn = require("support.grpc_node")
--   gn.check()                      raises unless node and node_modules are here
--   local s = gn.start(extra_conf [, opts])  a standalone with grpcServerPort = 0
--       opts.node: gn.check() first (the spec runs the Node scripts)
--       opts.metrics: Prometheus /metrics on a port of its own (s.metrics_addr)
--       opts.topics: each created (gn.create_topic, signed as opts.signer)
--   local c = gn.start_proxy(opts)  cluster mode: a NameServer, brokers, a proxy
--       (role proxy, grpcServerPort = 0) in front of them
--       opts.brokers: their brokerNames (default { "proxy-b1" })
--       opts.broker, opts.proxy: extra conf for each broker, for the proxy
--       c.ns, c.brokers[i], c.px; c.servers: all of them in start order
--       (a case appends what it starts; gn.stop_all stops the list)
--   gn.stop(s)                      a teardown's: s (if started) stops, exit 0
--   gn.stop_all(servers)            the same for each, the last started first
--   gn.create_topic(s, topic [, {ak, sk}])
--       4 queues, as mqadmin updateTopic (signed as ak when given), on a
--       standalone or a broker
--   local pem, key = gn.make_cert(dir)
--       a self-signed certificate for 127.0.0.1 (the name grpc-js checks)
--   local path = gn.acl_file(dir, {ak, sk}, {ak, sk}, {"TOPIC=PUB|SUB", ...} [, {ak, sk}])
--                     (admin, a user with those topics and SUB on groups, and
--                     optionally an account that may do nothing)
--   gn.signed_block(method, ak, sk, client_id): a raw call's HEADERS block
--                     (support.h2raw) signed as ak, as rmq.client.grpc signs
--       a plain_acl.yml: an admin account, and a user who may use only
--       the topics listed and subscribe with any group
--   local status, res, why = gn.run(s, "produce.js", { TOPIC = ... }, "name" [, timeout_ms])
--       status: exit status (nil: killed); res: the script's last JSON
--       line, decoded; why: its output and the server's log
--   local finish = gn.spawn(s, script, vars, name, timeout_ms)
--       the same, started: finish(wait_ms) waits (then kills), returns
--       status, res, why
--   gn.check_simple(res, why, topic, count)
--       simple_consumer.js's result: count sent, each received once
--       as sent, the lease changed, all acked, one redelivered (attempt 2)
--   gn.check_orphan(res, why, topic)
--       tx_check.js's result: the checker saw the half message as sent
--   gn.consume_all(namesrv_addr, topic, group, want) -> messages
--       what rmq's remoting push consumer reads of topic from the first
--       offset, once it has want of them (or after 30 s)
local acl = require("rmq.acl")
-- busted's assert (luassert): the specs' own is not this module's global.
local assert = require("luassert")
local net = require("rmq.net")
local codes = require("rmq.codes")
local node = require("support.node")
local server = require("support.server")
local consumer = require("rmq.client.consumer")

local M = {}

M.DIR = "spec/interop/grpc_node"

function M.check()
    node.check(M.DIR, "rocketmq-client-nodejs")
end

-- conf with extra's keys over it (conf itself, changed).
local function merged(conf, extra)
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return conf
end

-- A store of its own, small commit log files (4 MiB: a spec writes little).
local function store_conf(conf)
    local dir = server.tmpdir()
    conf.storePathRootDir = dir .. "/store"
    conf.kvConfigPath = dir .. "/kv.json"
    conf.mappedFileSizeCommitLog = 4 * 1024 * 1024
    return conf
end

-- fn(started), where started(s) records s and returns it; if fn raises,
-- what it started is killed before the error goes on: a setup that
-- fails returns nothing its teardown could stop.
local function all_or_none(fn)
    local servers = {}
    local ok, err = pcall(fn, function(s)
        servers[#servers + 1] = s
        return s
    end)
    if not ok then
        for i = #servers, 1, -1 do
            servers[i]:kill()
        end
        error(err, 0)
    end
    return servers
end

function M.start(extra, opts)
    opts = opts or {}
    if opts.node then
        M.check()
    end
    local conf = store_conf({ role = "standalone", namesrvListenPort = 0, workers = 2,
                              brokerName = "broker-grpc", grpcServerPort = 0 })
    if opts.metrics then
        conf.metricsExporterType = "PROM"
        conf.metricsPromExporterPort = 0
    end
    local s
    all_or_none(function(started)
        s = started(server.start(merged(conf, extra)))
        assert(s.grpc_addr, "READY has no grpc=HOST:PORT: " .. tostring(s.ready_line))
        if opts.metrics then
            assert(s.metrics_addr, "READY has no metrics address: " .. tostring(s.ready_line))
        end
        for _, topic in ipairs(opts.topics or {}) do
            M.create_topic(s, topic, opts.signer)
        end
    end)
    return s
end

function M.start_proxy(opts)
    opts = opts or {}
    M.check()
    local c = { brokers = {} }
    c.servers = all_or_none(function(started)
        c.ns = started(server.start({ role = "namesrv" }))
        for i, name in ipairs(opts.brokers or { "proxy-b1" }) do
            c.brokers[i] = started(server.start(merged(store_conf({ role = "broker", brokerName = name,
                namesrvAddr = c.ns.addr, workers = 1 }), opts.broker)))
        end
        c.px = started(server.start(merged({ role = "proxy", namesrvAddr = c.ns.addr, grpcServerPort = 0,
                                             workers = 1 }, opts.proxy)))
    end)
    return c
end

function M.stop(s)
    if s then
        -- 0: a clean exit (under --asan: no leak either)
        assert.equal(0, s:stop())
    end
end

function M.stop_all(servers)
    for i = #servers, 1, -1 do
        M.stop(servers[i])
    end
end

function M.create_topic(s, topic, signer)
    local ext = { topic = topic, defaultTopic = "TBW102", readQueueNums = "4", writeQueueNums = "4",
                  perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" }
    if signer then
        ext.AccessKey = signer[1]
        ext.Signature = acl.sign(ext, nil, signer[2])
    end
    -- A standalone's broker listens on its port "broker"; a broker's is its first.
    local r = assert(net.call(s.broker_addr or s.addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = ext },
                              5000))
    assert(r.code == 0, r.remark)
end

function M.make_cert(dir)
    assert(os.execute(("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        .. " -keyout server.key -out server.pem -days 1 -subj '/CN=127.0.0.1'"
        .. " -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1"):format(dir)), "openssl req failed")
    return dir .. "/server.pem", dir .. "/server.key"
end

function M.acl_file(dir, admin, user, perms, nobody)
    local lines = {}
    for _, p in ipairs(perms) do
        lines[#lines + 1] = "  - " .. p
    end
    local path = dir .. "/plain_acl.yml"
    local f = assert(io.open(path, "wb"))
    f:write(([[
globalWhiteRemoteAddresses:
accounts:
- accessKey: %s
  secretKey: %s
  admin: true
- accessKey: %s
  secretKey: %s
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
%s
%s]]):format(admin[1], admin[2], user[1], user[2], table.concat(lines, "\n"),
             nobody and ("- accessKey: %s\n  secretKey: %s\n  admin: false\n  defaultTopicPerm: DENY\n"
                         .. "  defaultGroupPerm: DENY\n"):format(nobody[1], nobody[2]) or ""))
    f:close()
    return path
end

function M.spawn(s, script, vars, name, timeout_ms)
    local out, err = s.dir .. "/" .. name .. ".out", s.dir .. "/" .. name .. ".err"
    local envs = { "HOME=" .. s.dir, "ENDPOINT=" .. s.grpc_addr, "TIMEOUT_MS=" .. timeout_ms }
    for k, v in pairs(vars or {}) do
        envs[#envs + 1] = k .. "=" .. tostring(v)
    end
    local finish = node.spawn(M.DIR, script, envs, out, err)
    return function(wait_ms)
        local status, res, text, etext = finish(wait_ms)
        local why = ("exit %s\nstdout: %s\nstderr: %s\nserver: %s"):format(tostring(status), text:sub(-3000),
            etext:sub(-3000), s:log():sub(-3000))
        return status, res, why
    end
end

function M.run(s, script, vars, name, timeout_ms)
    timeout_ms = timeout_ms or 60000
    return M.spawn(s, script, vars, name, timeout_ms)(timeout_ms + 30000)
end

function M.check_simple(res, why, topic, count)
    assert.equal(count, #res.sent, why)
    assert.equal(count, #res.received, why)
    local ids = {}
    for _, id in ipairs(res.sent) do
        ids[id] = true
    end
    for _, m in ipairs(res.received) do
        assert.truthy(ids[m.messageId], why)
        ids[m.messageId] = nil
        local n = math.tointeger(tonumber(m.n))
        assert.equal("simple-" .. n, m.body)
        assert.equal("Simple", m.tag)
        assert.same({ "s-" .. n }, m.keys)
        assert.equal(1, m.attempt)
        assert.equal(topic, m.topic)
    end
    assert.is_nil(next(ids), "a message sent was not received")
    assert.is_true(res.changed.differs, why)
    assert.equal(count, res.acked)
    -- Not acknowledged: redelivered after the lease, attempt 2.
    assert.equal(1, res.redelivery.first, why)
    assert.equal(2, res.redelivery.second, why)
end

function M.check_orphan(res, why, topic)
    assert.truthy(res and res.seen, "the checker was never asked: " .. why)
    assert.equal(res.sent.messageId, res.seen.messageId)
    assert.equal(topic, res.seen.topic)
    assert.equal("Orphan", res.seen.tag)
    assert.same({ "orphan-1" }, res.seen.keys)
    assert.equal("orphan-body", res.seen.body)
    assert.equal("green", res.seen.color)
end

function M.consume_all(namesrv_addr, topic, group, want)
    local got = {}
    local c = consumer.new({ namesrvAddr = namesrv_addr, consumerGroup = group,
                             consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET" })
    c:subscribe(topic, "*")
    c:on_message(function(msgs)
        for _, m in ipairs(msgs) do
            got[#got + 1] = m
        end
        return "CONSUME_SUCCESS"
    end)
    c:start()
    server.eventually(function() return #got >= want end, 30000)
    c:shutdown()
    return got
end

-- A raw call's HEADERS block (support.h2raw) signed as ak, as
-- rmq.client.grpc signs its calls: for specs that mix accounts on one
-- connection.
function M.signed_block(method, ak, sk, client_id)
    local cgrpc = require("rmq.grpc")
    local h2 = require("support.h2raw")
    local date = os.date("!%Y%m%dT%H%M%SZ")
    return h2.headers_block(method, {
        ["x-mq-client-id"] = client_id, ["x-mq-language"] = "JAVA", ["x-mq-protocol"] = "v2",
        ["x-mq-date-time"] = date,
        authorization = ("MQv2-HMAC-SHA1 Credential=%s, SignedHeaders=x-mq-date-time, Signature=%s")
            :format(ak, cgrpc.hmac_sha1_hex(sk, date)),
    })
end

return M
