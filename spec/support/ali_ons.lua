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
local net = require("rmq.net")
local codes = require("rmq.codes")
local node = require("support.node")
local server = require("support.server")

local M = {}

M.DIR = "spec/interop/ali_ons"

function M.check()
    node.check(M.DIR, "ali-ons")
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
    local envs = { "HOME=" .. e.dir, "NAMESRV=" .. e.ns_addr, "TIMEOUT_MS=" .. timeout_ms }
    for k, v in pairs(vars) do
        envs[#envs + 1] = k .. "=" .. tostring(v)
    end
    local status, res, text, etext = node.spawn(M.DIR, script, envs, out, err)(timeout_ms + 30000)
    local why = ("exit %s\nstdout: %s\nstderr: %s\nbroker: %s"):format(tostring(status), text,
        etext:sub(-3000), e.broker:log():sub(-3000))
    return status, res, why
end

return M
