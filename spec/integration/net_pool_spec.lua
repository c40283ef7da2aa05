-- net.call's per-address pool: tasks that find no connection and
-- connect side by side end up sharing one; the extra connections are
-- closed at once, not left open until collected (a descriptor on both
-- sides per task, per reconnect: what soak.sh's fd check found).
local net = require("rmq.net")
local server = require("support.server")

local function sockets(pid)
    local p = io.popen("ls -l /proc/" .. pid .. "/fd 2>/dev/null | grep -c socket:")
    local n = p:read("n")
    p:close()
    return n
end

describe("net.call pool", function()
    it("keeps one connection per address when tasks connect at once", function()
        local ns = server.start({ role = "namesrv" })
        finally(function() ns:stop() end)
        local before = sockets(ns.pid)
        local answered = 0
        net.run(function()
            local done = 0
            for _ = 1, 8 do
                net.spawn(function()
                    -- GET_ROUTEINFO_BY_TOPIC: any answer will do.
                    local r = net.call(ns.addr, { code = 105, ext = { topic = "PoolTopic" } }, 5000)
                    if r then
                        answered = answered + 1
                    end
                    done = done + 1
                end)
            end
            while done < 8 do
                net.sleep(10)
            end
        end)
        assert.equal(8, answered)
        -- The server closes its side once ours is closed.
        assert.is_truthy(server.eventually(function() return sockets(ns.pid) == before + 1 end, 3000),
            ("sockets before %d, now %d"):format(before, sockets(ns.pid)))
    end)
end)
