-- busted's helper (.busted): when a spec file ends, every process it
-- started through the harness (support.children: servers, etcd, node
-- clients, `rmq` tools) and left running is ended, by PID, before the
-- next file starts (support.children.end_all).  A file that failed is
-- expected to leave some (a case that stopped before its stop): they are
-- ended at once and listed on stderr.  A file whose cases all passed
-- gives each such process 10 s of grace, then SIGTERM and 20 s (the
-- failed files' budget): one the file had asked to stop (s:stop(), any
-- p:kill) that ends within that was only slow to stop (an ASan server
-- flushing on a loaded machine) and is listed on stderr; one never asked
-- to stop (a process left running), or still running after it all, is a
-- spec defect: the file gets an error naming it (scripts/test.sh's
-- end-of-run check counted it a failure before; that check stays, for
-- anything started otherwise).
local busted = require("busted")
-- Loaded here, before any file: busted insulates each file's
-- package.loaded, and every file must keep to this one list.
local children = require("support.children")

local failed = false

busted.subscribe({ "file", "start" }, function()
    failed = false
    return nil, true
end)
for _, ev in ipairs({ { "failure" }, { "error" } }) do
    busted.subscribe(ev, function()
        failed = true
        return nil, true
    end)
end

busted.subscribe({ "file", "end" }, function(file)
    local was_failed = failed
    local ended = children.end_all(was_failed and 0 or 10000)
    if #ended == 0 then
        return nil, true
    end
    local lines, defect = {}, false
    for _, c in ipairs(ended) do
        local why
        if c.killed then
            why = "needed SIGKILL"
        elseif not c.asked then
            why = "never asked to stop"
        else
            why = "slow to stop"
        end
        if c.wait_err then
            why = why .. "; waiting on it failed: " .. c.wait_err
        end
        defect = defect or c.killed or not c.asked
        lines[#lines + 1] = ("  PID %d (%s): ended, status %s signal %s (%s)"):format(
            c.pid, c.what, tostring(c.status), tostring(c.signal), why)
    end
    local msg = ("%s left %d process(es) running:\n%s"):format(file.name, #ended, table.concat(lines, "\n"))
    if was_failed or not defect then
        io.stderr:write(msg .. "\n")
        return nil, true
    end
    error(msg, 0)
end)
