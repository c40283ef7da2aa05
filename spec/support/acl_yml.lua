-- plain_acl.yml files (4.9.8's distribution/conf layout) for specs and
-- benchmarks, from tables.
--
--   local acl_yml = require("support.acl_yml")
--   local path = acl_yml.write({
--       white = { "10.10.103.*" },          -- globalWhiteRemoteAddresses
--       accounts = { { accessKey = "RocketMQ", secretKey = "12345678", admin = false,
--                      defaultTopicPerm = "DENY", defaultGroupPerm = "SUB",
--                      topicPerms = { "T=PUB|SUB" }, groupPerms = { "G=SUB" } } },
--   })                                      -- a new temp dir's plain_acl.yml
local server = require("support.server")

local M = {}

local function list(out, indent, key, items)
    if items and #items > 0 then
        out[#out + 1] = indent .. key .. ":"
        for _, v in ipairs(items) do
            out[#out + 1] = indent .. "  - " .. v
        end
    end
end

--- The YAML text of t.
function M.text(t)
    local out = {}
    list(out, "", "globalWhiteRemoteAddresses", t.white)
    out[#out + 1] = "accounts:"
    for _, a in ipairs(t.accounts or {}) do
        out[#out + 1] = "  - accessKey: " .. a.accessKey
        out[#out + 1] = "    secretKey: " .. a.secretKey
        out[#out + 1] = "    whiteRemoteAddress:" .. (a.whiteRemoteAddress and (" " .. a.whiteRemoteAddress) or "")
        out[#out + 1] = "    admin: " .. tostring(a.admin == true)
        for _, k in ipairs({ "defaultTopicPerm", "defaultGroupPerm" }) do
            if a[k] then
                out[#out + 1] = ("    %s: %s"):format(k, a[k])
            end
        end
        list(out, "    ", "topicPerms", a.topicPerms)
        list(out, "    ", "groupPerms", a.groupPerms)
    end
    out[#out + 1] = ""
    return table.concat(out, "\n")
end

--- Writes t to path (default: plain_acl.yml in a new temp dir); the path.
function M.write(t, path)
    path = path or (server.tmpdir() .. "/plain_acl.yml")
    local f = assert(io.open(path, "w"))
    f:write(M.text(t))
    f:close()
    return path
end

return M
