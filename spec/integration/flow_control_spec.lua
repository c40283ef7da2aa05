-- Flow control as RocketMQ 4.9.8 does it (README "Flow control"): a
-- broker whose store is slow answers SYSTEM_BUSY (2) with 4.9.8's
-- remarks instead of letting sends time out, keeps serving, loses nothing
-- it acknowledged; the limits change live; a replaced admission policy
-- decides; the project's producer moves to the healthy broker.
--
-- The store is made slow with the put_delay_ms fault injection point
-- (src/core/errinj.h: each commit log append sleeps holding its lock),
-- switched by a conf processor (code 7001) of the broker under test.
local net = require("rmq.net")
local codes = require("rmq.codes")
local producer = require("rmq.client.producer")
local server = require("support.server")
local admin = require("support.admin")

local req, R = codes.request, codes.response

local REJECT = "[REJECTREQUEST]system busy, start flow control for a while"
local TIMEOUT_CLEAN = "^%[TIMEOUT_CLEAN_QUEUE%]broker busy, start flow control for a while, "
    .. "period in queue: (%d+)ms, size of queue: (%d+)$"

local function send_req(topic, body, queue)
    return {
        code = req.SEND_MESSAGE_V2,
        ext = { a = "FcGroup", b = topic, c = "TBW102", d = 4, e = queue or 0, f = 0, g = 1796034593124,
                h = 0, i = "WAIT\1true\2TAGS\1TagA", j = 0, k = false, m = false },
        body = body,
    }
end

-- A broker with `extra` conf keys (a table of plain values, or Lua
-- source text for the rest of the conf table).
local function broker(extra, name)
    local lines = {}
    for k, v in pairs(type(extra) == "table" and extra or {}) do
        lines[#lines + 1] = ("%s = %s,"):format(k, server.serialize(v, ""))
    end
    return server.start({ source = ([[
        return {
            role = "broker", brokerName = %q, workers = 2,
            storePathRootDir = %q, mappedFileSizeCommitLog = 1048576,
            namesrvAddr = %q,
            processors = {
                [7001] = function(ctx, cmd)
                    require("rmq.store").errinj("put_delay_ms", tonumber(cmd:get("ms")))
                    return { code = 0 }
                end,
            },
            %s
            %s
        }
    ]]):format(name or "broker-fc", server.tmpdir() .. "/store-" .. (name or "fc"),
               type(extra) == "table" and extra.namesrvAddr or "127.0.0.1:1",
               table.concat(lines, "\n"), type(extra) == "string" and extra or "") })
end

local function put_delay(addr, ms)
    local r = admin.call(addr, { code = 7001, ext = { ms = ms } })
    assert.equal(0, r.code, r.remark)
end

local function update_config(addr, body)
    local r = admin.call(addr, { code = req.UPDATE_BROKER_CONFIG, body = body })
    assert.equal(0, r.code, r.remark)
end

-- Messages stored in queue 0 of topic.
local function stored(addr, topic)
    local r = admin.call(addr, { code = req.GET_MAX_OFFSET, ext = { topic = topic, queueId = 0 } })
    assert.equal(0, r.code, r.remark)
    return tonumber(r.ext.offset)
end

describe("flow control", function()
    it("answers sends [REJECTREQUEST] while a put holds the commit log lock too long", function()
        local s = broker({ osPageCacheBusyTimeOutMills = 300 })
        local ok, err = pcall(function()
            admin.create_topic(s.addr, "FcPut", 1)
            assert.equal(0, admin.call(s.addr, send_req("FcPut", "before")).code)
            put_delay(s.addr, 1500)
            -- One slow put (it holds the lock 1.5 s); then sends on two
            -- more connections, which the broker's two workers share
            -- round-robin: one is on the other worker and sees the put
            -- in progress, one waits behind the slow put on its worker.
            local out = {}
            local a = assert(net.connect(s.addr))
            local b1 = assert(net.connect(s.addr))
            local b2 = assert(net.connect(s.addr))
            net.spawn(function() out.slow = { a:call(send_req("FcPut", "slow"), 10000) } end)
            net.sleep(600)
            net.spawn(function() out.b1 = { b1:call(send_req("FcPut", "b1"), 10000) } end)
            net.spawn(function() out.b2 = { b2:call(send_req("FcPut", "b2"), 10000) } end)
            assert(server.eventually(function() return out.slow and out.b1 and out.b2 end, 8000))
            put_delay(s.addr, 0)
            assert.equal(R.SUCCESS, out.slow[1].code, out.slow[1].remark)
            local rejected, cleaned = 0, 0
            for _, k in ipairs({ "b1", "b2" }) do
                local r = assert(out[k][1], out[k][2])
                assert.equal(R.SYSTEM_BUSY, r.code)
                if r.remark == REJECT then
                    rejected = rejected + 1
                else
                    local waited = tonumber((assert(r.remark:match(TIMEOUT_CLEAN), r.remark)))
                    assert.is_true(waited >= 200, r.remark)
                    cleaned = cleaned + 1
                end
            end
            assert.equal(1, rejected)
            assert.equal(1, cleaned)
            -- Nothing busy was stored, everything acknowledged was; the
            -- broker serves again once the store is quick.
            assert.equal(2, stored(s.addr, "FcPut"))
            local r = admin.call(s.addr, send_req("FcPut", "after"))
            assert.equal(R.SUCCESS, r.code, r.remark)
            assert.equal(3, stored(s.addr, "FcPut"))
            a:close()
            b1:close()
            b2:close()
        end)
        local log = s:log()
        assert.equal(0, s:stop())
        assert(ok, tostring(err) .. "\n" .. log)
    end)
end)
