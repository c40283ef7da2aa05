-- The Node.js scripts of spec/interop/grpc_node (RocketMQ 5's SDK from
-- npm, rocketmq-client-nodejs, installed by scripts/test.sh; and node's
-- own http2 module for hostile peers) against a standalone rmq with
-- grpcServerPort.
--
--   local gn = require("support.grpc_node")
--   gn.check()                      raises unless node and node_modules are here
--   local s = gn.start(extra_conf)  a standalone with grpcServerPort = 0
--   gn.create_topic(s, topic)       4 queues, as mqadmin updateTopic
--   local status, res, why = gn.run(s, "produce.js", { TOPIC = ... }, "name" [, timeout_ms])
--       status: exit status (nil: killed); res: the script's last JSON
--       line, decoded; why: its output and the server's log
--   gn.consume_all(namesrv_addr, topic, group, want) -> messages
--       what rmq's remoting push consumer reads of topic from the first
--       offset, once it has want of them (or after 30 s)
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local proc = require("rmq.proc")
local server = require("support.server")
local consumer = require("rmq.client.consumer")

local M = {}

M.DIR = "spec/interop/grpc_node"

function M.check()
    local f = io.open(M.DIR .. "/node_modules/rocketmq-client-nodejs/package.json", "r")
    if f then
        f:close()
    end
    assert(f and os.execute("command -v node >/dev/null 2>&1"),
           "node and " .. M.DIR .. "/node_modules (npm ci) are needed")
end

function M.start(extra)
    local dir = server.tmpdir()
    local conf = { role = "standalone", namesrvListenPort = 0, workers = 2,
                   brokerName = "broker-grpc", storePathRootDir = dir .. "/store",
                   kvConfigPath = dir .. "/kv.json", mappedFileSizeCommitLog = 4 * 1024 * 1024,
                   grpcServerPort = 0 }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    local s = server.start(conf)
    assert(s.grpc_addr, "READY has no grpc=HOST:PORT: " .. tostring(s.ready_line))
    return s
end

function M.create_topic(s, topic)
    local r = assert(net.call(s.broker_addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
        topic = topic, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4,
        perm = 6, topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }, 5000))
    assert(r.code == 0, r.remark)
end

function M.run(s, script, vars, name, timeout_ms)
    timeout_ms = timeout_ms or 60000
    local out, err = s.dir .. "/" .. name .. ".out", s.dir .. "/" .. name .. ".err"
    local envs = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"), "HOME=" .. s.dir,
                   "ENDPOINT=" .. s.grpc_addr, "TIMEOUT_MS=" .. timeout_ms }
    for k, v in pairs(vars or {}) do
        envs[#envs + 1] = k .. "=" .. tostring(v)
    end
    local p = assert(proc.spawn({ file = "node", args = { script }, cwd = M.DIR,
                                  stdout = out, stderr = err, env = envs }))
    local status = p:wait(timeout_ms + 30000)
    if status == nil then
        p:kill(9)
        p:wait(5000)
    end
    local text = server.read_file(out)
    local line = text:match("(%b{})%s*$")
    local why = ("exit %s\nstdout: %s\nstderr: %s\nserver: %s"):format(tostring(status), text:sub(-3000),
        server.read_file(err):sub(-3000), s:log():sub(-3000))
    return status, line and cjson.decode(line), why
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

return M
