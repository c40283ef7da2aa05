-- The processes a spec file starts (servers, etcd, node clients, `rmq`
-- tools), so that none outlives its file: a case that fails or errors
-- before its stop used to leave its servers running (ASan servers were
-- still up, holding ports and CPU, 50-60 minutes later, beside the next
-- files).  spec/support/helper.lua (busted's helper, .busted) calls
-- end_all when each spec file ends.
--
--   local children = require("support.children")
--   local p, err = children.spawn(opts)   rmq.proc's spawn, the child kept
--   children.end_all(grace_ms)
--       -> { {pid=, what=, status=, signal=, asked=, killed=}, ... }
--       the children still running: each is given grace_ms to exit on
--       its own (a stop a spec asked for without waiting), then SIGCONT
--       (a spec may have left it stopped) and SIGTERM, 20 s, then SIGKILL;
--       every child is forgotten after, even when a wait raised (another
--       task's wait on it in progress, a uv failure: p.exited is then
--       polled instead, wait_err says why).  asked: the spec had sent it a stopping
--       signal (SIGTERM, SIGINT, SIGQUIT, SIGKILL) before; killed: it
--       needed the SIGKILL.  Only these, by PID: nothing is looked up by
--       name.
local proc = require("rmq.proc")

local M = {}

local kept = {}   -- { {p=, what=}, ... } since the last end_all
-- The handles a spec sent a stopping signal to (weak: a handle that is
-- gone is forgotten with it).
local asked = setmetatable({}, { __mode = "k" })
local STOPPING = { [2] = true, [3] = true, [9] = true, [15] = true }

-- p:kill is looked up through rmq.proc's handle metatable (__index, a C
-- function): wrapped once, so a spec's stop (s:stop(), e:stop(), any
-- p:kill) is seen whichever module sent it.
local hooked = false
local function hook(p)
    if hooked then
        return
    end
    hooked = true
    local mt = getmetatable(p)
    local index = mt.__index
    local function kill(self, sig)
        if STOPPING[sig or 15] then
            asked[self] = true
        end
        return index(self, "kill")(self, sig)
    end
    mt.__index = function(self, k)
        if k == "kill" then
            return kill
        end
        return index(self, k)
    end
end

--- rmq.proc.spawn(opts), the child kept for end_all.
function M.spawn(opts)
    local p, err = proc.spawn(opts)
    if p then
        hook(p)
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

-- Waits until each of list has exited or the deadline (ms, socket clock)
-- passes.  A wait that raises (c.wait_err: another task's wait on it in
-- progress, a uv failure) is replaced by looking at p.exited every 50 ms.
local function wait_all(list, deadline)
    for _, c in ipairs(list) do
        local left = deadline - now_ms()
        if not c.p.exited and not c.wait_err and left > 0 then
            local ok, err = pcall(c.p.wait, c.p, math.floor(left) + 1)
            if not ok then
                c.wait_err = tostring(err)
            end
        end
        while c.wait_err and not c.p.exited and now_ms() < deadline do
            if not pcall(require("rmq.net").sleep, 50) then
                break
            end
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
    if #list == 0 then
        kept = {}
        return {}
    end
    if grace_ms and grace_ms > 0 then
        wait_all(list, now_ms() + grace_ms)
    end
    local left = {}
    for _, c in ipairs(list) do
        if not c.p.exited then
            left[#left + 1] = c
            c.asked = asked[c.p] == true
            pcall(c.p.kill, c.p, 18)   -- SIGCONT
            pcall(c.p.kill, c.p, 15)
        end
    end
    wait_all(left, now_ms() + 20000)
    local out = {}
    for _, c in ipairs(left) do
        local killed = false
        if not c.p.exited then
            killed = true
            pcall(c.p.kill, c.p, 9)
            if not c.wait_err then
                pcall(c.p.wait, c.p, 5000)
            end
        end
        out[#out + 1] = { pid = c.p.pid, what = c.what, status = c.p.exit_status, signal = c.p.term_signal,
                          asked = c.asked, killed = killed, wait_err = c.wait_err }
    end
    -- Only now: a child is forgotten once it has been dealt with.
    kept = {}
    return out
end

return M
