-- Topic and group name rules, for names read from bodies (heartbeats,
-- lock requests) and from records; request headers use the same rules
-- through rmq.header ("topic" and "group" fields), with the same texts.
--
--   local names = require "rmq.names"
--   names.topic(name) -> nil | reason     TopicValidator.validateTopic
--   names.group(name) -> nil | reason     Validators.checkGroup
--   names.show(s) -> s                    a value as a remark may show it
--
-- Both are RocketMQ 4.9.8's rules and remark texts: not blank (Java's
-- whitespace), only ^[%|a-zA-Z0-9_-]+$, at most 127 bytes for a topic and
-- 255 for a group; a name that passes cannot escape a store directory.
-- The group text names the group; what it shows is cut to 64 bytes, with
-- anything outside printable ASCII (and '"', '\') replaced by '?'.
local M = {}

M.TOPIC_MAX = 127
M.GROUP_MAX = 255
M.SHOW_MAX = 64

M.TOPIC_BLANK = "The specified topic is blank."
M.TOPIC_ILLEGAL = "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
M.TOPIC_LONG = "The specified topic is longer than topic max length."
M.GROUP_BLANK = "the specified group is blank"
M.GROUP_LONG = "the specified group is longer than group max length 255."

-- Java's Character.isWhitespace over ASCII: \t..\r, 0x1C..0x1F, space.
local function blank(s)
    return s:find("[^\t\n\v\f\r\28\29\30\31 ]") == nil
end

local function illegal(s)
    return s:find("[^%%|a-zA-Z0-9_%-]") ~= nil
end

function M.show(s)
    s = tostring(s)
    local cut = #s > M.SHOW_MAX
    local v = s:sub(1, M.SHOW_MAX):gsub('[^\32-\126]', "?"):gsub('["\\]', "?")
    return cut and (v .. "...") or v
end

function M.topic(name)
    if type(name) ~= "string" or blank(name) then
        return M.TOPIC_BLANK
    end
    if illegal(name) then
        return M.TOPIC_ILLEGAL
    end
    if #name > M.TOPIC_MAX then
        return M.TOPIC_LONG
    end
    return nil
end

function M.group(name)
    if type(name) ~= "string" or blank(name) then
        return M.GROUP_BLANK
    end
    if #name > M.GROUP_MAX then
        return M.GROUP_LONG
    end
    if illegal(name) then
        return ("the specified group[%s] contains illegal characters, allowing only ^[%%|a-zA-Z0-9_-]+$")
            :format(M.show(name))
    end
    return nil
end

return M
