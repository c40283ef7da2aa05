-- Cross-worker posts: events raised in one worker wake waiters in every
-- worker; bytes reach a connection whichever worker owns it.
local net = require("rmq.net")
local server = require("support.server")

local CONF = [[
local net = require("rmq.net")
local conns = {}
return {
    role = "namesrv",
    workers = 4,
    processors = {
        -- wait for an event: replies "raised" or "timeout"
        [7101] = function(ctx, cmd)
            local ok = net.wait_event(cmd.ext.key, tonumber(cmd.ext.ms))
            return { code = 0, remark = ok and "raised" or "timeout",
                     ext = { worker = net.worker_id() } }
        end,
        [7102] = function(ctx, cmd)
            net.raise(cmd.ext.key)
            return { code = 0, ext = { worker = net.worker_id() } }
        end,
        -- who am I: the connection id and worker
        [7103] = function(ctx, cmd)
            return { code = 0, ext = { id = ctx.id, worker = net.worker_id() } }
        end,
        -- push a oneway request to another connection, by id
        [7104] = function(ctx, cmd)
            local ok, err = net.send_to(tonumber(cmd.ext.id), { code = 40, ext = { consumerGroup = "G" } })
            return { code = ok and 0 or 1, remark = err, ext = { worker = net.worker_id() } }
        end,
    },
}
]]

describe("cross-worker posts", function()
    local s
    setup(function() s = server.start({ source = CONF }) end)
    teardown(function() s:stop() end)

    it("wakes waiters in every worker when any worker raises the key", function()
        local waiters, results, workers = {}, {}, {}
        for i = 1, 12 do
            waiters[i] = assert(net.connect(s.addr))
            workers[assert(waiters[i]:call({ code = 7103 })).ext.worker] = true
        end
        -- With 12 connections over 4 workers, at least 2 workers wait.
        local n = 0
        for _ in pairs(workers) do n = n + 1 end
        assert.is_true(n >= 2)
        for i = 1, 12 do
            net.spawn(function()
                results[i] = assert(waiters[i]:call({ code = 7101, ext = { key = "T@1", ms = 5000 } }, 8000)).remark
            end)
        end
        -- Raise until every waiter answered: a wait that registered
        -- after a raise is woken by the next one.
        local raiser = assert(net.connect(s.addr))
        local function done()
            for i = 1, 12 do
                if results[i] == nil then return false end
            end
            return true
        end
        assert.truthy(server.eventually(function()
            assert.equal(0, assert(raiser:call({ code = 7102, ext = { key = "T@1" } })).code)
            return done()
        end, 3000))
        for i = 1, 12 do
            assert.equal("raised", results[i])
        end
    end)

    it("lets a wait time out when its key is not raised", function()
        local c = assert(net.connect(s.addr))
        assert.equal("timeout", assert(c:call({ code = 7101, ext = { key = "quiet", ms = 100 } })).remark)
        -- A raise of another key does not wake it.
        local r
        net.spawn(function() r = c:call({ code = 7101, ext = { key = "K1", ms = 300 } }) end)
        net.sleep(50)
        assert(net.connect(s.addr)):call({ code = 7102, ext = { key = "K2" } })
        assert.truthy(server.eventually(function() return r end, 2000))
        assert.equal("timeout", r.remark)
    end)

    it("delivers a request to a connection owned by another worker", function()
        local got = {}
        local target = assert(net.connect(s.addr, { on_request = function(ctx, cmd)
            got[#got + 1] = cmd.code
        end }))
        local me = assert(target:call({ code = 7103 })).ext
        -- Find a sender on another worker.
        local sender
        for _ = 1, 20 do
            local c = assert(net.connect(s.addr))
            if assert(c:call({ code = 7103 })).ext.worker ~= me.worker then
                sender = c
                break
            end
        end
        assert.truthy(sender, "no connection landed on another worker")
        assert.equal(0, assert(sender:call({ code = 7104, ext = { id = me.id } })).code)
        assert.truthy(server.eventually(function() return #got == 1 end, 2000))
        assert.equal(40, got[1])
    end)
end)
