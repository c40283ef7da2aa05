-- Subscriptions on the broker side (RocketMQ's FilterAPI and
-- ExpressionMessageFilter for TAG expressions): what a PULL's
-- `subscription` header or a heartbeat's SubscriptionData means, and the
-- tag hash codes the store matches consume queue entries against.
--
--   filter.build(topic, subString, expressionType) -> sub | nil, err
--   filter.normalize(sd)  a heartbeat's SubscriptionData, from any client
--                         (subVersion as number or string, arrays missing,
--                         rocketmq-client-cpp's atoi codeSet) -> sub
--   filter.codes(sub)     nil (everything matches) or {hash, ...} for
--                         st:get(topic, qid, offset, max, codes)
--
-- A sub is {topic=, subString=, tagsSet={...}, codeSet={...},
-- subVersion=, expressionType="TAG"|..., classFilterMode=bool}.  codeSet
-- is always rebuilt from the tags here (Java String.hashCode): the C++
-- client sends atoi(tag) in it (protocol.md 4.4), so a broker that
-- trusted it would filter out every message.  Pure: no I/O.
local core = require("rmq.core")
local message = require("rmq.message")
local strings = require("rmq.strings")

local M = {}

M.SUB_ALL = "*"

local trim = strings.trim   -- linear: subString is the client's

--- True for the TAG expression type (also when absent, as Java).
function M.is_tag(expression_type)
    return expression_type == nil or expression_type == "" or expression_type == "TAG"
end

local function integer(v)
    if type(v) == "string" then
        v = tonumber(v)
    end
    if type(v) ~= "number" then
        return nil
    end
    -- nil for what no integer is (NaN, +-inf, beyond 2^63): math.floor
    -- would hand those back as floats.
    return math.tointeger(v) or math.tointeger(math.floor(v))
end

M.integer = integer

-- Fills tagsSet/codeSet from subString (FilterAPI.buildSubscriptionData).
local function parse_tags(sub)
    local s = sub.subString
    if s == nil or s == "" or trim(s) == M.SUB_ALL then
        sub.subString = M.SUB_ALL
        return sub
    end
    -- Java's subString.split("\\|\\|"): cut at each "||" from the left;
    -- what follows the last one is the last part ("a|" stays "a|", as
    -- the heartbeat path and the C pull read it: broker/heartbeat.c).
    local seen = {}
    local pos = 1
    while pos do
        local bar = s:find("||", pos, true)
        local tag = trim(s:sub(pos, bar and bar - 1))
        if tag ~= "" and not seen[tag] then
            seen[tag] = true
            sub.tagsSet[#sub.tagsSet + 1] = tag
            sub.codeSet[#sub.codeSet + 1] = message.java_hash(tag)
        end
        pos = bar and bar + 2
    end
    return sub
end

--- The subscription a PULL with FLAG_SUBSCRIPTION describes.
-- Returns nil, reason when it cannot be parsed (SUBSCRIPTION_PARSE_FAILED).
function M.build(topic, sub_string, expression_type)
    if type(topic) ~= "string" or topic == "" then
        return nil, "no topic"
    end
    local sub = {
        topic = topic,
        subString = sub_string,
        tagsSet = {},
        codeSet = {},
        subVersion = core.now_ms(),
        expressionType = M.is_tag(expression_type) and "TAG" or expression_type,
        classFilterMode = false,
    }
    if sub.expressionType ~= "TAG" then
        -- SQL92 and friends: kept as written; the caller decides whether
        -- the broker supports them.
        if sub_string == nil or sub_string == "" then
            return nil, "empty " .. tostring(expression_type) .. " expression"
        end
        return sub
    end
    return parse_tags(sub)
end

--- A heartbeat's SubscriptionData, normalised.  Returns nil, reason when
--- it has no topic.
function M.normalize(sd)
    if type(sd) ~= "table" or type(sd.topic) ~= "string" or sd.topic == "" then
        return nil, "subscription without a topic"
    end
    local sub = {
        topic = sd.topic,
        subString = type(sd.subString) == "string" and sd.subString or M.SUB_ALL,
        tagsSet = {},
        codeSet = {},
        subVersion = integer(sd.subVersion) or 0,
        expressionType = M.is_tag(sd.expressionType) and "TAG" or tostring(sd.expressionType),
        classFilterMode = sd.classFilterMode == true,
    }
    if sub.expressionType ~= "TAG" then
        return sub
    end
    return parse_tags(sub)
end

--- Tag codes to filter by, or nil when every message matches.
function M.codes(sub, class_filter)
    if sub == nil or class_filter or sub.classFilterMode then
        return nil
    end
    if sub.expressionType ~= "TAG" or sub.subString == M.SUB_ALL then
        return nil
    end
    return sub.codeSet  -- may be empty ("||"): nothing matches, as Java
end

return M
