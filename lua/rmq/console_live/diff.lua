-- Conf as code: `rmq-server --diff CONF` and `--apply CONF` against the
-- server running that conf, over its live console (CONF's `console`).
--
-- --diff prints what differs between CONF and what the server runs:
--   key K: RUNNING -> WANTED (live)       UPDATE_BROKER_CONFIG's allow-list
--   key K: RUNNING -> WANTED (restart)    everything else
--   policy MODULE (K): source changed on disk (live reload)
-- or "no changes".  --apply then sets the live keys, reloads the changed
-- policies on every worker (all or none), prints what it did and lists
-- the keys that need a restart.  Exit codes: 0 done (or no changes), 1 a
-- change was refused, 2 the conf does not load or has no console, 3 the
-- console is unreachable.
local cjson = require("cjson")
local conf_mod = require("rmq.conf")
local client = require("rmq.console_live.client")
local console = require("rmq.console_live")

local M = {}

-- Keys that describe this invocation, not the server's behaviour.
local SKIP = { processors = true, workerId = true, role = true }

local function text(v)
    if type(v) == "table" then
        return cjson.encode(v)
    end
    if math.type(v) == "float" and math.tointeger(v) then
        v = math.tointeger(v)   -- (JSON brought it back as a float)
    end
    return tostring(v)
end

local function same(a, b)
    if type(a) == "number" and type(b) == "number" then
        return a == b
    end
    return text(a) == text(b)
end

-- A value as a Lua literal for set(key, value).
local function literal(v)
    if type(v) == "string" then
        return ("%q"):format(v)
    end
    return tostring(v)
end

--- The changes between `wanted` (a loaded conf) and the server's facts.
function M.changes(wanted, facts)
    local keys, seen = {}, {}
    for _, t in ipairs({ wanted, facts.conf }) do
        for k in pairs(t) do
            local e = conf_mod.describe(k)
            if not seen[k] and not SKIP[k] and k:sub(1, 1) ~= "_" and not (e and e.secret)
                and type(wanted[k]) ~= "function" then
                seen[k] = true
                keys[#keys + 1] = k
            end
        end
    end
    table.sort(keys)
    local out = {}
    for _, k in ipairs(keys) do
        local running, want = facts.conf[k], wanted[k]
        if running == cjson.null then
            running = nil
        end
        -- A port the server was given as 0 is whatever the kernel chose.
        local any_port = k:match("Port$") and running == 0
        if not same(running, want) and not any_port then
            out[#out + 1] = { kind = "key", key = k, running = running, wanted = want,
                              live = facts.live[k] == true }
        end
    end
    for k, p in pairs(facts.policies or {}) do
        if same(wanted[k], p.module) and p.file ~= nil and p.file ~= p.running then
            out[#out + 1] = { kind = "policy", key = k, module = p.module, live = true }
        end
    end
    return out
end

local function describe(c)
    if c.kind == "policy" then
        return ("policy %s (%s): source changed on disk (live reload)"):format(c.module, c.key)
    end
    return ("key %s: %s -> %s (%s)"):format(c.key, c.running == nil and "unset" or text(c.running),
        c.wanted == nil and "unset" or text(c.wanted), c.live and "live" or "restart")
end

function M.main(mode, path, overrides)
    local conf, err = conf_mod.load(path, overrides)
    if conf == nil then
        io.stderr:write("rmq-server: " .. tostring(err) .. "\n")
        return 2
    end
    local addr = console.client_address(conf)
    if addr == nil or addr:match(":0$") then
        io.stderr:write(("rmq-server: %s: %s; --%s talks to the running server through it\n"):format(path,
            addr and "console port 0 (any port): give the port the server's READY line shows, --console=HOST:PORT"
            or "no `console` key", mode))
        return 2
    end
    local c
    c, err = client.open(addr, conf.consolePassword or os.getenv("RMQ_CONSOLE_PASSWORD"))
    if c == nil then
        io.stderr:write("rmq-server: " .. err .. "\n")
        return 3
    end
    local ok, answer = c:eval("return __diff_facts()")
    if not ok then
        c:close()
        io.stderr:write("rmq-server: console: " .. answer)
        return 3
    end
    local facts = cjson.decode(answer)
    local changes = M.changes(conf, facts)
    if #changes == 0 then
        print("no changes")
        c:close()
        return 0
    end
    for _, ch in ipairs(changes) do
        print(describe(ch))
    end
    if mode ~= "apply" then
        c:close()
        return 0
    end
    local code, restart = 0, {}
    for _, ch in ipairs(changes) do
        local snippet
        if ch.kind == "policy" then
            snippet = ("return reload(%q)"):format(ch.module)
        elseif ch.live then
            snippet = ("return set(%q, %s)"):format(ch.key, literal(ch.wanted))
        else
            restart[#restart + 1] = ch.key
        end
        if snippet then
            local done, out = c:eval(snippet)
            out = out:gsub("\n$", "")
            if done then
                print("applied: " .. out)
            else
                print(("refused: %s: %s"):format(ch.key, out))
                code = 1
            end
        end
    end
    if #restart > 0 then
        print("needs a restart: " .. table.concat(restart, ", "))
    end
    c:close()
    return code
end

return M
