-- connect(ADDR [, PASSWORD]) in `rmq repl`: a running server's live
-- console (rmq.console_live.client, the `rmq console` wire), when this
-- build has it.  At the prompt it attaches: lines go to the server, its
-- answers are shown, its prompt is the server's name, and Ctrl-D comes
-- back to rmq>, with the REPL's line editing and history.  In -e/FILE
-- it returns the console: c:eval(CODE) -> the output text (raises the
-- server's error), c:close().
--
--   console.bind(repl) -> fn | nil     nil when the build has no live console
local M = {}

local function fail(exit, message)
    error(setmetatable({ exit = exit, message = message }, { __tostring = function(e) return e.message end }), 0)
end

function M.bind(repl)
    local ok, client = pcall(require, "rmq.console_live.client")
    if not ok or type(client) ~= "table" or type(client.open) ~= "function" then
        return nil
    end
    return function(addr, password)
        if type(addr) ~= "string" or addr == "" then
            fail(2, "connect: ADDR (a socket path or HOST:PORT) is required")
        end
        local c, err = client.open(addr, password or os.getenv("RMQ_CONSOLE_PASSWORD"))
        if c == nil then
            fail(3, "connect: " .. tostring(err))
        end
        if not repl.tty then
            return {
                eval = function(_, code)
                    local good, text = c:eval(code)
                    if not good then
                        fail(1, (tostring(text):gsub("\n$", "")))
                    end
                    return text
                end,
                close = function() c:close() end,
            }
        end
        local name = c.hello:match("name=(%S+)") or "console"
        repl.out:write(c.hello, "\nattached: the server's help() lists what it offers; Ctrl-D comes back\n")
        local prompt = name .. "> "
        while true do
            local line = repl.le.readline(prompt)
            if line == nil then
                break
            end
            repl:save_history(line)
            local kind, text = c:line(line)
            if kind == nil then
                c:close()
                fail(3, "connect: connection lost: " .. tostring(text))
            end
            if kind == "more" then
                prompt = ">> "
            else
                prompt = name .. "> "
                local out = kind == "err" and repl.err or repl.out
                out:write(text)
                out:flush()
            end
        end
        c:close()
        repl.out:write("\n")
    end
end

return M
