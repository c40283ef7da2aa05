-- The Prometheus endpoint (metricsExporterType = PROM): after N sends and
-- M pulled messages, GET /metrics shows exactly those counts for the
-- topic and the topic+group, summed over two workers, with the native
-- processors and with every request in Lua; promtool accepts the output;
-- bad HTTP (garbage, huge headers, a request that never ends, too many
-- connections) is closed while the remoting port keeps answering.
local net = require("rmq.net")
local socket = require("socket")
local server = require("support.server")
local rq = require("support.requests")
local codes = require("rmq.codes")
local children = require("support.children")

local req, R = codes.request, codes.response

local function broker(native, extra)
    local conf = {
        role = "broker", workers = 2, brokerName = "broker-m", brokerClusterName = "MetricsCluster",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 1024 * 1024,
        namesrvAddr = "127.0.0.1:1",
        nativeProcessors = native,
        metricsExporterType = "PROM", metricsPromExporterPort = 0,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return server.start(conf)
end

local function send_req(topic, queue, body)
    return rq.send({ group = "MGroup", topic = topic, qid = queue, born = 1796034593124, tags = "TagA",
                     body = body })
end

local function pull_req(group, topic, queue, offset, max)
    return rq.pull({ group = group, topic = topic, qid = queue, offset = offset, max = max, expr = "TAG" })
end

-- One HTTP exchange on a fresh connection: the raw request out, then
-- everything until the server closes (or `wait` seconds pass).
local http_raw = require("support.http").raw

local function scrape(s)
    local out = http_raw(s.metrics_addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    local status = tonumber(out:match("^HTTP/1%.%d (%d+)"))
    assert.equal(200, status, out:sub(1, 200))
    return out:match("\r\n\r\n(.*)$")
end

-- The value of one series, the labels given as a Lua pattern fragment.
local value = require("support.prom").value

local function promtool()
    local p = io.popen("command -v promtool 2>/dev/null")
    local path = p:read("l")
    p:close()
    return path
end

-- promtool check metrics on text; true when it is not installed.
local function promtool_accepts(s, text, name)
    if not promtool() then
        return true, "promtool not installed"
    end
    local path = s.dir .. "/" .. name
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    local p = io.popen(("promtool check metrics < %q 2>&1"):format(path))
    local said = p:read("a")
    return p:close(), said
end

for _, native in ipairs({ true, false }) do
    describe("metrics endpoint (nativeProcessors = " .. tostring(native) .. ")", function()
        local s, c1, c2

        setup(function()
            s = broker(native)
            -- Round-robin over the workers: one connection each.
            c1, c2 = assert(net.connect(s.addr)), assert(net.connect(s.addr))
        end)

        teardown(function()
            c1:close()
            c2:close()
            local status, signal = s:stop()
            assert(status == 0 and (signal or 0) == 0,
                   ("exit status %s, signal %s\n%s"):format(tostring(status), tostring(signal), s:log()))
        end)

        it("is announced on the READY line, bound to loopback", function()
            assert.matches(" metrics=127%.0%.0%.1:%d+ ", s.ready_line)
        end)

        it("counts exactly the messages sent and pulled, per topic and group", function()
            local N, M = 7, 3
            for i = 1, N do
                local c = i % 2 == 0 and c2 or c1
                local r = assert(c:call(send_req("MetricsT", 0, ("body-%02d"):format(i))))
                assert.equal(R.SUCCESS, r.code, r.remark)
            end
            -- M messages in two pulls, from both workers.
            local r1 = assert(c1:call(pull_req("MetricsG", "MetricsT", 0, 0, 2)))
            assert.equal(R.SUCCESS, r1.code, r1.remark)
            local r2 = assert(c2:call(pull_req("MetricsG", "MetricsT", 0, 2, M - 2)))
            assert.equal(R.SUCCESS, r2.code, r2.remark)
            -- A pull that finds nothing counts no message.
            local r3 = assert(c1:call(pull_req("MetricsG", "MetricsT", 0, N, 4)))
            assert.equal(R.PULL_NOT_FOUND, r3.code, r3.remark)

            local text = scrape(s)
            local base = 'cluster="MetricsCluster",node_type="broker",node_id="broker-m"'
            local t = base .. ',topic="MetricsT"'
            local tg = t .. ',consumer_group="MetricsG"'
            assert.equal(N, value(text, "rocketmq_messages_in_total", t), text)
            assert.equal(M, value(text, "rocketmq_messages_out_total", tg), text)
            -- Records of one size: bytes out are M/N of bytes in.
            local bin = value(text, "rocketmq_throughput_in_total", t)
            local bout = value(text, "rocketmq_throughput_out_total", tg)
            assert.is_true(bin > N * #"body-01", text)
            assert.equal(bin // N * M, bout)
            -- Every request answered, by code.
            local send = ('request_code="%d",response_code="%d"'):format(req.SEND_MESSAGE_V2, R.SUCCESS)
            assert.equal(N, value(text, "rmq_requests_total", send), text)
            assert.equal(N, value(text, "rocketmq_rpc_latency_count", send), text)
            assert.equal(N, value(text, "rocketmq_rpc_latency_bucket", send .. ',le="+Inf"'), text)
            local pull = ('request_code="%d",response_code="%d"'):format(req.PULL_MESSAGE, R.SUCCESS)
            assert.equal(2, value(text, "rmq_requests_total", pull), text)
            local none = ('request_code="%d",response_code="%d"'):format(req.PULL_MESSAGE, R.PULL_NOT_FOUND)
            assert.equal(1, value(text, "rmq_requests_total", none), text)

            if not promtool() then
                pending("promtool not installed (Debian package prometheus): output not linted")
                return
            end
            assert.is_true(promtool_accepts(s, text, "metrics.txt"))
        end)

        it("shows the consumer lag, N sent minus M committed, per group and queue, 0 at the end", function()
            -- 6 messages: 4 in queue 0, 2 in queue 1.
            for i = 1, 6 do
                local r = assert(c1:call(send_req("LagT", i <= 4 and 0 or 1, "m" .. i)))
                assert.equal(R.SUCCESS, r.code, r.remark)
            end
            local function commit(queue, offset)
                local r = assert(c2:call({ code = req.UPDATE_CONSUMER_OFFSET,
                                           ext = { consumerGroup = "LagG", topic = "LagT", queueId = queue,
                                                   commitOffset = offset } }))
                assert.equal(R.SUCCESS, r.code, r.remark)
            end
            local base = 'cluster="MetricsCluster",node_type="broker",node_id="broker-m"'
            local tg = base .. ',topic="LagT",consumer_group="LagG"'
            local text = scrape(s)
            assert.is_nil(value(text, "rocketmq_consumer_lag_messages", tg), text)
            -- M = 3 + 1: an UPDATE_CONSUMER_OFFSET and a pull that commits.
            commit(0, 3)
            local p = pull_req("LagG", "LagT", 1, 1, 1)
            p.ext.sysFlag = 0x1 | 0x4   -- FLAG_COMMIT_OFFSET | FLAG_SUBSCRIPTION
            p.ext.commitOffset = 1
            local r = assert(c1:call(p))
            assert.equal(R.SUCCESS, r.code, r.remark)
            text = scrape(s)
            assert.equal(6 - 4, value(text, "rocketmq_consumer_lag_messages", tg), text)
            assert.equal(1, value(text, "rmq_consumer_lag_messages", tg .. ',queue_id="0"'), text)
            assert.equal(1, value(text, "rmq_consumer_lag_messages", tg .. ',queue_id="1"'), text)
            commit(0, 4)
            commit(1, 2)
            text = scrape(s)
            assert.equal(0, value(text, "rocketmq_consumer_lag_messages", tg), text)
            assert.equal(0, value(text, "rmq_consumer_lag_messages", tg .. ',queue_id="0"'), text)
            assert.equal(0, value(text, "rmq_consumer_lag_messages", tg .. ',queue_id="1"'), text)
            assert.is_true(promtool_accepts(s, text, "metrics-lag.txt"))
        end)
    end)
end

describe("metrics endpoint, bad HTTP", function()
    local s, c

    setup(function()
        s = broker(true, { metricsHttpTimeoutSeconds = 1, metricsHttpMaxConnections = 4,
                           metricsHttpMaxHeaderBytes = 4096 })
        c = assert(net.connect(s.addr))
    end)

    teardown(function()
        c:close()
        local status, signal = s:stop()
        assert(status == 0 and (signal or 0) == 0,
               ("exit status %s, signal %s\n%s"):format(tostring(status), tostring(signal), s:log()))
    end)

    local function remoting_answers()
        local r = assert(c:call({ code = req.GET_MAX_OFFSET, ext = { topic = "NoSuchT", queueId = 0 } }))
        assert.is_number(r.code)
    end

    it("answers other paths 404 and other methods 405", function()
        -- (/ is the web console: console_api_spec.lua)
        local out = http_raw(s.metrics_addr, "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert.matches("^HTTP/1%.1 404", out)
        out = http_raw(s.metrics_addr, "DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert.matches("^HTTP/1%.1 405", out)
    end)

    it("closes a malformed request", function()
        -- libmicrohttpd closes a request line it cannot parse, with a 400
        -- when it has got as far as a method and a URI.
        for _, bad in ipairs({ "GARBAGE\r\n\r\n", "GET /metrics HTTP/9\r\n\r\n",
                               "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n" }) do
            local out, closed = http_raw(s.metrics_addr, bad, 5)
            assert.is_true(closed, bad)
            assert.is_true(out == "" or out:match("^HTTP/1%.1 4%d%d") ~= nil, out)
        end
        remoting_answers()
    end)

    it("closes a request with headers over metricsHttpMaxHeaderBytes", function()
        local big = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " .. string.rep("a", 20000) .. "\r\n\r\n"
        local out, closed = http_raw(s.metrics_addr, big, 5)
        assert.is_true(closed)
        assert.matches("^HTTP/1%.1 4%d%d", out)
        remoting_answers()
    end)

    it("closes a request that never ends after metricsHttpTimeoutSeconds", function()
        local t0 = socket.gettime()
        local out, closed = http_raw(s.metrics_addr, "GET /metr", 6)
        assert.is_true(closed, "still open after 6 s")
        assert.equal("", out)
        assert.is_true(socket.gettime() - t0 < 4)
        remoting_answers()
    end)

    it("serves at most metricsHttpMaxConnections at once, and again once they close", function()
        local host, port = s.metrics_addr:match("^(.*):(%d+)$")
        local idle = {}
        for i = 1, 4 do
            idle[i] = assert(socket.tcp())
            assert(idle[i]:connect(host, tonumber(port)))
        end
        -- The fifth is accepted by the kernel and closed by the server.
        local _, closed = http_raw(s.metrics_addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 3)
        assert.is_true(closed)
        remoting_answers()
        for _, k in ipairs(idle) do
            k:close()
        end
        local ok
        for _ = 1, 50 do
            local out = http_raw(s.metrics_addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if out:match("^HTTP/1%.1 200") then
                ok = true
                break
            end
            socket.sleep(0.1)
        end
        assert.is_true(ok)
    end)
end)

describe("metrics endpoint, label sets past metricsMaxLabelSets", function()
    it("counts them in one overflow series", function()
        local s = broker(true, { workers = 1, metricsMaxLabelSets = 2 })
        local c = assert(net.connect(s.addr))
        for i = 1, 4 do
            for _ = 1, i do
                local r = assert(c:call(send_req("OverT" .. i, 0, "x")))
                assert.equal(R.SUCCESS, r.code, r.remark)
            end
        end
        local text = scrape(s)
        c:close()
        s:stop()
        assert.equal(1, value(text, "rocketmq_messages_in_total", 'topic="OverT1"'), text)
        assert.equal(2, value(text, "rocketmq_messages_in_total", 'topic="OverT2"'), text)
        assert.is_nil(value(text, "rocketmq_messages_in_total", 'topic="OverT3"'), text)
        assert.equal(3 + 4, value(text, "rocketmq_messages_in_total", 'topic="overflow"'), text)
    end)
end)

describe("metrics endpoint, off", function()
    it("is off unless metricsExporterType = PROM", function()
        local s = server.start({ role = "broker", brokerName = "broker-off", workers = 1,
                                 storePathRootDir = server.tmpdir() .. "/store",
                                 mappedFileSizeCommitLog = 1024 * 1024, namesrvAddr = "127.0.0.1:1" })
        local line = s.ready_line
        s:stop()
        assert.is_nil(line:match("metrics="))
    end)
end)

-- Debian's Prometheus server scrapes /metrics every second and answers
-- rocketmq_messages_in_total for the topic through its HTTP API.
describe("metrics endpoint, scraped by a real Prometheus", function()
    local PROMETHEUS = "/usr/bin/prometheus"

    local function free_port()
        -- The kernel picks a free loopback port; Prometheus then binds it
        -- (it prints no port of its own when given :0).
        local t = assert(socket.bind("127.0.0.1", 0))
        local _, port = t:getsockname()
        t:close()
        return tonumber(port)
    end

    it("returns the topic's rocketmq_messages_in_total", function()
        local f = io.open(PROMETHEUS, "rb")
        if not f then
            pending(PROMETHEUS .. " is absent (Debian package prometheus): not scraped by a real server")
            return
        end
        f:close()
        local s = broker(true, { workers = 1 })
        local c = assert(net.connect(s.addr))
        local N = 5
        for i = 1, N do
            local r = assert(c:call(send_req("PromT", 0, "p" .. i)))
            assert.equal(R.SUCCESS, r.code, r.remark)
        end
        local dir = server.tmpdir()
        local conf = dir .. "/prometheus.yml"
        local cf = assert(io.open(conf, "w"))
        cf:write(("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n" ..
                  "scrape_configs:\n  - job_name: rmq\n    static_configs:\n" ..
                  "      - targets: ['%s']\n"):format(s.metrics_addr))
        cf:close()
        local port = free_port()
        local p = assert(children.spawn({
            file = PROMETHEUS,
            args = { "--config.file=" .. conf, "--storage.tsdb.path=" .. dir .. "/tsdb",
                     "--web.listen-address=127.0.0.1:" .. port, "--log.level=warn" },
            stdout = dir .. "/prometheus.out", stderr = dir .. "/prometheus.err",
            env = server.env_with_home(dir),
        }))
        local got, last
        local t0 = socket.gettime()
        while socket.gettime() - t0 < 30 and not p.exited do
            local ok, out = pcall(http_raw, "127.0.0.1:" .. port,
                                  "GET /api/v1/query?query=rocketmq_messages_in_total HTTP/1.1\r\n" ..
                                  "Host: x\r\nConnection: close\r\n\r\n", 2)
            last = ok and out or last
            for metric, v in (ok and out or ""):gmatch('{"metric":(%b{}),"value":%[([^%]]*)%]}') do
                if metric:find('"topic":"PromT"', 1, true) then
                    got = tonumber(v:match('"([%d%.]+)"$'))
                end
            end
            if got then
                break
            end
            net.sleep(250)
        end
        local exited = p.exited
        p:kill(15)
        p:wait(10000)
        c:close()
        s:stop()
        assert.is_false(exited, "prometheus exited:\n" .. server.read_file(dir .. "/prometheus.err"))
        assert.equal(N, got, tostring(last) .. "\n" .. server.read_file(dir .. "/prometheus.err"))
    end)
end)
