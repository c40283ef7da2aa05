-- The web console's JSON (/api/* on the metrics endpoint of a standalone):
-- after N sends to a one-queue topic and M messages consumed (pulled and
-- committed) by a group, /api/topics shows N messages, /api/groups and
-- /api/group lag N-M (0 once everything is committed), the sampler's
-- history carries it for the sparklines, a message is found by key and by
-- id, POST /api/send writes only with consoleWriteEnable, and a NameServer
-- has no console.
local server = require("support.server")
local http = require("support.http")
local env = require("support.console_env")

local function standalone(extra)
    local conf = {
        role = "standalone", workers = 2, brokerName = "broker-c", brokerClusterName = "ConsoleCluster",
        storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
        autoCreateTopicEnable = true,
        metricsExporterType = "PROM", metricsPromExporterPort = 0, consoleSampleSeconds = 1,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return server.start(conf, { "namesrvListenPort=0" })
end

local function find(list, field, value)
    for _, x in ipairs(list or {}) do
        if x[field] == value then
            return x
        end
    end
    return nil
end

describe("console /api", function()
    local s
    local N, M = 7, 3
    local sent

    setup(function()
        s = standalone({ consoleWriteEnable = true })
        env.one_queue_topic(s, "ConsoleT")
        sent = env.send(s, "ConsoleT", N, function(i)
            return "KEYS\1order-" .. i .. "\2WAIT\1true\2TAGS\1TagA"
        end)
        env.consume(s, "ConsoleG", "ConsoleT", M)
        -- The figures are sampled (consoleSampleSeconds): wait, with a
        -- generous bound, for a sample taken after the sends and commits.
        assert(server.eventually(function()
            local st, t = http.json(s.metrics_addr, "/api/topics")
            local st2, g = http.json(s.metrics_addr, "/api/groups")
            local tr = st == 200 and find(t.topics, "topic", "ConsoleT")
            local gr = st2 == 200 and find(g.groups, "group", "ConsoleG")
            return tr and tr.messages == N and gr and gr.lag == N - M
        end, 60000), "the console never showed ConsoleT's sends and ConsoleG's commits")
    end)

    teardown(function()
        env.stop(s)
    end)

    it("lists the topic with its N messages and one queue", function()
        local status, t = http.json(s.metrics_addr, "/api/topics")
        assert.equal(200, status, t)
        local row = find(t.topics, "topic", "ConsoleT")
        assert.is_table(row, "ConsoleT not listed")
        assert.equal(N, row.messages)
        assert.equal(1, row.queues)
        assert.is_false(row.system)
        assert.is_true(find(t.topics, "topic", "TBW102").system)
    end)

    it("shows the group's lag N-M, per queue too, and its history", function()
        local status, g = http.json(s.metrics_addr, "/api/groups")
        assert.equal(200, status, g)
        local row = find(g.groups, "group", "ConsoleG")
        assert.is_table(row, "ConsoleG not listed")
        assert.equal(N - M, row.lag)
        assert.equal(0, row.members)
        local d
        status, d = http.json(s.metrics_addr, "/api/group?name=ConsoleG")
        assert.equal(200, status, d)
        assert.equal(1, #d.queues)
        local q = d.queues[1]
        assert.same({ "ConsoleT", 0, N, M, N - M },
                    { q.topic, q.queueId, q.brokerOffset, q.consumerOffset, q.lag })
        -- The sampler (every second) records it for the sparkline.
        assert.truthy(server.eventually(function()
            local _, dd = http.json(s.metrics_addr, "/api/group?name=ConsoleG")
            local h = dd.queues[1].lagHistory
            return #h >= 2 and h[#h] == N - M
        end, 60000))
        status = http.json(s.metrics_addr, "/api/group?name=NoSuchGroup")
        assert.equal(404, status)
        status = http.json(s.metrics_addr, "/api/group")
        assert.equal(400, status)
    end)

    it("sees the lag fall to 0 once the group commits everything", function()
        env.commit(s, "ConsoleG", "ConsoleT", N)
        assert.truthy(server.eventually(function()
            local _, g = http.json(s.metrics_addr, "/api/groups")
            local row = find(g.groups, "group", "ConsoleG")
            return row and row.lag == 0
        end, 60000))
    end)

    it("shows the broker in the cluster: role, version, store size", function()
        local status, c = http.json(s.metrics_addr, "/api/cluster")
        assert.equal(200, status, c)
        local b = find(c.brokers, "brokerName", "broker-c")
        assert.is_table(b, "broker-c not listed")
        assert.equal("ConsoleCluster", b.cluster)
        assert.equal("V4_9_8", b.version)
        assert.equal("ASYNC_MASTER", b.role)
        assert.equal(s.broker_addr, b.addr)
        assert.is_true(b.storeBytes > 0)
        -- The retention check measures the disk (0 until its first run).
        assert.is_number(b.diskRatio)
        assert.is_true(b.diskRatio >= 0 and b.diskRatio <= 1)
    end)

    it("finds a message by key, by offset message id and by message id with its topic", function()
        local status, r = http.json(s.metrics_addr, "/api/message?key=order-2&topic=ConsoleT")
        assert.equal(200, status, r)
        assert.equal(1, #r.messages)
        assert.equal("ConsoleT-2", r.messages[1].body)
        assert.equal("TagA", r.messages[1].tags)
        local off_id = r.messages[1].offsetMsgId
        status, r = http.json(s.metrics_addr, "/api/message?id=" .. off_id)
        assert.equal(200, status, r)
        assert.equal("ConsoleT-2", r.messages[1].body)
        status, r = http.json(s.metrics_addr, "/api/message?id=" .. sent[5] .. "&topic=ConsoleT")
        assert.equal(200, status, r)
        -- SEND_MESSAGE_V2 without UNIQ_KEY: the reply's msgId is the offset id.
        assert.equal("ConsoleT-5", r.messages[1].body)
        status, r = http.json(s.metrics_addr, "/api/message?id=not-hex")
        assert.equal(400, status)
        assert.matches("32 hex digits", r.error)
        status = http.json(s.metrics_addr, "/api/message")
        assert.equal(400, status)
    end)

    it("sends a test message with POST /api/send, and checks what it is given", function()
        local status, r = http.json(s.metrics_addr, "/api/send", "POST",
                                    '{"topic":"ConsoleT","body":"from the console","keys":"console-1"}')
        assert.equal(200, status, r)
        assert.equal("SEND_OK", r.status)
        assert.truthy(server.eventually(function()
            local _, t = http.json(s.metrics_addr, "/api/topics")
            local row = t and find(t.topics, "topic", "ConsoleT")
            return row and row.messages == N + 1
        end, 60000))
        local _, m = http.json(s.metrics_addr, "/api/message?key=console-1&topic=ConsoleT")
        assert.equal("from the console", m.messages[1].body)
        for _, bad in ipairs({ "not json", '{"topic":"Bad Topic!","body":"x"}', '{"topic":"ConsoleT"}',
                               '{"topic":"ConsoleT","body":5}', "[]" }) do
            status, r = http.json(s.metrics_addr, "/api/send", "POST", bad)
            assert.equal(400, status, bad)
            assert.is_string(r.error)
        end
        status = http.json(s.metrics_addr, "/api/send")
        assert.equal(405, status)
        -- What a page of another site can send without a preflight (a form,
        -- text/plain) is refused, and nothing is stored.
        for _, ct in ipairs({ "text/plain", "application/x-www-form-urlencoded", "application/jsonp", false }) do
            status = http.request(s.metrics_addr, "POST", "/api/send",
                                  '{"topic":"ConsoleT","body":"cross-site","keys":"console-x"}',
                                  ct and { ["Content-Type"] = ct } or nil)
            assert.equal(415, status, tostring(ct))
        end
        local _, x = http.json(s.metrics_addr, "/api/message?key=console-x&topic=ConsoleT")
        assert.equal(0, #(x.messages or {}))
        status = http.request(s.metrics_addr, "OPTIONS", "/api/send")
        assert.equal(405, status)
    end)

    it("serves the page and its files, and 404 with a hint elsewhere", function()
        local status, body, head = http.request(s.metrics_addr, "GET", "/")
        assert.equal(200, status)
        assert.matches("Content%-Type: text/html", head)
        assert.matches("<title>rmq console</title>", body, 1, true)
        status, body = http.request(s.metrics_addr, "GET", "/console.js")
        assert.equal(200, status)
        assert.matches("/api/cluster", body, 1, true)
        status = http.request(s.metrics_addr, "GET", "/console.css")
        assert.equal(200, status)
        local t
        status, t = http.json(s.metrics_addr, "/api/nothing")
        assert.equal(404, status)
        assert.matches("/api/cluster", t.error, 1, true)
        status = http.request(s.metrics_addr, "GET", "/etc/passwd")
        assert.equal(404, status)
        status = http.request(s.metrics_addr, "DELETE", "/api/topics")
        assert.equal(405, status)
    end)
end)

describe("console writes", function()
    it("are refused unless consoleWriteEnable = true", function()
        local s = standalone()
        local status, r = http.json(s.metrics_addr, "/api/send", "POST", '{"topic":"ConsoleT","body":"x"}')
        assert.equal(403, status)
        assert.matches("consoleWriteEnable", r.error)
        local _, t = http.json(s.metrics_addr, "/api/topics")
        assert.is_nil(find(t.topics, "topic", "ConsoleT"))
        env.stop(s)
    end)
end)

describe("a NameServer's metrics endpoint", function()
    it("has no console", function()
        local s = server.start({ role = "namesrv", metricsExporterType = "PROM", metricsPromExporterPort = 0 })
        local status, body = http.request(s.metrics_addr, "GET", "/api/cluster")
        assert.equal(404, status)
        assert.matches("served by brokers", body)
        status = http.request(s.metrics_addr, "GET", "/")
        assert.equal(404, status)
        status = http.request(s.metrics_addr, "GET", "/metrics")
        assert.equal(200, status)
        env.stop(s)
    end)
end)
