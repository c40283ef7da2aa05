-- The Node.js scripts of the interop specs (spec/interop/*, their npm
-- packages installed by scripts/test.sh): one check that node and a
-- package are here, one way to run a script and read its result.  Used
-- by support.grpc_node and support.ali_ons.
--
--   local node = require("support.node")
--   node.check(dir, package)   raises unless node and dir/node_modules/package are here
--   local finish = node.spawn(dir, script, env, out, err)
--       node script in dir, env {"K=V", ...} (PATH added), stdout and
--       stderr to the files out and err; finish(wait_ms) waits (then
--       kills) and returns: exit status (nil: killed), the last JSON
--       line of stdout decoded (or nil), stdout, stderr
local cjson = require("cjson")
local children = require("support.children")
local server = require("support.server")

local M = {}

function M.check(dir, package)
    local f = io.open(dir .. "/node_modules/" .. package .. "/package.json", "r")
    if f then
        f:close()
    end
    assert(f and os.execute("command -v node >/dev/null 2>&1"),
           "node and " .. dir .. "/node_modules (npm ci) are needed")
end

function M.spawn(dir, script, env, out, err)
    local envs = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin") }
    for _, kv in ipairs(env) do
        envs[#envs + 1] = kv
    end
    local p = assert(children.spawn({ file = "node", args = { script }, cwd = dir, stdout = out, stderr = err,
                                  env = envs }))
    return function(wait_ms)
        local status = p:wait(wait_ms)
        if status == nil then
            p:kill(9)
            p:wait(5000)
        end
        local text = server.read_file(out)
        local line = text:match("(%b{})%s*$")
        return status, line and cjson.decode(line), text, server.read_file(err)
    end
end

return M
