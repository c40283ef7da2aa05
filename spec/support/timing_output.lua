-- A busted output handler: busted's plain terminal output, plus one line
-- "SECONDS PATH" per spec file appended to the file named by
-- RMQ_SPEC_TIMES (when set).  scripts/test.sh uses those lines to keep
-- spec/durations.txt, from which it balances its parallel shards.
--
--   busted -o spec/support/timing_output.lua ...
return function(options)
    local busted = require("busted")
    local socket = require("socket")
    local handler = require("busted.outputHandlers.plainTerminal")(options)
    local out = os.getenv("RMQ_SPEC_TIMES")
    if out == nil or out == "" then
        return handler
    end
    local started = {}
    busted.subscribe({ "file", "start" }, function(file)
        started[file.name] = socket.gettime()
        return nil, true
    end)
    busted.subscribe({ "file", "end" }, function(file)
        local t0 = started[file.name]
        if t0 then
            local f = io.open(out, "a")
            if f then
                f:write(("%.1f %s\n"):format(socket.gettime() - t0, file.name))
                f:close()
            end
        end
        return nil, true
    end)
    return handler
end
