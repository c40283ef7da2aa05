-- The processes a spec file starts (servers, etcd, node clients, `rmq`
-- tools), so that none outlives its file: a case that fails or errors
-- before its stop used to leave its servers running (ASan servers were
-- still up, holding ports and CPU, 50-60 minutes later, beside the next
-- files).  spec/support/helper.lua (busted's helper, .busted) calls
-- end_all when each spec file ends.
--
--   local children = require("support.children")
--   local p, err = children.spawn(opts)   rmq.proc's spawn, the child kept
--   children.end_all(grace_ms) -> { {pid=, what=, status=, signal=}, ... }
--       the children still running: each is given grace_ms to exit on
--       its own (a stop a spec asked for without waiting), then SIGCONT
--       (a spec may have left it stopped) and SIGTERM, 20 s, then SIGKILL;
--       every child is forgotten after.  Only these, by PID: nothing is
--       looked up by name.
local proc = require("rmq.proc")

local M = {}

local kept = {}   -- { {p=, what=}, ... } since the last end_all

--- rmq.proc.spawn(opts), the child kept for end_all.
function M.spawn(opts)
    local p, err = proc.spawn(opts)
    if p then
        local what = { opts.file }
        for _, a in ipairs(opts.args or {}) do
            what[#what + 1] = a
        end
        kept[#kept + 1] = { p = p, what = table.concat(what, " "):sub(1, 200) }
    end
    return p, err
end

local function now_ms()
    return require("socket").gettime() * 1000
end

-- Waits until each of list has exited or the deadline (ms, socket clock) passes.
local function wait_all(list, deadline)
    for _, c in ipairs(list) do
        local left = deadline - now_ms()
        if not c.p.exited and left > 0 then
            c.p:wait(math.floor(left) + 1)
        end
    end
end

function M.end_all(grace_ms)
    local list = {}
    for _, c in ipairs(kept) do
        if not c.p.exited then
            list[#list + 1] = c
        end
    end
    kept = {}
    if #list == 0 then
        return {}
    end
    if grace_ms and grace_ms > 0 then
        wait_all(list, now_ms() + grace_ms)
    end
    local left = {}
    for _, c in ipairs(list) do
        if not c.p.exited then
            left[#left + 1] = c
            c.p:kill(18)   -- SIGCONT
            c.p:kill(15)
        end
    end
    wait_all(left, now_ms() + 20000)
    local out = {}
    for _, c in ipairs(left) do
        if not c.p.exited then
            c.p:kill(9)
            c.p:wait(5000)
        end
        out[#out + 1] = { pid = c.p.pid, what = c.what, status = c.p.exit_status, signal = c.p.term_signal }
    end
    return out
end

return M
