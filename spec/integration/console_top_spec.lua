-- `rmq top -n NAMESRV`: after N sends to a one-queue topic and M consumed
-- by a group, one frame (--once, text and --json) shows the topic's N
-- messages and the group's lag N-M; the TPS of a frame is the messages
-- stored and committed between two snapshots over their time apart; a
-- NameServer that does not answer is one error line and exit 1.
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")
local env = require("support.console_env")
local api = require("rmq.console.api")
local top = require("rmq.console.top")

local RMQ = server.build .. "/rmq"

local function run(args)
    local p = io.popen(server.home_prefix() .. RMQ .. " " .. args .. " 2>&1; echo \"exit=$?\"")
    local out = p:read("a")
    p:close()
    return out:match("^(.-)exit=(%d+)%s*$")
end

local function find(list, pred)
    for _, x in ipairs(list) do
        if pred(x) then
            return x
        end
    end
end

describe("rmq top", function()
    local s
    local N, M = 6, 4

    setup(function()
        s = server.start({
            role = "standalone", workers = 2, brokerName = "broker-top", brokerClusterName = "TopCluster",
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
        }, { "namesrvListenPort=0" })
        env.one_queue_topic(s, "TopTopic")
        env.send(s, "TopTopic", N)
        env.consume(s, "TopGroup", "TopTopic", M)
    end)

    teardown(function()
        env.stop(s)
    end)

    it("prints one frame with --once --json: the topic's messages, the group's lag", function()
        local out, code = run("top -n " .. s.listen_addr .. " --once --json -i 200")
        assert.equal("0", code, out)
        local f = cjson.decode(out)
        assert.same({ "broker-top@" .. s.broker_addr }, f.brokers)
        local t = find(f.topics, function(x) return x.topic == "TopTopic" end)
        assert.same({ 1, N }, { t.queues, t.messages })
        local g = find(f.groups, function(x) return x.group == "TopGroup" and x.topic == "TopTopic" end)
        assert.equal(N - M, g.lag)
        -- System topics and groups only with --all.
        assert.is_nil(find(f.topics, function(x) return x.topic == "TBW102" or x.topic == "TopCluster" end))
        out = run("top -n " .. s.listen_addr .. " --once --json --all -i 200")
        assert.is_table(find(cjson.decode(out).topics, function(x) return x.topic == "TBW102" end))
    end)

    it("prints the same as a table for a terminal", function()
        local out, code = run("top -n " .. s.listen_addr .. " --once -i 200")
        assert.equal("0", code, out)
        assert.matches("rmq top  " .. s.listen_addr:gsub("%.", "%%."), out)
        assert.matches("\nTopTopic +1 +" .. N .. " ", out)
        assert.matches("\nTopGroup +TopTopic +" .. (N - M) .. " ", out)
    end)

    it("counts TPS in and out between two snapshots", function()
        local c = api.new({ timeout = 3000 })
        local a = assert(c:snapshot(s.broker_addr))
        env.send(s, "TopTopic", 5)
        env.commit(s, "TopGroup", "TopTopic", N + 5)
        net.sleep(20)
        local b = assert(c:snapshot(s.broker_addr))
        local f = top.frame({ [s.broker_addr] = a }, { [s.broker_addr] = b }, false)
        local secs = (b.t - a.t) / 1000
        local t = find(f.topics, function(x) return x.topic == "TopTopic" end)
        assert.near(5 / secs, t.tpsIn, 1e-6)
        local g = find(f.groups, function(x) return x.group == "TopGroup" end)
        -- Committed from M to N+5.
        assert.near((N + 5 - M) / secs, g.consumeTps, 1e-6)
        assert.near(g.consumeTps, t.tpsOut, 1e-6)
        assert.equal(0, g.lag)
    end)

    it("fails with one line when the NameServer does not answer, and checks its options", function()
        local out, code = run("top -n 127.0.0.1:1 --once")
        assert.equal("1", code)
        assert.matches("^rmq: top: 127%.0%.0%.1:1: ", out)
        assert.equal(1, select(2, out:gsub("\n", "")))
        out, code = run("top -n " .. s.listen_addr .. " -i 5 --once")
        assert.equal("2", code)
        assert.matches("at least 100", out)
        out, code = run("top -n " .. s.listen_addr .. " --json")
        assert.equal("2", code)
        assert.matches("needs %-%-once", out)
    end)
end)
