-- Reply tables.  A handler returns one of these (or nil for "no reply");
-- C encodes it in the request's serialize type with the request's opaque
-- and the response flag.  Shape: {code=, remark=, ext={k=v}, body=}.
local codes = require("rmq.codes")

local M = {}

--- A SUCCESS reply.
-- @param ext   table of extFields (string values), or nil
-- @param body  string, or nil
function M.ok(ext, body)
    return { code = 0, ext = ext, body = body }
end

--- A refusal with a RocketMQ response code and a remark.
function M.error(code, remark)
    return { code = code, remark = remark }
end

--- What RocketMQ answers for a code with no processor (protocol.md 1.7).
function M.not_supported(cmd)
    return {
        code = codes.response.REQUEST_CODE_NOT_SUPPORTED,
        remark = " request type " .. cmd.code .. " not supported",
    }
end

return M
