-- `rmq repl` against a real standalone server: typed into a terminal
-- (tmux, on a socket of this spec's own, so it never touches another
-- tmux), and run with -e CODE and FILE.lua.
local server = require("support.server")

local TOPIC = "ReplSpecTopic"
local GROUP = "ReplSpecGroup"

local function sh_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function sh(cmd)
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("a")
    local ok, _, code = p:close()
    return ok and 0 or code, out
end

-- {{{ a terminal

local Term = {}
Term.__index = Term

--- Starts `cmd` (a shell string) in a detached tmux session, 160x50.
local function term(dir, cmd)
    local t = setmetatable({ sock = dir .. "/tmux.sock" }, Term)
    t.tmux = "tmux -f /dev/null -S " .. sh_quote(t.sock) .. " "
    local code, out = sh(t.tmux .. "new-session -d -s repl -x 160 -y 50 " .. sh_quote(cmd))
    assert(code == 0, "tmux: " .. out)
    return t
end

function Term:type(text)
    local code, out = sh(self.tmux .. "send-keys -t repl -l " .. sh_quote(text))
    assert(code == 0, out)
end

--- Keys by tmux's names: Enter, Tab, Up, C-d.
function Term:keys(...)
    local code, out = sh(self.tmux .. "send-keys -t repl " .. table.concat({ ... }, " "))
    assert(code == 0, out)
end

function Term:line(text)
    self:type(text)
    self:keys("Enter")
end

function Term:screen()
    local _, out = sh(self.tmux .. "capture-pane -p -J -S -200 -t repl")
    return out
end

--- Waits until the screen matches the Lua pattern (plain text when
--- plain) n times; fails with the screen shown.
function Term:wait_for(pattern, plain, n)
    local screen
    local found = server.eventually(function()
        screen = self:screen()
        local count, init = 0, 1
        while true do
            local s, e = screen:find(pattern, init, plain)
            if not s then
                break
            end
            count, init = count + 1, e + 1
        end
        return count >= (n or 1)
    end, 10000)
    assert(found, ("the terminal never showed %q; it shows:\n%s"):format(pattern, screen))
    return screen
end

function Term:alive()
    return sh(self.tmux .. "has-session -t repl") == 0
end

--- Ends this spec's tmux server (and the REPL in it).
function Term:close()
    sh(self.tmux .. "kill-server")
end

-- }}}

describe("rmq repl", function()
    local s, dir, ns, rmq

    -- rmq repl -e CODE against the server (or addr): exit code, output.
    local function run_e(code, addr)
        return sh(("%s repl -n %s -e %s"):format(rmq, addr or ns, sh_quote(code)))
    end

    setup(function()
        dir = server.tmpdir()
        s = server.start({ role = "standalone", namesrvListenPort = 0, workers = 2,
                           brokerClusterName = "ReplCluster", brokerName = "broker-repl",
                           storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
                           mappedFileSizeCommitLog = 1024 * 1024, autoCreateTopicEnable = true,
                           autoCreateSubscriptionGroup = true })
        ns = s.addr
        rmq = server.build .. "/rmq"
        -- A topic and a group to complete: a send makes the topic, a
        -- consumer's heartbeat the group.
        local code, out = run_e(('send("%s", "first")'):format(TOPIC))
        assert(code == 0, out)
        code, out = run_e(('consume("%s", "%s", {count = 1})'):format(TOPIC, GROUP))
        assert(code == 0, out)
    end)

    teardown(function()
        if s then
            s:stop()
        end
    end)

    local function repl_cmd(home, extra)
        return ("env -u RMQ_REPL_HISTORY HOME=%s %s repl -n %s %s"):format(sh_quote(home), rmq, ns, extra or "")
    end

    it("completes a function and a topic name, shows results as tables, and survives errors", function()
        local home = server.tmpdir()
        local t = term(home, repl_cmd(home))
        local ok, err = pcall(function()
            t:wait_for("rmq> ", true)
            -- A function name: "topic_ro" + Tab becomes "topic_route(".
            t:type("topic_ro")
            t:keys("Tab")
            t:wait_for("rmq> topic_route(", true)
            -- A topic name inside the string, closed with its quote.
            t:type('"ReplSpec')
            t:keys("Tab")
            t:wait_for('rmq> topic_route("' .. TOPIC .. '"', true)
            t:line(")")
            local screen = t:wait_for("broker%-repl%s+6%s+%d+%s+0%s+%d+")
            assert.matches("#readQueueNums", screen)
            -- A group name where the function wants one.
            t:type(('consume("%s", "ReplSpecG'):format(TOPIC))
            t:keys("Tab")
            t:wait_for(('consume("%s", "%s"'):format(TOPIC, GROUP), true)
            t:keys("C-u")
            -- An error: one line, and the prompt is still there.
            t:line('topic_route("NoSuchReplTopic")')
            t:wait_for("TOPIC_NOT_EXIST (code 17)", true)
            t:line("nosuch_function()")
            t:wait_for("attempt to call a nil value (global 'nosuch_function')", true)
            t:line("40 + 2")
            t:wait_for("\n42\n", true)
            -- UTF-8 typed in is kept (libedit in a C locale drops it).
            t:line("s = 'h\u{e9}llo \u{2192}'")
            t:line("#s")
            t:wait_for("\n10\n", true)
            -- Multi-line input: an unfinished chunk continues at ">> ".
            t:line("function twice(x)")
            t:wait_for(">> ", true)
            t:line("return x * 2")
            t:line("end")
            t:line("twice(21)")
            t:wait_for("\n42\n", true, 2)
            -- Ctrl-C stops running code, not the REPL.
            -- (Ctrl-C once the loop runs: at the prompt it ends the REPL,
            -- as in lua, so a Ctrl-C typed ahead of the line is another case)
            t:line("print('spin' .. 'ning') while true do end")
            t:wait_for("\nspinning\n", true)
            t:keys("C-c")
            t:wait_for("interrupted!", true)
            t:line("40 + 3")
            t:wait_for("\n43\n", true)
            -- An admin command's own table (clusterList's columns).
            t:line("cluster_list()")
            t:wait_for("ReplCluster%s+broker%-repl%s+0%s+" .. ns:gsub("%p", "%%%0"):gsub("%%:%d+$", ""))
            assert.is_true(t:alive())
        end)
        t:close()
        assert(ok, err)
    end)

    it("keeps history in $HOME/.rmq_history across runs", function()
        local home = server.tmpdir()
        local t = term(home, repl_cmd(home))
        local ok, err = pcall(function()
            t:wait_for("rmq> ", true)
            t:line("6 * 7 + 1000")
            t:wait_for("\n1042\n", true)
            t:keys("C-d")
            assert.is_true(server.eventually(function() return not t:alive() end, 5000), "C-d did not leave")
        end)
        t:close()
        assert(ok, err)
        local f = assert(io.open(home .. "/.rmq_history"), "no history file")
        local text = f:read("a")
        f:close()
        assert.truthy(text:find("6", 1, true), text)
        -- What was typed is the user's alone.
        local _, mode = sh("stat -c %a " .. sh_quote(home .. "/.rmq_history"))
        assert.equal("600", mode:match("%d+"))
        -- A second run: Up brings the line back.
        t = term(home, repl_cmd(home))
        ok, err = pcall(function()
            t:wait_for("rmq> ", true)
            t:keys("Up")
            t:wait_for("rmq> 6 * 7 + 1000", true)
            t:keys("Enter")
            t:wait_for("\n1042\n", true)
        end)
        t:close()
        assert(ok, err)
    end)

    it("runs -e CODE and shows its value, with admin exit codes", function()
        local code, out = run_e(('topic_route("%s")'):format(TOPIC))
        assert.equal(0, code, out)
        assert.matches("broker%-repl", out)
        assert.matches("#writeQueueNums", out)
        -- refused by the server: 1, naming the response code
        code, out = run_e('topic_route("NoSuchReplTopic")')
        assert.equal(1, code, out)
        assert.matches("TOPIC_NOT_EXIST %(code 17%)", out)
        -- usage: a syntax error, a function called without its argument
        code, out = run_e("x = (")
        assert.equal(2, code, out)
        assert.matches("unexpected symbol", out)
        code, out = run_e("topic_route()")
        assert.equal(2, code, out)
        assert.matches("TOPIC", out)
        -- nothing answers (port 1 has no listener): 3, naming the address
        code, out = run_e("cluster_list()", "127.0.0.1:1")
        assert.equal(3, code, out)
        assert.matches("127%.0%.0%.1:1", out)
    end)

    it("runs a FILE.lua with arguments, and exits with its error's code", function()
        local path = dir .. "/script.lua"
        local f = assert(io.open(path, "w"))
        f:write(([[
local r = send(%q, arg[1], { keys = "k-" .. arg[1] })
assert(r.status == "SEND_OK", r.status)
local route = topic_route(%q)
print("queues", math.tointeger(route.queueDatas[1].writeQueueNums), "sent", r.queueOffset ~= nil)
print("flag", arg[2])
for _, m in ipairs(consume(%q, "ReplSpecScriptGroup", { count = 2 })) do
    print("body", m.body)
end
]]):format(TOPIC, TOPIC, TOPIC))
        f:close()
        -- options end at FILE: "-v" is the script's
        local code, out = sh(("%s repl -n %s %s from-script -v"):format(rmq, ns, path))
        assert.equal(0, code, out)
        assert.matches("flag\t%-v", out)
        assert.matches("queues\t%d+\tsent\ttrue", out)
        assert.matches("body\tfirst", out)
        assert.matches("body\tfrom%-script", out)
        f = assert(io.open(path, "w"))
        f:write('topic_route("NoSuchReplTopic")\nprint("not reached")\n')
        f:close()
        code, out = sh(("%s repl -n %s %s"):format(rmq, ns, path))
        assert.equal(1, code, out)
        assert.falsy(out:find("not reached", 1, true))
        code, out = sh(("%s repl -n %s %s"):format(rmq, ns, dir .. "/no-such-script.lua"))
        assert.equal(2, code, out)
        assert.matches("cannot open", out)
    end)

    it("evaluates lines from a pipe as at the prompt", function()
        local path = dir .. "/lines.txt"
        local f = assert(io.open(path, "w"))
        f:write('x = 2\nfor i = 1, 3 do\nx = x * 10\nend\nx\n#topic_route("' .. TOPIC .. '").queueDatas\n')
        f:close()
        local code, out = sh(("%s repl -n %s < %s"):format(rmq, ns, path))
        assert.equal(0, code, out)
        assert.equal("2000\n1\n", out)
    end)

    it("calls admin commands with options by long or short name, or in order", function()
        local code, out = run_e('update_topic("ReplSpecMade", {c = "ReplCluster", r = 8, writeQueueNums = 6})')
        assert.equal(0, code, out)
        code, out = run_e('local q = topic_route{t = "ReplSpecMade"}.queueDatas[1] '
            .. 'return math.tointeger(q.readQueueNums), math.tointeger(q.writeQueueNums)')
        assert.equal(0, code, out)
        assert.equal("8\n6\n", out)
        -- an option the command does not have, a missing one: usage, 2
        code, out = run_e('update_topic{bogus = 1}')
        assert.equal(2, code, out)
        assert.matches("no option 'bogus'", out)
        code, out = run_e('update_topic{c = "ReplCluster"}')
        assert.equal(2, code, out)
        assert.matches("^update_topic: .*usage: update_topic%(TOPIC", out)
    end)

    it("names every admin command in snake_case", function()
        local commands = require("rmq.repl.commands")
        assert.equal("topic_route", commands.snake("topicRoute"))
        assert.equal("query_msg_by_id", commands.snake("queryMsgById"))
        assert.equal("cluster_rt", commands.snake("clusterRT"))
        assert.equal("check_msg_send_rt", commands.snake("checkMsgSendRT"))
        -- Each admin command is a function of the REPL (help() lists it).
        local admin = require("rmq.admin")
        local _, order = admin.commands()
        local code, out = run_e("help()")
        assert.equal(0, code, out)
        for _, name in ipairs(order) do
            assert.matches("\n  " .. commands.snake(name) .. "%(", out, 1, name)
        end
    end)
end)

-- connect(ADDR): the live console (rmq.console_live) from the REPL.
describe("rmq repl connect()", function()
    it("attaches to a server's live console and comes back with Ctrl-D", function()
        -- A load error in the client fails here, not as a skipped case.
        assert.is_table(require("rmq.console_live.client"))
        local dir = server.tmpdir()
        local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = 2,
                                 brokerName = "broker-replc", storePathRootDir = dir .. "/store",
                                 kvConfigPath = dir .. "/kv.json", mappedFileSizeCommitLog = 1024 * 1024,
                                 console = "unix" })
        local rmq = server.build .. "/rmq"
        local ok, err = pcall(function()
            local addr = assert(s.ready_line:match("console=(%S+)"), s.ready_line)
            -- -e: the console object, its eval's output
            local code, out = sh(("%s repl -n %s -e %s"):format(rmq, s.addr,
                sh_quote(("local c = connect(%q); io.write(c:eval('20 + 22')); c:close()"):format(addr))))
            assert.equal(0, code, out)
            assert.equal("42\n", out)
            code, out = sh(("%s repl -e %s"):format(rmq, sh_quote(("connect(%q)"):format(dir .. "/none.sock"))))
            assert.equal(3, code, out)
            -- at the prompt: the server's prompt, then rmq> again
            local t = term(dir, ("env HOME=%s %s repl -n %s"):format(sh_quote(dir), rmq, s.addr))
            local tok, terr = pcall(function()
                t:wait_for("rmq> ", true)
                t:line(("connect(%q)"):format(addr))
                t:wait_for("broker-replc> ", true)
                t:line("6 * 7")
                t:wait_for("\n42\n", true)
                t:keys("C-d")
                t:line("1 + 2")
                t:wait_for("\n3\n", true)
            end)
            t:close()
            assert(tok, terr)
        end)
        s:stop()
        assert(ok, err)
    end)
end)
