-- `rmq admin` (mqadmin's commands) against real processes: a NameServer
-- and two brokers of one cluster.  Each command's effect is checked, not
-- just its exit code: through another admin command, a raw request, or a
-- producer's sends.
local cjson = require("cjson")
local net = require("rmq.net")
local core = require("rmq.core")
local server = require("support.server")
local producer = require("rmq.client.producer")
local fixtures = require("support.fixtures")
local admin = require("rmq.admin")

local fx_it = fixtures.gate(it, pending)

local run = server.rmq

-- stdout alone (the JSON), and the exit code.
local function run_stdout(args)
    local p = io.popen(server.home_prefix() .. server.build .. "/rmq " .. args .. " 2>/dev/null")
    local out = p:read("a")
    local _, _, code = p:close()
    return code, out
end

local function json_of(out)
    local ok, v = pcall(cjson.decode, out)
    assert(ok, "not JSON: " .. out)
    return v
end

-- The route's queue data by broker name.
local function queues(ns, topic)
    local code, out = run(("admin topicRoute -n %s -t %s --json"):format(ns, topic))
    assert.equal(0, code, out)
    local by = {}
    for _, qd in ipairs(json_of(out).queueDatas) do
        by[qd.brokerName] = qd
    end
    return by
end

describe("rmq admin", function()
    local ns_srv, a, b, ns

    setup(function()
        ns_srv = server.start({ role = "namesrv", kvConfigPath = server.tmpdir() .. "/kv.json" })
        ns = ns_srv.addr
        local function broker(name)
            return server.start({
                role = "broker", brokerName = name, brokerClusterName = "DefaultCluster",
                storePathRootDir = server.tmpdir() .. "/store-" .. name,
                mappedFileSizeCommitLog = 1024 * 1024, namesrvAddr = ns,
            })
        end
        a, b = broker("broker-a"), broker("broker-b")
        assert(server.eventually(function()
            local code, out = run(("admin clusterList -n %s --json"):format(ns))
            return code == 0 and #json_of(out) == 2
        end, 5000), "both brokers registered")
    end)

    teardown(function()
        for _, s in ipairs({ a, b, ns_srv }) do
            s:stop()
        end
    end)

    describe("framework", function()
        it("lists its commands and each command's options", function()
            local code, out = run("admin")
            assert.equal(2, code)   -- no command: usage, on stderr
            assert.matches("^usage: rmq admin COMMAND", out)
            code, out = run("admin help")
            assert.equal(0, code, out)
            for _, name in ipairs({ "clusterList", "brokerStatus", "topicList", "topicRoute", "topicStatus",
                                    "topicClusterList", "updateTopic", "deleteTopic", "updateTopicPerm",
                                    "updateOrderConf", "allocateMQ", "getBrokerConfig", "updateBrokerConfig",
                                    "getNamesrvConfig", "updateNamesrvConfig", "updateKvConfig",
                                    "deleteKvConfig", "wipeWritePerm", "addWritePerm", "cleanExpiredCQ",
                                    "cleanUnusedTopic", "deleteExpiredCommitLog", "statsAll", "clusterRT",
                                    "exportMetadata", "exportConfigs", "decodeMessageId" }) do
                assert.matches("\n  " .. name .. " ", out, 1, true)
            end
            code, out = run("admin updateTopic -h")
            assert.equal(0, code, out)
            assert.matches("%-b,%-%-brokerAddr <brokerAddr>", out)
            assert.matches("%-t,%-%-topic <topic>%s+topic name %(required%)", out)
            assert.matches("%-n,%-%-namesrvAddr", out)
            assert.matches("%-%-json", out)
            -- rmq help names the admin command too
            code, out = run("help")
            assert.equal(0, code)
            assert.matches("admin", out)
        end)

        it("exits 2 on a usage error, in one line", function()
            local code, out = run("admin frobnicate")
            assert.equal(2, code)
            assert.matches("^rmq admin: unknown command 'frobnicate'", out)
            code, out = run("admin topicRoute -n " .. ns)
            assert.equal(2, code)
            assert.matches("^rmq admin topicRoute: Missing required option: t\n", out)
            code, out = run("admin topicRoute -n " .. ns .. " -t T --bogus")
            assert.equal(2, code)
            assert.matches("Unrecognized option: %-%-bogus", out)
            code, out = run("admin updateTopic -n " .. ns .. " -t T")
            assert.equal(2, code)
            assert.matches("one of %-b brokerAddr or %-c clusterName is required", out)
            code, out = run("admin updateTopic -n " .. ns .. " -c DefaultCluster -t T -r many")
            assert.equal(2, code)
            assert.matches("readQueueNums must be an integer", out)
        end)

        it("exits 3 when no server answers and 1 when one refuses, naming it and the code", function()
            local code, out = run("admin clusterList -n 127.0.0.1:1")
            assert.equal(3, code)
            assert.matches("^rmq admin clusterList: 127%.0%.0%.1:1: [^\n]+\n$", out)
            code, out = run("admin topicRoute -n " .. ns .. " -t NoSuchTopicHere")
            assert.equal(1, code)
            assert.matches("^rmq admin topicRoute: " .. ns:gsub("%.", "%%.")
                .. " refused GET_ROUTEINFO_BY_TOPIC: TOPIC_NOT_EXIST %(code 17%)", out)
            assert.equal(1, select(2, out:gsub("\n", "")))   -- one line
            assert.not_matches("traceback", out)
            assert.not_matches("%.lua:", out)
            -- --json: the error as JSON on stdout too
            code, out = run_stdout("admin topicRoute -n " .. ns .. " -t NoSuchTopicHere --json")
            assert.equal(1, code)
            local e = json_of(out:match("^[^\n]+"))
            assert.equal(17, e.code)
            assert.equal(ns, e.server)
        end)

        it("takes mqadmin's option spellings: -tVALUE, --topic VALUE, --topic=VALUE", function()
            for _, t in ipairs({ "-tTBW102", "--topic TBW102", "--topic=TBW102", "-t TBW102" }) do
                local code, out = run(("admin topicRoute -n %s %s -l"):format(ns, t))
                assert.equal(0, code, t .. ": " .. out)
                assert.matches("#ClusterName%s+#BrokerName", out)
            end
        end)
    end)

    describe("requests", function()
        -- What the admin functions put on the wire, seen by wrapping
        -- net.call (the request still goes to the real servers).
        local function sent_by(name, o)
            local seen = {}
            local real = net.call
            net.call = function(addr, cmd, timeout)
                seen[#seen + 1] = { addr = addr, cmd = cmd }
                return real(addr, cmd, timeout)
            end
            local ok, res, err = pcall(admin.run, name, o, { namesrvAddr = ns })
            net.call = real
            assert(ok, res)
            assert(res, err and tostring(err))
            return seen
        end

        -- A captured mqadmin request's code and fields, less its ACL signature.
        local function mqadmin_request(file)
            for _, f in ipairs(fixtures.frames(file)) do
                if f.dir == "c2s" and f.client == "java" then
                    local ext = {}
                    for k, v in pairs(f.decoded.extFields or {}) do
                        if k ~= "Signature" and k ~= "AccessKey" then
                            ext[k] = v
                        end
                    end
                    return f.decoded.code, ext
                end
            end
        end

        fx_it("are mqadmin's: updateTopic, topicRoute, clusterList", function()
            local code, ext = mqadmin_request("update-and-create-topic.jsonl")
            local seen = sent_by("updateTopic", { brokerAddr = a.addr, topic = "FxTopic",
                                                  readQueueNums = "4", writeQueueNums = "4" })
            assert.equal(1, #seen)
            assert.equal(a.addr, seen[1].addr)
            assert.equal(code, seen[1].cmd.code)
            assert.same(ext, seen[1].cmd.ext)

            code, ext = mqadmin_request("route-rocketmq-header.jsonl")
            seen = sent_by("topicRoute", { topic = "FxTopic" })
            assert.equal(code, seen[1].cmd.code)
            assert.same(ext, seen[1].cmd.ext)

            code, ext = mqadmin_request("cluster-info.jsonl")
            seen = sent_by("clusterList", {})
            assert.equal(code, seen[1].cmd.code)
            assert.same(ext, seen[1].cmd.ext or {})
        end)
    end)

    describe("cluster", function()
        it("clusterList shows every broker with mqadmin's columns, and as JSON", function()
            local code, out = run("admin clusterList -n " .. ns)
            assert.equal(0, code, out)
            assert.matches("^#Cluster Name%s+#Broker Name%s+#BID%s+#Addr%s+#Version%s+#InTPS%(LOAD%)"
                .. "%s+#OutTPS%(LOAD%)%s+#PCWait%(ms%)%s+#Hour%s+#SPACE\n", out)
            assert.matches("DefaultCluster%s+broker%-a%s+0%s+" .. a.addr:gsub("%.", "%%.") .. "%s+V4_9_8", out)
            assert.matches("DefaultCluster%s+broker%-b%s+0%s+" .. b.addr:gsub("%.", "%%."), out)
            code, out = run("admin clusterList -n " .. ns .. " --json")
            assert.equal(0, code, out)
            local rows = json_of(out)
            assert.equal(2, #rows)
            assert.equal("broker-a", rows[1].brokerName)
            assert.equal(a.addr, rows[1].addr)
            assert.equal("V4_9_8", rows[1].version)
            code, out = run("admin clusterList -m -n " .. ns)
            assert.equal(0, code, out)
            assert.matches("#InTotalYest%s+#OutTotalYest%s+#InTotalToday%s+#OutTotalToday", out)
        end)

        it("brokerStatus prints a broker's runtime figures; -c every broker's", function()
            local p = producer.new({ namesrvAddr = ns })
            local code, out = run(("admin updateTopic -n %s -c DefaultCluster -t StatusT -r 2 -w 2"):format(ns))
            assert.equal(0, code, out)
            local before
            code, out = run(("admin brokerStatus -n %s -b %s --json"):format(ns, a.addr))
            assert.equal(0, code, out)
            before = tonumber(json_of(out)[1].stats.msgPutTotalTodayNow)
            local sent = 0
            for i = 1, 6 do
                local r = assert(p:send({ topic = "StatusT", body = "s" .. i }))
                if r.queue.brokerName == "broker-a" then
                    sent = sent + 1
                end
            end
            -- (the broker's counters are summed from its workers now and then)
            assert(server.eventually(function()
                code, out = run(("admin brokerStatus -n %s -b %s"):format(ns, a.addr))
                return code == 0 and tonumber(out:match("msgPutTotalTodayNow%s*: (%d+)")) == before + sent
            end, 5000), out)
            code, out = run(("admin brokerStatus -n %s -c DefaultCluster"):format(ns))
            assert.equal(0, code, out)
            assert.matches(a.addr:gsub("%.", "%%.") .. "%s+brokerVersionDesc%s+: V4_9_8", out)
            assert.matches(b.addr:gsub("%.", "%%.") .. "%s+brokerVersionDesc%s+: V4_9_8", out)
        end)

        it("clusterRT sends to each broker and reports the counts", function()
            local code, out = run(("admin clusterRT -n %s -a 3 -s 16"):format(ns))
            assert.equal(0, code, out)
            assert.matches("#Cluster Name%s+#Broker Name%s+#RT%s+#successCount%s+#failCount", out)
            assert.matches("DefaultCluster%s+broker%-a%s+[%d.]+%s+3%s+0", out)
            assert.matches("DefaultCluster%s+broker%-b%s+[%d.]+%s+3%s+0", out)
        end)
    end)

    describe("topic", function()
        it("updateTopic creates the queues topicRoute then shows; deleteTopic removes the route", function()
            local code, out = run(("admin updateTopic -n %s -c DefaultCluster -t AdmT -r 3 -w 5"):format(ns))
            assert.equal(0, code, out)
            assert.matches("create topic to " .. a.addr:gsub("%.", "%%.") .. " success%.", out)
            assert.matches("create topic to " .. b.addr:gsub("%.", "%%.") .. " success%.", out)
            assert.matches("TopicConfig %[topicName=AdmT, readQueueNums=3, writeQueueNums=5, perm=RW%-", out)
            local q = queues(ns, "AdmT")
            assert.equal(3, q["broker-a"].readQueueNums)
            assert.equal(5, q["broker-a"].writeQueueNums)
            assert.equal(5, q["broker-b"].writeQueueNums)
            code, out = run(("admin topicRoute -n %s -t AdmT -l"):format(ns))
            assert.equal(0, code, out)
            assert.matches("Total:%s+2%s+6%s+10", out)
            -- the default form is the route as JSON (TopicRouteData.toJson(true))
            code, out = run(("admin topicRoute -n %s -t AdmT"):format(ns))
            assert.equal(0, code, out)
            assert.equal(2, #json_of(out).brokerDatas)
            -- one broker only: -b
            code, out = run(("admin updateTopic -n %s -b %s -t AdmT -r 4 -w 4"):format(ns, b.addr))
            assert.equal(0, code, out)
            assert(server.eventually(function()
                return queues(ns, "AdmT")["broker-b"].writeQueueNums == 4
            end, 5000))
            assert.equal(5, queues(ns, "AdmT")["broker-a"].writeQueueNums)

            code, out = run("admin topicList -n " .. ns)
            assert.equal(0, code, out)
            assert.matches("\nAdmT\n", "\n" .. out)
            code, out = run("admin topicClusterList -n " .. ns .. " -t AdmT")
            assert.equal(0, code, out)
            assert.equal("DefaultCluster\n", out)

            code, out = run(("admin deleteTopic -n %s -c DefaultCluster -t AdmT"):format(ns))
            assert.equal(0, code, out)
            assert.matches("delete topic %[AdmT%] from cluster %[DefaultCluster%] success%.", out)
            code, out = run(("admin topicRoute -n %s -t AdmT"):format(ns))
            assert.equal(1, code, out)
            assert.matches("TOPIC_NOT_EXIST", out)
            code, out = run("admin topicList -n " .. ns)
            assert.equal(0, code, out)
            assert.not_matches("\nAdmT\n", "\n" .. out)
        end)

        it("updateTopicPerm changes the perm in the route; sends are refused on a read-only topic", function()
            assert.equal(0, (run(("admin updateTopic -n %s -c DefaultCluster -t PermT -r 2 -w 2"):format(ns))))
            local code, out = run(("admin updateTopicPerm -n %s -c DefaultCluster -t PermT -p 4"):format(ns))
            assert.equal(0, code, out)
            assert.matches("update topic perm from 6 to 4 in", out)
            assert(server.eventually(function()
                local q = queues(ns, "PermT")
                return q["broker-a"].perm == 4 and q["broker-b"].perm == 4
            end, 5000))
            local r = producer.new({ namesrvAddr = ns, retryTimesWhenSendFailed = 0 }):send({ topic = "PermT", body = "x" })
            assert.is_nil(r)
            code, out = run(("admin updateTopicPerm -n %s -b %s -t PermT -p 4"):format(ns, a.addr))
            assert.equal(0, code, out)
            assert.matches("new perm equals to the old one!", out)
            code, out = run(("admin updateTopicPerm -n %s -c DefaultCluster -t PermT -p 9"):format(ns))
            assert.equal(2, code, out)
        end)

        it("updateOrderConf puts, gets and deletes the topic's order conf KV", function()
            local code, out = run(("admin updateOrderConf -n %s -t OrdT -m put -v 'broker-a:4;broker-b:2'"):format(ns))
            assert.equal(0, code, out)
            code, out = run(("admin updateOrderConf -n %s -t OrdT -m get"):format(ns))
            assert.equal(0, code, out)
            assert.matches("orderConf=%[broker%-a:4;broker%-b:2%]", out)
            code, out = run(("admin updateOrderConf -n %s -t OrdT -m delete"):format(ns))
            assert.equal(0, code, out)
            code, out = run(("admin updateOrderConf -n %s -t OrdT -m get"):format(ns))
            assert.equal(1, code, out)
            assert.matches("QUERY_NOT_FOUND %(code 22%)", out)
            code, out = run(("admin updateOrderConf -n %s -t OrdT -m put -v nonsense"):format(ns))
            assert.equal(2, code, out)
        end)

        it("allocateMQ spreads the readable queues over the ips averagely", function()
            assert.equal(0, (run(("admin updateTopic -n %s -c DefaultCluster -t AllocT -r 3 -w 3"):format(ns))))
            local code, out = run(("admin allocateMQ -n %s -t AllocT -i 10.0.0.1,10.0.0.2"):format(ns))
            assert.equal(0, code, out)
            local res = json_of(out).result
            local one, two = res["10.0.0.1"], res["10.0.0.2"]
            assert.equal(3, #one)
            assert.equal(3, #two)
            assert.same({ "broker-a", 0 }, { one[1].brokerName, one[1].queueId })
            assert.same({ "broker-b", 0 }, { two[1].brokerName, two[1].queueId })
        end)

        it("topicStatus shows min and max offset per queue", function()
            assert.equal(0, (run(("admin updateTopic -n %s -b %s -t StatT -r 2 -w 2"):format(ns, a.addr))))
            local p = producer.new({ namesrvAddr = ns })
            for i = 1, 4 do
                assert(p:send({ topic = "StatT", body = "m" .. i }))
            end
            local code, out = run(("admin topicStatus -n %s -t StatT"):format(ns))
            if code == 1 and out:match("REQUEST_CODE_NOT_SUPPORTED %(code 3%)") then
                pending("GET_TOPIC_STATS_INFO (202) arrives with branch mqstore")
                return
            end
            assert.equal(0, code, out)
            assert.matches("#Broker Name%s+#QID%s+#Min Offset%s+#Max Offset%s+#Last Updated", out)
            local total = 0
            for max in out:gmatch("broker%-a%s+%d+%s+0%s+(%d+)") do
                total = total + tonumber(max)
            end
            assert.equal(4, total)
        end)
    end)

    describe("perm", function()
        it("wipeWritePerm makes sends go to the other broker; addWritePerm brings it back", function()
            assert.equal(0, (run(("admin updateTopic -n %s -c DefaultCluster -t WipeT -r 4 -w 4"):format(ns))))
            local code, out = run(("admin wipeWritePerm -n %s -b broker-a"):format(ns))
            assert.equal(0, code, out)
            assert.matches("wipe write perm of broker%[broker%-a%] in name server%[" .. ns:gsub("%.", "%%.")
                .. "%] OK, %d+", out)
            assert.equal(4, queues(ns, "WipeT")["broker-a"].perm)
            local p = producer.new({ namesrvAddr = ns })
            for i = 1, 8 do
                local r = assert(p:send({ topic = "WipeT", body = "w" .. i }))
                assert.equal("broker-b", r.queue.brokerName)
            end
            code, out = run(("admin addWritePerm -n %s -b broker-a"):format(ns))
            assert.equal(0, code, out)
            assert.matches("add write perm of broker%[broker%-a%] in name server%[.-%] OK, %d+", out)
            assert.equal(6, queues(ns, "WipeT")["broker-a"].perm)
            local seen = {}
            local p2 = producer.new({ namesrvAddr = ns })
            for i = 1, 8 do
                local r = assert(p2:send({ topic = "WipeT", body = "a" .. i }))
                seen[r.queue.brokerName] = true
            end
            assert.is_true(seen["broker-a"])
            -- one NameServer of two unreachable: the other's line, and exit 1
            code, out = run(("admin addWritePerm -n '%s;127.0.0.1:1' -b broker-a"):format(ns))
            assert.equal(1, code, out)
            assert.matches("in name server%[" .. ns:gsub("%.", "%%.") .. "%] OK, %d+", out)
            assert.matches("in name server%[127%.0%.0%.1:1%] Failed: ", out)
        end)
    end)

    describe("namesrv", function()
        it("updateKvConfig then GET_KV_CONFIG has the value; deleteKvConfig removes it", function()
            local code, out = run(("admin updateKvConfig -n %s -s AdmNs -k k1 -v 'v 1'"):format(ns))
            assert.equal(0, code, out)
            assert.matches("create or update kv config to namespace success%.", out)
            local r = assert(net.call(ns, { code = 101, ext = { namespace = "AdmNs", key = "k1" } }, 5000))
            assert.equal(0, r.code)
            assert.equal("v 1", r.ext.value)
            code, out = run(("admin deleteKvConfig -n %s -s AdmNs -k k1"):format(ns))
            assert.equal(0, code, out)
            r = assert(net.call(ns, { code = 101, ext = { namespace = "AdmNs", key = "k1" } }, 5000))
            assert.equal(22, r.code)
        end)

        it("updateNamesrvConfig then getNamesrvConfig shows the new value", function()
            local code, out = run(("admin getNamesrvConfig -n %s"):format(ns))
            assert.equal(0, code, out)
            assert.matches("============" .. ns:gsub("%.", "%%.") .. "============", out)
            assert.matches("orderMessageEnable%s+=  false", out)
            code, out = run(("admin updateNamesrvConfig -n %s -k orderMessageEnable -v true"):format(ns))
            assert.equal(0, code, out)
            code, out = run(("admin getNamesrvConfig -n %s --json"):format(ns))
            assert.equal(0, code, out)
            assert.equal("true", json_of(out)[1].config.orderMessageEnable)
        end)
    end)

    describe("broker config", function()
        it("updateBrokerConfig then getBrokerConfig shows the new value", function()
            local code, out = run(("admin getBrokerConfig -n %s -b %s"):format(ns, a.addr))
            assert.equal(0, code, out)
            assert.matches("============" .. a.addr:gsub("%.", "%%.") .. "============", out)
            assert.matches("\nbrokerName%s+=  broker%-a\n", out)
            assert.matches("\nslaveReadEnable%s+=  false\n", out)
            code, out = run(("admin updateBrokerConfig -n %s -b %s -k slaveReadEnable -v true"):format(ns, a.addr))
            assert.equal(0, code, out)
            assert.matches("update broker config success, " .. a.addr:gsub("%.", "%%."), out)
            code, out = run(("admin getBrokerConfig -n %s -c DefaultCluster"):format(ns))
            assert.equal(0, code, out)
            assert.matches("============Master: " .. a.addr:gsub("%.", "%%.") .. "============\n.-slaveReadEnable%s+=  true", out)
            assert.matches("============Master: " .. b.addr:gsub("%.", "%%.") .. "============\n.-slaveReadEnable%s+=  false", out)
            -- a key the broker refuses: exit 1 with its reason
            code, out = run(("admin updateBrokerConfig -n %s -b %s -k noSuchKeyAtAll -v 1"):format(ns, a.addr))
            assert.equal(1, code, out)
            assert.matches("refused UPDATE_BROKER_CONFIG: [A-Z_]+ %(code %d+%): unknown broker config key", out)
        end)

        it("decodeMessageId reads the ip and the time out of a sent message's id", function()
            local r = assert(producer.new({ namesrvAddr = ns }):send({ topic = "StatusT", body = "id" }))
            local code, out = run("admin decodeMessageId -i " .. r.msgId)
            assert.equal(0, code, out)
            local ip = out:match("ip=(%S+)")
            assert.truthy(ip and ip:match("^%d+%.%d+%.%d+%.%d+$"), out)
            code, out = run("admin decodeMessageId --json -i " .. r.msgId)
            assert.equal(0, code, out)
            local ms = json_of(out).ms
            assert.is_true(math.abs(ms - core.now_ms()) < 60000, out)
            code = run("admin decodeMessageId -i nothex")
            assert.equal(2, code)
        end)

        -- The requests below are answered by the broker once branch mqstore
        -- merges; until then the command prints the refusal (exit 1).
        local function refused_or(code, out, reason)
            if code == 1 and out:match("REQUEST_CODE_NOT_SUPPORTED %(code 3%)") then
                pending(reason)
                return true
            end
            return false
        end

        it("cleanExpiredCQ, cleanUnusedTopic and deleteExpiredCommitLog answer success", function()
            for _, c in ipairs({ "cleanExpiredCQ", "cleanUnusedTopic", "deleteExpiredCommitLog" }) do
                local code, out = run(("admin %s -n %s -b %s"):format(c, ns, a.addr))
                if refused_or(code, out, c .. ": requests 306/316/329 arrive with branch mqstore") then
                    return
                end
                assert.equal(0, code, out)
                assert.matches("^success", out)
            end
        end)

        it("statsAll shows each topic's groups with their figures", function()
            local code, out = run(("admin statsAll -n %s -t StatusT"):format(ns))
            assert.equal(0, code, out)
            assert.matches("^#Topic%s+#Consumer Group%s+#Accumulation%s+#InTPS%s+#OutTPS%s+#InMsg24Hour%s+#OutMsg24Hour", out)
            if refused_or(out:match("skipped") and 1 or 0, out, "statsAll: requests 300/315 arrive with branch mqstore") then
                return
            end
            assert.matches("\nStatusT%s+", out)
        end)

        it("exportMetadata writes the cluster's user topics and groups", function()
            local dir = server.tmpdir()
            local code, out = run(("admin exportMetadata -n %s -c DefaultCluster -f %s"):format(ns, dir))
            if refused_or(code, out, "exportMetadata: GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305) arrives with branch mqstore") then
                return
            end
            assert.equal(0, code, out)
            local doc = json_of(server.read_file(dir .. "/metadata.json"))
            assert.truthy(doc.topicConfigTable.StatusT)
            assert.equal(4, doc.topicConfigTable.StatusT.writeQueueNums)   -- 2 + 2 over the brokers
            assert.is_nil(doc.topicConfigTable.TBW102)
        end)

        it("exportConfigs writes the brokers' configs and the cluster's scale", function()
            local dir = server.tmpdir()
            local code, out = run(("admin exportConfigs -n %s -c DefaultCluster -f %s"):format(ns, dir))
            if code == 1 and out:match("broker config lacks keys") then
                pending("exportConfigs: filterServerNums/useTLS in getBrokerConfig arrive with branch mqstore")
                return
            end
            assert.equal(0, code, out)
            local doc = json_of(server.read_file(dir .. "/configs.json"))
            assert.equal(2, doc.clusterScale.masterBrokerSize)
            assert.equal("broker-a", doc.brokerConfigs["broker-a"].brokerName)
        end)
    end)
end)
