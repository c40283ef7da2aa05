-- What the console specs (console_*_spec.lua) set up on a real server:
-- a one-queue topic, N messages sent to it, M of them consumed by a group
-- (pulled, then committed, as a consumer does).
--
--   env.call(s, cmd) -> reply (asserts code 0)
--   env.one_queue_topic(s, topic)
--   env.send(s, topic, n [, props_of(i)]) -> {reply msgId...}
--   env.consume(s, group, topic, m)   pulls m from offset 0, commits m
--   env.commit(s, group, topic, offset)
--   env.stop(s)                       stops it; asserts a clean exit
local net = require("rmq.net")
local codes = require("rmq.codes")
local rq = require("support.requests")

local req = codes.request

local M = {}

function M.call(s, cmd)
    local r = assert(net.call(s.broker_addr, cmd, 30000))
    assert(r.code == 0, ("code %d: %s"):format(r.code, tostring(r.remark)))
    return r
end

function M.one_queue_topic(s, topic)
    M.call(s, { code = req.UPDATE_AND_CREATE_TOPIC,
                ext = { topic = topic, defaultTopic = "TBW102", readQueueNums = 1, writeQueueNums = 1,
                        perm = 6, topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } })
end

--- Bodies are TOPIC-i; props_of(i) gives the properties text (default
--- WAIT=true, TAGS=TagA).
function M.send(s, topic, n, props_of)
    local ids = {}
    for i = 1, n do
        local r = M.call(s, rq.send({ group = "ConsoleP", topic = topic, queues = 1,
                                      props = props_of and props_of(i) or "WAIT\1true\2TAGS\1TagA",
                                      body = topic .. "-" .. i }))
        ids[i] = r.ext.msgId
    end
    return ids
end

function M.commit(s, group, topic, offset)
    M.call(s, { code = req.UPDATE_CONSUMER_OFFSET,
                ext = { consumerGroup = group, topic = topic, queueId = 0, commitOffset = offset } })
end

function M.consume(s, group, topic, m)
    local r = M.call(s, { code = req.PULL_MESSAGE,
        ext = { consumerGroup = group, topic = topic, queueId = 0, queueOffset = 0,
                maxMsgNums = m, sysFlag = 0x4, commitOffset = 0, suspendTimeoutMillis = 0,
                subscription = "*", subVersion = 0, expressionType = "TAG" } })
    local got = select(2, r.body:gsub(topic .. "%-%d+", ""))
    assert(got == m, ("pulled %d messages, wanted %d"):format(got, m))
    M.commit(s, group, topic, m)
end

function M.stop(s)
    local status, signal = s:stop()
    assert(status == 0 and (signal or 0) == 0,
           ("exit status %s, signal %s\n%s"):format(tostring(status), tostring(signal), s:log()))
end

return M
