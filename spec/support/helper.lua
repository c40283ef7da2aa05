-- busted's helper (.busted): when a spec file ends, every process it
-- started through the harness (support.children: servers, etcd, node
-- clients, `rmq` tools) and left running is ended, by PID, before the
-- next file starts (support.children.end_all).  A file that failed is
-- expected to leave some (a case that stopped before its stop): they are
-- ended at once and listed on stderr.  A file whose cases all passed
-- but left a process running is a spec defect: after 10 s of grace (a
-- stop asked for and not waited for) the process is ended and the file
-- gets an error naming it (scripts/test.sh's end-of-run check counted it
-- a failure before; that check stays, for anything started otherwise).
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
    local lines = {}
    for _, c in ipairs(ended) do
        lines[#lines + 1] = ("  PID %d (%s): ended, status %s signal %s"):format(
            c.pid, c.what, tostring(c.status), tostring(c.signal))
    end
    local msg = ("%s left %d process(es) running:\n%s"):format(file.name, #ended, table.concat(lines, "\n"))
    if was_failed then
        io.stderr:write(msg .. "\n")
        return nil, true
    end
    error(msg, 0)
end)
