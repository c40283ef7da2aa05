-- Topic configs (RocketMQ's TopicConfigManager): every worker sees one
-- table (rmq.broker.tables over rmq.shared); the main thread loads
-- STORE/config/topics.json at start, creates the system topics, and
-- persists the table when it changed.
--
-- A TopicConfig is {topicName=, readQueueNums=, writeQueueNums=, perm=,
-- topicFilterType="SINGLE_TAG", topicSysFlag=0, order=false}.
local cjson = require("cjson")
local configfile = require("rmq.configfile")
local tables = require("rmq.broker.tables")

local M = {}

M.PERM_PRIORITY, M.PERM_READ, M.PERM_WRITE, M.PERM_INHERIT = 8, 4, 2, 1
M.DEFAULT_TOPIC = "TBW102"

local t = tables.new("broker.topics")
M.table = t

--- A TopicConfig with RocketMQ's defaults.
function M.config(name, read, write, perm)
    return {
        topicName = name,
        readQueueNums = read or 8,
        writeQueueNums = write or read or 8,
        perm = perm or (M.PERM_READ | M.PERM_WRITE),
        topicFilterType = "SINGLE_TAG",
        topicSysFlag = 0,
        order = false,
    }
end

-- Topics a client may not send to (protocol.md 6.2).
M.NOT_ALLOWED_SEND = {
    SCHEDULE_TOPIC_XXXX = true, RMQ_SYS_TRANS_HALF_TOPIC = true,
    RMQ_SYS_TRANS_OP_HALF_TOPIC = true, TRANS_CHECK_MAX_TIME_TOPIC = true,
    SELF_TEST_TOPIC = true, OFFSET_MOVED_EVENT = true,
}

--- True for topics the broker owns (admin may not create/delete them).
function M.is_system(name, conf)
    if M.NOT_ALLOWED_SEND[name] or name == M.DEFAULT_TOPIC or name == "BenchmarkTest"
        or name == "RMQ_SYS_TRACE_TOPIC" or name:sub(1, 8) == "rmq_sys_" then
        return true
    end
    if conf and (name == conf.brokerClusterName or name == conf.brokerName
        or name == conf.brokerClusterName .. "_REPLY_TOPIC") then
        return true
    end
    return false
end

--- nil when legal, else the reason (TopicValidator).
function M.check_name(name)
    if type(name) ~= "string" or name == "" then
        return "the topic name is blank"
    end
    if #name > 127 then
        return "the topic name is longer than 127 characters"
    end
    if not name:match("^[%%|%w_%-]+$") then
        return ("the topic[%s] contains illegal characters, allowing only ^[%%|a-zA-Z0-9_-]+$"):format(name)
    end
    return nil
end

local function system_topics(conf)
    local rw, all = M.PERM_READ | M.PERM_WRITE, M.PERM_READ | M.PERM_WRITE | M.PERM_INHERIT
    local list = {
        M.config("SELF_TEST_TOPIC", 1, 1, rw),
        M.config("BenchmarkTest", 1024, 1024, rw),
        M.config(conf.brokerClusterName, 16, 16, all),
        M.config(conf.brokerName, 1, 1, all),
        M.config("OFFSET_MOVED_EVENT", 1, 1, rw),
        M.config("SCHEDULE_TOPIC_XXXX", 18, 18, rw),
        M.config(conf.brokerClusterName .. "_REPLY_TOPIC", 1, 1, rw),
    }
    if conf.autoCreateTopicEnable then
        list[#list + 1] = M.config(M.DEFAULT_TOPIC, conf.defaultTopicQueueNums,
                                   conf.defaultTopicQueueNums, all)
    end
    if conf.traceTopicEnable then
        list[#list + 1] = M.config(conf.msgTraceTopicName or "RMQ_SYS_TRACE_TOPIC", 1, 1, rw)
    end
    return list
end

function M.path(conf)
    return conf.storePathRootDir .. "/config/topics.json"
end

--- Main thread, before the workers: the table from disk plus the system
-- topics.  Returns nil, err when the file is unreadable.
function M.load(conf)
    local doc, err = configfile.read(M.path(conf))
    if err then
        return nil, err
    end
    t.map:clear()
    if doc then
        for name, cfg in pairs(doc.topicConfigTable or {}) do
            t.map:set(name, cjson.encode(cfg))
        end
        if doc.dataVersion then
            t:set_data_version(doc.dataVersion)
        end
    end
    for _, cfg in ipairs(system_topics(conf)) do
        t:put(cfg.topicName, cfg, true)
    end
    if not conf.autoCreateTopicEnable then
        -- Without auto-create the template must not be inheritable
        -- (RocketMQ forces TBW102 to RW).
        local tbw = t:get(M.DEFAULT_TOPIC)
        if tbw and (tbw.perm & M.PERM_INHERIT) ~= 0 then
            tbw.perm = M.PERM_READ | M.PERM_WRITE
            t:put(M.DEFAULT_TOPIC, tbw)
        end
    end
    return true
end

function M.get(name)
    return t:get(name)
end

function M.all()
    return t:all()
end

--- Creates or replaces a topic (admin, auto-create).
function M.put(cfg)
    t:put(cfg.topicName, cfg)
end

function M.delete(name)
    return t:del(name)
end

--- {dataVersion=, topicConfigTable=} as RocketMQ's
-- TopicConfigSerializeWrapper (registration, GET_ALL_TOPIC_CONFIG, file).
function M.wrapper()
    return { dataVersion = t:data_version(), topicConfigTable = t:all() }
end

function M.encode_wrapper()
    local w = M.wrapper()
    if next(w.topicConfigTable) == nil then
        w.topicConfigTable = setmetatable({}, { __jsontype = "object" })
    end
    return cjson.encode(w)
end

local persisted = -1

--- Writes topics.json when the table changed since the last write.
function M.persist(conf, force)
    local v = t:version()
    if v == persisted and not force then
        return true
    end
    local ok, err = configfile.write(M.path(conf), M.encode_wrapper())
    if ok then
        persisted = v
    end
    return ok, err
end

--- Auto-creates `name` from the template topic the producer named
-- (createTopicInSendMessageMethod, protocol.md 6.2).  Returns the new
-- config, or nil, reason.
function M.create_from_template(name, template, queue_nums)
    local tpl = t:get(template)
    if tpl == nil then
        return nil, ("the default topic %s does not exist"):format(template)
    end
    if (tpl.perm & M.PERM_INHERIT) == 0 then
        return nil, ("the default topic %s may not be inherited (perm %d)"):format(template, tpl.perm)
    end
    local n = math.min(queue_nums or 4, tpl.writeQueueNums)
    local cfg = M.config(name, n, n, tpl.perm & ~M.PERM_INHERIT)
    cfg.topicFilterType = tpl.topicFilterType or "SINGLE_TAG"
    if not t:put(name, cfg, true) then
        return t:get(name)  -- another worker created it first
    end
    return cfg, nil, true
end

--- Creates a topic with fixed queue numbers if missing (%RETRY%, %DLQ%).
function M.ensure(name, queue_nums, perm)
    local cfg = t:get(name)
    if cfg then
        return cfg, false
    end
    cfg = M.config(name, queue_nums, queue_nums, perm or (M.PERM_READ | M.PERM_WRITE))
    local created = t:put(name, cfg, true)
    return t:get(name), created
end

return M
