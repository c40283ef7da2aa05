-- Reply tables, and the one place processors build refusals.  A handler
-- returns one of these (or nil for "no reply"); C encodes it in the
-- request's serialize type with the request's opaque and the response
-- flag.  Shape: {code=, remark=, ext={k=v}, body=}.
--
-- A refusal's remark is the text RocketMQ 4.9.8 writes (clients and
-- mqadmin show it, some match on it), byte for byte; the FAQ link and the
-- texts several processors share are written here only.  Header fields a
-- processor declares are refused by rmq.header in C with the same
-- "the custom field <x> is null" text as null_field().
--
--   reply.ok([ext [, body]])
--   reply.error(code, remark [, ext])       any refusal (ext: a PULL's
--                                           empty extFields, as Java's)
--   reply.system_error(remark [, ext])      SYSTEM_ERROR
--   reply.null_field(name)                  a missing @CFNotNull field
--   reply.faq(text)                         text .. FAQ (FAQUrl.suggestTodo)
--   reply.broker_forbidden(ip, what [, ext])   the broker's permission
--   reply.topic_forbidden(topic, what [, ext]) a topic's permission
--                                           (what: "sending" / "pulling")
--   reply.filter_not_supported(expression_type [, ext])
--   reply.black_list()                      an update of a black-listed key
--   reply.not_supported(cmd)                a code with no processor
local codes = require("rmq.codes")

local R = codes.response

local M = {}

-- FAQUrl.suggestTodo(...): every 4.9.8 FAQ link is this page.
M.FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

--- A SUCCESS reply.
-- @param ext   table of extFields (string values), or nil
-- @param body  string, or nil
function M.ok(ext, body)
    return { code = R.SUCCESS, ext = ext, body = body }
end

--- A refusal with a RocketMQ response code and a remark.
function M.error(code, remark, ext)
    return { code = code, remark = remark, ext = ext }
end

function M.system_error(remark, ext)
    return { code = R.SYSTEM_ERROR, remark = remark, ext = ext }
end

--- What Java's header decoding answers for a missing @CFNotNull field.
function M.null_field(name)
    return M.system_error("the custom field <" .. name .. "> is null")
end

function M.faq(text)
    return text .. M.FAQ
end

function M.broker_forbidden(ip, what, ext)
    return M.error(R.NO_PERMISSION, ("the broker[%s] %s message is forbidden"):format(ip, what), ext)
end

function M.topic_forbidden(topic, what, ext)
    return M.error(R.NO_PERMISSION, ("the topic[%s] %s message is forbidden"):format(topic, what), ext)
end

--- A subscription whose expression type is not TAG (no SQL92 filter).
function M.filter_not_supported(expression_type, ext)
    return M.system_error("The broker does not support consumer to filter message by "
        .. tostring(expression_type), ext)
end

function M.black_list()
    return M.error(R.NO_PERMISSION, "Can not update config in black list.")
end

--- What RocketMQ answers for a code with no processor (protocol.md 1.7).
function M.not_supported(cmd)
    return M.error(R.REQUEST_CODE_NOT_SUPPORTED, " request type " .. cmd.code .. " not supported")
end

return M
