-- The ali-ons scripts (spec/interop/ali_ons: the npm RocketMQ client,
-- installed by scripts/test.sh) as the interop specs run them against a
-- support.broker_consume_env.
--
--   local ali_ons = require("support.ali_ons")
--   ali_ons.check()                       raises unless node and the
--                                         client's node_modules are here
--   ali_ons.create_topic(e, topic [, credentials])
--       the topic with 4 queues, as mqadmin updateTopic creates it (which
--       registers it at once: ali-ons would otherwise find its route only
--       at its next 30 s poll), and waits until the NameServer has it
--   local status, res, why = ali_ons.run(e, "produce_consume.js",
--       { TOPIC = ..., GROUP = ... }, "name" [, timeout_ms])
--       status: the exit status (nil: killed at timeout_ms + 30 s);
--       res: the script's last JSON line, decoded (or nil); why: its
--       output and the broker's log, for assertion messages
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local proc = require("rmq.proc")
local server = require("support.server")

local M = {}

M.DIR = "spec/interop/ali_ons"

function M.check()
    local f = io.open(M.DIR .. "/node_modules/ali-ons/package.json", "r")
    if f then
        f:close()
    end
    assert(f and os.execute("command -v node >/dev/null 2>&1"),
           "node and " .. M.DIR .. "/node_modules (npm ci) are needed")
end

function M.create_topic(e, topic, credentials)
    local r = assert(net.call(e.addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
        topic = topic, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4,
        perm = 6, topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false },
        credentials = credentials }, 5000))
    assert(r.code == 0, r.remark)
    assert(server.eventually(function() return e:lookup(topic) end, 30000),
           "the broker did not register " .. topic .. " with the NameServer")
end

function M.run(e, script, vars, name, timeout_ms)
    timeout_ms = timeout_ms or 60000
    local out, err = e.dir .. "/" .. name .. ".out", e.dir .. "/" .. name .. ".err"
    local envs = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"), "HOME=" .. e.dir,
                   "NAMESRV=" .. e.ns_addr, "TIMEOUT_MS=" .. timeout_ms }
    for k, v in pairs(vars) do
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
    local why = ("exit %s\nstdout: %s\nstderr: %s\nbroker: %s"):format(tostring(status), text,
        server.read_file(err):sub(-3000), e.broker:log():sub(-3000))
    return status, line and cjson.decode(line), why
end

return M
