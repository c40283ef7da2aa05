-- The spec harness's process keeper (spec/support/children.lua) and the
-- file-end check (spec/support/helper.lua): every child a file leaves is
-- ended, even when waiting on one of them raises, and a passing file is
-- not failed for a stop it asked for that is only slow.
local children = require("support.children")
local net = require("rmq.net")
local server = require("support.server")

-- The shell command of a child that, asked to stop (SIGTERM), takes
-- stop_s seconds to do it; it creates `ready` once its trap is set (a
-- SIGTERM before that ends it at once).
local function slow_stop_cmd(stop_s, ready)
    return ("trap 'sleep %d; exit 0' TERM; : > '%s'; while :; do sleep 1; done"):format(stop_s, ready)
end

local function ready_file()
    return server.tmpdir() .. "/ready"
end

local function wait_ready(path)
    assert.is_truthy(server.eventually(function()
        local f = io.open(path)
        if f then
            f:close()
        end
        return f ~= nil
    end, 30000), "the child never set its trap")
end

local function slow_stopper(stop_s)
    local ready = ready_file()
    local p = assert(children.spawn({ file = "/bin/sh", args = { "-c", slow_stop_cmd(stop_s, ready) } }))
    wait_ready(ready)
    return p
end

-- Runs busted on one spec file (the repository's .busted: its helper)
-- and returns its exit status and output.
local function nested_busted(body)
    local dir = server.tmpdir()
    local file = dir .. "/nested_spec.lua"
    local f = assert(io.open(file, "w"))
    f:write(body)
    f:close()
    local build = os.getenv("RMQ_BUILD") or "build"
    local cmd = ("lua5.4 /usr/bin/busted --cpath='./%s/?.so' '%s' 2>&1; echo \"EXIT=$?\"")
        :format(build, file)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    return tonumber(out:match("EXIT=(%d+)%s*$")), out
end

describe("support.children.end_all", function()
    it("ends every child, even when another task is waiting on one of them", function()
        local a = assert(children.spawn({ file = "/bin/sleep", args = { "600" } }))
        local b = assert(children.spawn({ file = "/bin/sleep", args = { "600" } }))
        -- A task the file left blocked in a's wait: end_all's own wait on
        -- a raises ("in progress").
        local waited = false
        net.spawn(function()
            a:wait(600000)
            waited = true
        end)
        net.sleep(50)
        local ok, ended = pcall(children.end_all, 0)
        assert.is_true(ok, tostring(ended))
        assert.is_true(a.exited, "the child waited on elsewhere is still running")
        assert.is_true(b.exited, "the child after it was forgotten, still running")
        assert.equal(2, #ended)
        assert.is_truthy(server.eventually(function()
            return waited
        end, 10000), "the other task's wait never returned")
    end)

    it("tells a child the spec asked to stop from one it left running", function()
        local asked = assert(slow_stopper(1))
        local left = assert(slow_stopper(1))
        assert(asked:kill(15))
        local ended = children.end_all(0)
        assert.equal(2, #ended)
        local by_pid = {}
        for _, c in ipairs(ended) do
            by_pid[c.pid] = c
        end
        assert.is_true(by_pid[asked.pid].asked)
        assert.is_false(by_pid[left.pid].asked)
        -- Both stop on SIGTERM within the 20 s: neither needed SIGKILL.
        assert.is_false(by_pid[asked.pid].killed)
        assert.is_false(by_pid[left.pid].killed)
    end)
end)

describe("a spec file's end (spec/support/helper.lua)", function()
    it("passes a passing file whose child, asked to stop, takes longer than the grace to end", function()
        local READY = ready_file()
        -- 12 s to stop: past the 10 s grace, well within SIGTERM's 20 s.
        local status, out = nested_busted(([[
local children = require("support.children")
local net = require("rmq.net")
describe("slow stop", function()
    it("asks its child to stop and does not wait", function()
        local p = assert(children.spawn({ file = "/bin/sh", args = { "-c", %q } }))
        for _ = 1, 600 do
            local f = io.open(%q)
            if f then
                f:close()
                break
            end
            net.sleep(50)
        end
        assert(p:kill(15))
    end)
end)
]]):format(slow_stop_cmd(12, READY), READY))
        assert.equal(0, status, out)
        assert.matches("slow to stop", out, 1, true)
    end)

    it("fails a passing file that left a child running", function()
        local status, out = nested_busted([[
local children = require("support.children")
describe("left running", function()
    it("starts a child and forgets it", function()
        assert(children.spawn({ file = "/bin/sleep", args = { "600" } }))
    end)
end)
]])
        assert.is_not.equal(0, status, out)
        assert.matches("never asked to stop", out, 1, true)
    end)
end)
