-- Layers point down (docs/architecture.md, "Layers"): cmake/layers.cmake
-- scans src/'s #includes and fails on an upward one; the build runs it
-- (the layer_check target, before any object).  Planted includes go into
-- a temporary copy of src/, never into the tree.
local tmp = require("support.tmp")

local function q(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function sh(cmd)
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("a")
    local _, _, code = p:close()
    return code, out
end

local function check(src, exceptions)
    return sh(("cmake -DSRC=%s %s -P cmake/layers.cmake"):format(q(src),
        exceptions and ("-DEXCEPTIONS=" .. q(exceptions)) or ""))
end

local function append(path, text)
    local f = assert(io.open(path, "a"))
    f:write(text)
    f:close()
end

describe("the layer check", function()
    local dir

    before_each(function()
        dir = tmp.dir()
        assert(os.execute(("cp -r src %s/src && cp cmake/layer_exceptions.txt %s/"):format(q(dir), q(dir))))
    end)

    after_each(function()
        os.execute("rm -rf " .. q(dir))
    end)

    it("passes the tree as it is, and the build runs it", function()
        local code, out = check("src", "cmake/layer_exceptions.txt")
        assert.are.equal(0, code, out)
        local build = os.getenv("RMQ_BUILD") or "build"
        code, out = sh("cmake --build " .. q(build) .. " --target layer_check")
        assert.are.equal(0, code, out)
        assert.matches("Checking that src/'s includes point down the layers", out, 1, true)
    end)

    it("fails on a planted upward include, naming the file, the header and both layers", function()
        append(dir .. "/src/core/buf.c", '\n#include "server/server.h"\n')
        local code, out = check(dir .. "/src", dir .. "/layer_exceptions.txt")
        assert.are_not.equal(0, code)
        assert.matches("src/core/buf.c includes src/server/server.h: layer core may not include layer server",
            out, 1, true)
        assert.matches("1 layer error(s)", out, 1, true)
    end)

    it("allows a named departure only for the header it names", function()
        -- broker -> runtime/host.h is a listed departure; runtime/lconn.h is not.
        append(dir .. "/src/broker/topic_config.c",
            '#include "runtime/host.h"\n#include "runtime/lconn.h"\n#include "filter/sql92.h"\n#include "store/store.h"\n')
        local code, out = check(dir .. "/src", dir .. "/layer_exceptions.txt")
        assert.are_not.equal(0, code)
        assert.matches("src/broker/topic_config.c includes src/runtime/lconn.h: layer broker may not include layer runtime",
            out, 1, true)
        assert.falsy(out:find("topic_config.c includes src/runtime/host.h", 1, true))
        -- A sibling (same rank) and a lower layer are fine.
        assert.falsy(out:find("sql92.h", 1, true))
        assert.falsy(out:find("store.h", 1, true))
        assert.matches("1 layer error(s)", out, 1, true)
    end)

    it("fails on a departure the code no longer needs", function()
        append(dir .. "/layer_exceptions.txt", "core net/conn.h   # planted\n")
        local code, out = check(dir .. "/src", dir .. "/layer_exceptions.txt")
        assert.are_not.equal(0, code)
        assert.matches('"core net/conn.h" is no longer needed', out, 1, true)
    end)

    it("refuses a directory under src/ that has no layer", function()
        assert(os.execute("mkdir " .. q(dir .. "/src/extra")))
        append(dir .. "/src/extra/x.c", '#include "core/buf.h"\n')
        local code, out = check(dir .. "/src", dir .. "/layer_exceptions.txt")
        assert.are_not.equal(0, code)
        assert.matches("src/extra/x.c: layer extra has no rank", out, 1, true)
    end)

    it("links the bottom layers as libraries that take nothing from the layers above", function()
        -- rmq_layer_core, then rmq_layer_net_store, come after rmqcore on
        -- every link line: a symbol they need from above would not link.
        local build = os.getenv("RMQ_BUILD") or "build"
        local function symbols(lib, flag)
            local code, out = sh(("nm %s %s"):format(flag, q(build .. "/lib" .. lib .. ".a")))
            assert.are.equal(0, code, out)
            local set, n = {}, 0
            for line in out:gmatch("[^\n]+") do
                local name = flag == "-u" and line:match("^%s+U%s+(%S+)$")
                    or line:match("^%x+%s+[TDBRC]%s+(%S+)$")
                if name then
                    set[name] = true
                    n = n + 1
                end
            end
            return set, n
        end
        local top, ntop = symbols("rmqcore", "-g --defined-only")
        local mid, nmid = symbols("rmq_layer_net_store", "-g --defined-only")
        assert.is_true(ntop > 100 and nmid > 50)
        local function from_above(lib, above)
            local bad = {}
            for name in pairs((symbols(lib, "-u"))) do
                for _, set in ipairs(above) do
                    if set[name] then
                        bad[#bad + 1] = name
                    end
                end
            end
            table.sort(bad)
            return bad
        end
        assert.same({}, from_above("rmq_layer_core", { mid, top }))
        assert.same({}, from_above("rmq_layer_net_store", { top }))
        -- And the check sees a real dependency: rmqcore takes from both.
        local below = {}
        for name in pairs((symbols("rmqcore", "-u"))) do
            if mid[name] then
                below[#below + 1] = name
            end
        end
        assert.is_true(#below > 10)
    end)
end)
