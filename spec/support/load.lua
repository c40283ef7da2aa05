-- Concurrent request loops for scale specs and benchmarks: `n` tasks,
-- each with its own connection, share a list of jobs; the caller waits
-- until all have ended.  Bounded by the job list and a deadline.
--
--   local load = require("support.load")
--   local res = load.run(addr, 32, jobs, function(conn, job) ... end, 120000)
--   res.failed (count), res.errors ({msg, ...} first few), res.ms
local net = require("rmq.net")
local core = require("rmq.core")

local M = {}

local seq = 0

function M.run(addr, n, jobs, fn, deadline_ms)
    seq = seq + 1
    local key = "support.load." .. seq
    local next_job, live = 1, n
    local res = { failed = 0, errors = {}, done = 0 }
    local t0 = core.mono_ms()
    local stop_at = t0 + (deadline_ms or 300000)
    for _ = 1, n do
        net.spawn(function()
            local conn, err = net.connect(addr)
            if not conn then
                res.failed = res.failed + 1
                res.errors[#res.errors + 1] = tostring(err)
            else
                while next_job <= #jobs and core.mono_ms() < stop_at do
                    local job = jobs[next_job]
                    next_job = next_job + 1
                    local ok, why = pcall(fn, conn, job)
                    if ok and why ~= false then
                        res.done = res.done + 1
                    else
                        res.failed = res.failed + 1
                        if #res.errors < 5 then
                            res.errors[#res.errors + 1] = tostring(why)
                        end
                    end
                end
                conn:close()
            end
            live = live - 1
            if live == 0 then
                net.raise(key)
            end
        end)
    end
    while live > 0 and core.mono_ms() < stop_at + 1000 do
        net.wait_event(key, 100)
    end
    res.ms = core.mono_ms() - t0
    return res
end

return M
