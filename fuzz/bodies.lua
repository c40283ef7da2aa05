-- fuzz/bodies.lua: the Lua half of fuzz_bodies (see fuzz_bodies.c).
-- Returns function(body): every decoder the control plane runs on a
-- request body or a config file, in the same way its caller runs it:
--
--   REGISTER_BROKER   register.decode(body, {compressed=false}),
--                     {bare_wrapper=true} (brokers older than V3_0_11),
--                     {compressed=true} on the body as it is and on the
--                     body deflated (so that mutations of an inflated
--                     registration reach the record parser); what is
--                     accepted is registered in a private rmq.route and
--                     every route body it then writes must decode back;
--   HEART_BEAT        fastjson.decode, then the client registry's
--                     heartbeat (the C normaliser the HEART_BEAT
--                     processor uses) and each stored SubscriptionData;
--   SubscriptionGroupConfig  groups.normalize (the admin body, the
--                     subscriptionGroupTable entries of the file);
--   TopicConfig       topics.normalize (the body, and the
--                     topicConfigTable entries of topics.json or a
--                     GET_ALL_TOPIC_CONFIG reply); accepted configs are
--                     encoded as the broker writes them and must decode
--                     back to themselves.
--
-- A decoder's clean refusal (nil, err, or an error it raises under the
-- pcall its caller has) is fine.  A finding raises out of this function
-- (fuzz_bodies.c aborts): a value of the wrong shape, or an error where
-- the caller has no pcall (fastjson.decode, documented to return nil,
-- err, is called bare by the HEART_BEAT handler).
local core = require("rmq.core")
local message = require("rmq.message")
local route = require("rmq.route")
local fastjson = require("rmq.fastjson")
local register = require("rmq.namesrv.register")
local creg = require("rmq.client_registry")
local groups = require("rmq.broker.groups")
local topics = require("rmq.broker.topics")
local config_table = require("rmq.config_table")

local INT32_MIN, INT32_MAX = -2147483648, 2147483647
local MAX_INFLATED = 1 << 20
local MAX_ROUTES = 8   -- route bodies checked per registration

local function finding(fmt, ...)
    error("FINDING: " .. fmt:format(...), 2)
end

local function show(v)
    if type(v) == "string" then
        return ("%q"):format(#v > 60 and v:sub(1, 60) .. "..." or v)
    end
    return ("%s %s"):format(math.type(v) or type(v), tostring(v))
end

local function integer(v, lo, hi, where)
    if math.type(v) ~= "integer" then
        finding("%s is not an integer: %s", where, show(v))
    end
    if (lo and v < lo) or (hi and v > hi) then
        finding("%s = %d is outside %s..%s", where, v, tostring(lo), tostring(hi))
    end
end

local function string_(v, where, nonempty)
    if type(v) ~= "string" or (nonempty and v == "") then
        finding("%s is not a%s string: %s", where, nonempty and " non-empty" or "", show(v))
    end
end

local function array(t, where)
    if type(t) ~= "table" then
        finding("%s is not a table: %s", where, show(t))
    end
    local n = 0
    for _ in pairs(t) do
        n = n + 1
    end
    if n ~= #t then
        finding("%s is not an array (%d keys, length %d)", where, n, #t)
    end
end

-- {{{ REGISTER_BROKER

local function check_reg(reg, form, bare)
    if type(reg) ~= "table" then
        finding("%s: decode returned %s", form, show(reg))
    end
    local dv = reg.dv
    if type(dv) ~= "table" then
        finding("%s: dv is %s", form, show(dv))
    end
    integer(dv.counter, nil, nil, form .. " dv.counter")
    integer(dv.timestamp, nil, nil, form .. " dv.timestamp")
    if dv.state ~= nil then
        integer(dv.state, nil, nil, form .. " dv.state")
    end
    array(reg.topics, form .. " topics")
    local seen = {}
    for i, t in ipairs(reg.topics) do
        local where = ("%s topics[%d]"):format(form, i)
        if type(t) ~= "table" then
            finding("%s is %s", where, show(t))
        end
        string_(t.name, where .. ".name", true)
        integer(t.read, 0, INT32_MAX, where .. ".read")
        integer(t.write, 0, INT32_MAX, where .. ".write")
        integer(t.perm, INT32_MIN, INT32_MAX, where .. ".perm")
        integer(t.sysflag, INT32_MIN, INT32_MAX, where .. ".sysflag")
        if i > 1 and t.name < reg.topics[i - 1].name then
            finding("%s: topics not sorted by name (%s after %s)", form, show(t.name),
                    show(reg.topics[i - 1].name))
        end
        if form:match("compressed") and seen[t.name] then
            finding("%s: topic %s twice", form, show(t.name))
        end
        seen[t.name] = true
    end
    if bare then
        if reg.filters ~= nil then
            finding("%s: a bare wrapper has no filter server list", form)
        end
    else
        array(reg.filters, form .. " filters")
        for i, f in ipairs(reg.filters) do
            string_(f, ("%s filters[%d]"):format(form, i))
        end
    end
end

-- What the NameServer does with an accepted registration, and the
-- bodies it then answers with: they must be JSON a client can read.
local function check_route(reg, form)
    local rt = route.new()
    rt:register({
        cluster = "FuzzCluster", addr = "127.0.0.1:10911", name = "fuzz-broker", id = 0,
        dv = reg.dv, topics = reg.topics, filters = reg.filters, conn = 1,
    })
    -- The last of a name is what the registry keeps.
    local want = {}
    for _, t in ipairs(reg.topics) do
        want[t.name] = t
    end
    local n = 0
    for _, t in ipairs(reg.topics) do
        if n >= MAX_ROUTES then
            break
        end
        n = n + 1
        for _, std in ipairs({ true, false }) do
            local body = rt:route(t.name, std)
            if body == nil then
                finding("%s: no route for registered topic %s", form, show(t.name))
            end
            local r, err = fastjson.decode(body)
            if type(r) ~= "table" then
                finding("%s: route of %s is not JSON (%s): %s", form, show(t.name),
                        tostring(err), show(body))
            end
            local qd = type(r.queueDatas) == "table" and r.queueDatas[1]
            local w = want[t.name]
            if type(qd) ~= "table" or qd.readQueueNums ~= w.read or qd.writeQueueNums ~= w.write
                or qd.perm ~= w.perm or qd.topicSysFlag ~= w.sysflag then
                finding("%s: route of %s does not carry the registered queue data: %s", form,
                        show(t.name), show(body))
            end
        end
    end
    for _, body in ipairs({ rt:cluster_info(), rt:topic_list("all") }) do
        local r, err = fastjson.decode(body)
        if type(r) ~= "table" then
            finding("%s: registry body is not JSON (%s): %s", form, tostring(err), show(body))
        end
    end
end

local function try_register(body, opts, form)
    local ok, reg, err = pcall(register.decode, body, opts)
    if not ok then
        finding("%s: register.decode raised: %s", form, tostring(reg))
    end
    if reg == nil then
        if type(err) ~= "string" then
            finding("%s: refused without a reason: %s", form, show(err))
        end
        return
    end
    check_reg(reg, form, opts.bare_wrapper)
    check_route(reg, form)
end

-- }}}

-- {{{ HEART_BEAT

local function check_sub(sub, where)
    string_(sub.topic, where .. ".topic", true)
    string_(sub.subString, where .. ".subString")
    string_(sub.expressionType, where .. ".expressionType", true)
    integer(sub.subVersion, nil, nil, where .. ".subVersion")
    if type(sub.classFilterMode) ~= "boolean" then
        finding("%s.classFilterMode is %s", where, show(sub.classFilterMode))
    end
    array(sub.tagsSet, where .. ".tagsSet")
    array(sub.codeSet, where .. ".codeSet")
    if #sub.tagsSet ~= #sub.codeSet then
        finding("%s: %d tags, %d codes", where, #sub.tagsSet, #sub.codeSet)
    end
    local seen = {}
    for i, tag in ipairs(sub.tagsSet) do
        string_(tag, ("%s.tagsSet[%d]"):format(where, i), true)
        if tag:match("^%s") or tag:match("%s$") or tag:find("||", 1, true) or seen[tag] then
            finding("%s.tagsSet[%d] = %s: not a trimmed, unique tag", where, i, show(tag))
        end
        seen[tag] = true
        integer(sub.codeSet[i], INT32_MIN, INT32_MAX, ("%s.codeSet[%d]"):format(where, i))
        if sub.codeSet[i] ~= message.java_hash(tag) then
            finding("%s.codeSet[%d] is not the hash of %s", where, i, show(tag))
        end
    end
    if sub.expressionType == "TAG" and sub.subString == "*" and #sub.tagsSet > 0 then
        finding("%s: subscribes to everything but has tags", where)
    end
end

local function heartbeat(body)
    -- Bare, as the handler calls it: it must return, not raise.
    local ok, hb, err = pcall(fastjson.decode, body)
    if not ok then
        finding("fastjson.decode raised (the HEART_BEAT handler has no pcall): %s", tostring(hb))
    end
    if hb == nil and type(err) ~= "string" then
        finding("fastjson.decode returned nil without a reason")
    end
    if type(hb) ~= "table" then
        return
    end
    -- The client registry (C) normalises and stores the subscriptions,
    -- as the HEART_BEAT processor has it do.
    local r = creg.new()
    local rok, res = pcall(r.heartbeat, r, 1, body, "JAVA", 409, "a:1")
    if not rok then
        finding("the client registry raised on a heartbeat: %s", tostring(res))
    end
    if not res then
        return
    end
    local cds = type(hb.consumerDataSet) == "table" and hb.consumerDataSet or {}
    for i, cd in ipairs(cds) do
        if type(cd) == "table" and type(cd.groupName) == "string" and cd.groupName ~= "" then
            local sds = type(cd.subscriptionDataSet) == "table" and cd.subscriptionDataSet or {}
            for j, sd in ipairs(sds) do
                local sub = type(sd) == "table" and type(sd.topic) == "string"
                    and r:subscription(cd.groupName, sd.topic)
                if sub then
                    check_sub(sub, ("consumerDataSet[%d].subscriptionDataSet[%d]"):format(i, j))
                end
            end
        end
    end
end

-- }}}

-- {{{ SubscriptionGroupConfig, TopicConfig

-- A normalized config stored in a private C table (tmp), written as the
-- broker writes its file (tmp:encode_wrapper(), the configs under
-- `table_key`) and read back with `renormalize`: every field must come
-- back as it went in.
local function encoded_back(tmp, cfg, name_key, table_key, renormalize, where)
    local stored, perr = pcall(tmp.put, tmp, cfg)
    if not stored then
        finding("%s: the table refused a normalized config: %s", where, tostring(perr))
        return
    end
    local text = tmp:encode_wrapper()
    local doc = fastjson.decode(text)
    local back = type(doc) == "table" and type(doc[table_key]) == "table"
        and doc[table_key][cfg[name_key]]
    local again = type(back) == "table" and renormalize(back)
    if not again then
        finding("%s: the config does not survive its encoding: %s", where, show(text))
        return
    end
    for k, v in pairs(cfg) do
        if again[k] ~= v then
            finding("%s: %s changed in its encoding: %s", where, k, show(text))
        end
    end
end

local GROUP_TYPES = {
    brokerId = "integer", consumeBroadcastEnable = "boolean", consumeEnable = "boolean",
    consumeFromMinEnable = "boolean", groupName = "string",
    notifyConsumerIdsChangedEnable = "boolean", retryMaxTimes = "integer",
    retryQueueNums = "integer", whichBrokerWhenConsumeSlowly = "integer",
}

local function group(raw, name, where)
    local ok, cfg, err = pcall(groups.normalize, raw, name)
    if not ok then
        finding("%s: groups.normalize raised: %s", where, tostring(cfg))
    end
    if cfg == nil then
        if type(err) ~= "string" then
            finding("%s: refused without a reason", where)
        end
        return
    end
    for k, ty in pairs(GROUP_TYPES) do
        local v = cfg[k]
        if ty == "integer" then
            integer(v, INT32_MIN, INT32_MAX, where .. "." .. k)
        elseif not (v == nil and k == "groupName" and name == nil) and type(v) ~= ty then
            finding("%s.%s is %s, not a %s", where, k, show(v), ty)
        end
    end
    if type(cfg.groupName) == "string" and cfg.groupName ~= "" then
        -- As subscriptionGroup.json writes it: must read back the same.
        encoded_back(config_table.new_groups(), cfg, "groupName", "subscriptionGroupTable",
                     function(back) return groups.normalize(back, cfg.groupName) end, where)
    end
end

local function topic(name, raw, where)
    local ok, cfg, err = pcall(topics.normalize, name, raw)
    if not ok then
        finding("%s: topics.normalize raised: %s", where, tostring(cfg))
    end
    if cfg == nil then
        if type(err) ~= "string" then
            finding("%s: refused without a reason", where)
        end
        return
    end
    string_(cfg.topicName, where .. ".topicName", true)
    integer(cfg.readQueueNums, 0, 65535, where .. ".readQueueNums")
    integer(cfg.writeQueueNums, 0, 65535, where .. ".writeQueueNums")
    integer(cfg.perm, 0, 15, where .. ".perm")
    integer(cfg.topicSysFlag, INT32_MIN, INT32_MAX, where .. ".topicSysFlag")
    if not topics.FILTER_TYPES[cfg.topicFilterType] then
        finding("%s.topicFilterType is %s", where, show(cfg.topicFilterType))
    end
    if type(cfg.order) ~= "boolean" then
        finding("%s.order is %s", where, show(cfg.order))
    end
    -- As topics.json and GET_ALL_TOPIC_CONFIG write it: must read back the same.
    encoded_back(config_table.new_topics(), cfg, "topicName", "topicConfigTable",
                 function(back) return topics.normalize(cfg.topicName, back) end, where)
end

local function configs(body)
    local doc = fastjson.decode(body)
    if type(doc) ~= "table" then
        return
    end
    group(doc, nil, "SubscriptionGroupConfig")
    topic("FuzzTopic", doc, "TopicConfig")
    local tct = doc.topicConfigTable
    if type(tct) == "table" then
        for k, raw in pairs(tct) do
            if type(k) == "string" then
                topic(k, raw, "topicConfigTable[" .. show(k) .. "]")
            end
        end
    end
    local sgt = doc.subscriptionGroupTable
    if type(sgt) == "table" then
        for k, raw in pairs(sgt) do
            if type(k) == "string" then
                group(raw, k, "subscriptionGroupTable[" .. show(k) .. "]")
            end
        end
    end
end

-- }}}

return function(body)
    try_register(body, { compressed = false }, "json")
    try_register(body, { bare_wrapper = true }, "bare")
    try_register(body, { compressed = true, max_inflated = MAX_INFLATED }, "compressed")
    if #body <= MAX_INFLATED then
        try_register(core.deflate(body), { compressed = true, max_inflated = MAX_INFLATED },
                     "compressed(deflated input)")
    end
    heartbeat(body)
    configs(body)
end
