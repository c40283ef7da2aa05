-- How a server answers what its handlers do wrong: a handler that
-- raises gets SYSTEM_ERROR with the error's text, without its
-- "file:line:" position or any server path (the log has those and the
-- traceback); a processor declared as {header = ..., run = ...} (here
-- from a conf file) has its header read and refused by dispatch.
local net = require("rmq.net")
local server = require("support.server")
local names = require("rmq.names")

local function no_internals(r)
    local remark = r.remark or ""
    assert.is_nil(remark:find(".lua", 1, true), remark)
    assert.is_nil(remark:find("traceback", 1, true), remark)
    assert.is_nil(remark:find("/tmp", 1, true), remark)
end

describe("replies of a handler that raises", function()
    local s, c

    setup(function()
        s = server.start({ source = [[
            return {
                role = "namesrv", workers = 1, kvConfigPath = "]] .. server.tmpdir() .. [[/kv.json",
                processors = {
                    [7001] = function(ctx, cmd) error("cannot open /tmp/secret/dir/file.json: denied") end,
                    [7002] = function(ctx, cmd) local t = nil; return t.x end,
                    [7003] = { header = { { "n", "int", true, min = 1 }, { "g", "group", false } },
                               run = function(ctx, cmd, h) return { code = 0, remark = "n=" .. h.n } end },
                },
            }
        ]] })
        c = assert(net.connect(s.addr))
    end)

    teardown(function()
        c:close()
        s:stop()
    end)

    it("answers SYSTEM_ERROR without the error's position or server paths; the log has them", function()
        local r = assert(c:call({ code = 7001 }))
        assert.equal(1, r.code)
        assert.equal("cannot open <path>: denied", r.remark)
        r = assert(c:call({ code = 7002 }))
        assert.equal(1, r.code)
        assert.equal("attempt to index a nil value (local 't')", r.remark)
        no_internals(r)
        local logged = server.eventually(function()
            local log = s:log()
            return log:find("/tmp/secret/dir/file.json", 1, true) and log:find("conf.lua:", 1, true)
                and log:find("traceback", 1, true) and log
        end, 3000)
        assert.truthy(logged, s:log())
    end)

    it("reads a conf processor's declared header in dispatch", function()
        local r = assert(c:call({ code = 7003, ext = { n = "5" } }))
        assert.equal(0, r.code)
        assert.equal("n=5", r.remark)
        r = assert(c:call({ code = 7003, ext = { n = "0.5" } }))
        assert.equal(1, r.code)
        assert.equal('the custom field <n> is not an Integer: "0.5"', r.remark)
        r = assert(c:call({ code = 7003, ext = { n = "2", g = "../x" } }))
        assert.equal(names.group("../x"), r.remark)
        r = assert(c:call({ code = 7003 }))
        assert.equal("the custom field <n> is null", r.remark)
    end)
end)
