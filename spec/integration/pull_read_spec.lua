-- How a PULL reply's records are copied (pullReadGapBytes): through the
-- commit log's mapping (-1), one preadv per record (0), or one preadv per
-- run of records with the gaps between them read and dropped (8192, the
-- default, and 16384, the largest).  Whichever way, a consumer gets
-- every record of its queue byte for byte and in order: records of four
-- queues interleaved in the log, bodies smaller and larger than the
-- gaps, and runs that cross from one commit log file into the next
-- (64 KiB files here).
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local env = require("support.broker_consume_env")

local QUEUES, N = 4, 240

local function mq(topic, qid)
    return { topic = topic, brokerName = env.BROKER, queueId = qid }
end

local function send_to(p, topic, qid, msg)
    msg.topic = topic
    return p:send_orderly(msg, qid, function(queues, _, arg)
        for _, q in ipairs(queues) do
            if q.queueId == arg then return q end
        end
    end)
end

-- Message i's body: every byte value, and sizes from 1 byte to 20 KiB
-- (above the largest gap, and a third of a commit log file).
local function body(i)
    local len = (i % 9 == 0) and 20000 + i or (i * 37) % 1500 + 1
    local t = {}
    for b = 1, len do
        t[b] = string.char((b * 7 + i) % 256)
    end
    return table.concat(t)
end

for _, gap in ipairs({ -1, 0, 8192, 16384 }) do
    describe("pull with pullReadGapBytes = " .. gap, function()
        local e

        setup(function()
            -- No fast failure: on a loaded machine (or under ASan) a
            -- send that waited 200 ms would be answered busy, and this
            -- spec is about what a pull reads, not flow control.
            e = env.start({ workers = 1, pullReadGapBytes = gap, brokerFastFailureEnable = false,
                            mappedFileSizeCommitLog = 64 * 1024 })
        end)

        teardown(function()
            e:stop()
        end)

        it("returns every record of each queue intact and in order", function()
            local topic = "FxPullRead"
            e:route(topic, QUEUES)
            local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxPullReadProducer",
                                     compressMsgBodyOverHowmuch = 1 << 30 })
            local want = {}
            for q = 0, QUEUES - 1 do want[q] = {} end
            for i = 1, N do
                local q = i % QUEUES
                local r = assert(send_to(p, topic, q, { body = body(i), keys = "k" .. i }))
                assert.equal("SEND_OK", r.status)
                want[q][#want[q] + 1] = i
            end
            local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = "FxPullReadGroup" })
            for q = 0, QUEUES - 1 do
                local got, offset = {}, 0
                while offset < #want[q] do
                    local r = assert(c:pull(mq(topic, q), offset, 32))
                    assert.equal("FOUND", r.status)
                    for _, m in ipairs(r.messages) do
                        local i = tonumber(m.keys:match("^k(%d+)$"))
                        got[#got + 1] = i
                        assert.equal(#got - 1, m.queueOffset)
                        assert.truthy(m.body == body(i), ("body of message %d (queue %d)"):format(i, q))
                    end
                    assert.equal(offset + #r.messages, r.nextBeginOffset)
                    offset = r.nextBeginOffset
                end
                assert.same(want[q], got)
            end
        end)
    end)
end
