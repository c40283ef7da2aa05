-- Broker: server-side assignment (RocketMQ 5): QUERY_ASSIGNMENT (400),
-- SET_MESSAGE_REQUEST_MODE (401) and GET_ALL_MESSAGE_REQUEST_MODE (402),
-- so a 5.x consumer with client rebalance off asks the broker which
-- queues to consume and whether to PULL or POP them.  The allocation is
-- a policy (conf assignmentPolicy, default rmq.policy.assignment; a live
-- swap takes effect at the next request).  Served in Lua: a consumer asks
-- once per rebalance interval, and every rule here is the policy's.
--
-- The request modes (per topic and group) are kept in a shared map and
-- in STORE/config/messageRequestMode.json (5.x's file and format), written
-- on each change and read at start.
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local log = require("rmq.log")
local policy = require("rmq.policy")
local reply = require("rmq.reply")
local route = require("rmq.client.route")
local shared = require("rmq.shared")
local configfile = require("rmq.configfile")
local creg = require("rmq.client_registry")

local M = {}

local R = codes.response
local Q = codes.request

local modes = shared.map("broker.message_request_mode")

-- The file's body: {"messageRequestModeMap":{topic:{group:{...}}}}
local function file_body()
    local by_topic = {}
    for key, v in pairs(modes:all()) do
        local topic, group = key:match("^(.-)@(.*)$")
        local e = fastjson.decode(v)
        if topic and type(e) == "table" then
            by_topic[topic] = by_topic[topic] or {}
            by_topic[topic][group] = e
        end
    end
    return fastjson.encode({ messageRequestModeMap = by_topic }, true)
end

-- STORE/config/messageRequestMode.json (rmq.configfile.table: .bak
-- fallback, atomic save).
local file = configfile.table({ store_file = "messageRequestMode.json",
    reset = function() end,   -- the shared map starts empty
    decode = function(doc, p)
        if type(doc.messageRequestModeMap) ~= "table" then
            return nil, p .. ": not a messageRequestModeMap"
        end
        local n = 0
        for topic, groups in pairs(doc.messageRequestModeMap) do
            for group, e in pairs(type(groups) == "table" and groups or {}) do
                modes:set(topic .. "@" .. group, fastjson.encode(e))
                n = n + 1
            end
        end
        return n
    end,
    encode = file_body,
    version = function() return modes:version() end })

function M.main_init(b)
    local ok, err = file.load(b.conf or b)
    if not ok then
        log.warn("%s, ignored", err)
    end
end

function M.processors(b)
    local conf = b.conf
    local namesrvs = route.parse_namesrv(conf.namesrvAddr or "")
    local routes = {}   -- topic -> {queues=, at=} (this worker, 30 s)
    local assign, assign_gen

    local function resolve()
        if assign == nil or assign_gen ~= policy.generation() then
            assign = assert(policy.resolve(conf.assignmentPolicy, "assign", "rmq.policy.assignment"))
            assign_gen = policy.generation()
        end
        return assign
    end

    -- Every readable queue of the topic: the NameServer's route (every
    -- broker), else this broker's own config.
    local function queues_of(topic)
        local c = routes[topic]
        if c and core.mono_ms() - c.at < 30000 then
            return c.queues
        end
        local out = {}
        local r = #namesrvs > 0 and route.fetch(namesrvs, topic, 3000) or nil
        if r then
            for _, qd in ipairs(r.queueDatas or {}) do
                for q = 0, (qd.readQueueNums or 0) - 1 do
                    out[#out + 1] = { topic = topic, brokerName = qd.brokerName, queueId = q }
                end
            end
        else
            local cfg = b.topics.get(topic)
            for q = 0, cfg and cfg.readQueueNums - 1 or -1 do
                out[#out + 1] = { topic = topic, brokerName = conf.brokerName, queueId = q }
            end
        end
        if #out == 0 then
            return nil
        end
        table.sort(out, function(x, y)
            if x.brokerName ~= y.brokerName then
                return x.brokerName < y.brokerName
            end
            return x.queueId < y.queueId
        end)
        routes[topic] = { queues = out, at = core.mono_ms() }
        return out
    end

    local function mode_of(topic, group)
        local v = modes:get(topic .. "@" .. group)
        local e = v and fastjson.decode(v)
        if type(e) == "table" then
            return e.mode or "PULL", tonumber(e.popShareQueueNum) or 0
        end
        -- retry topics are always PULL (5.x)
        if topic:sub(1, 7) == "%RETRY%" then
            return "PULL", 0
        end
        return conf.defaultMessageRequestMode, conf.defaultPopShareQueueNum
    end

    local function query(ctx, cmd)
        local body = fastjson.decode(cmd.body or "")
        if type(body) ~= "table" or type(body.topic) ~= "string" or type(body.consumerGroup) ~= "string" then
            return reply.system_error("QueryAssignmentRequestBody: topic and consumerGroup are required")
        end
        local topic, group = body.topic, body.consumerGroup
        local mode, share = mode_of(topic, group)
        local queues = queues_of(topic)
        local assigned
        if queues then
            local cids = creg.shared():client_ids(group)
            table.sort(cids)
            local ok, res = pcall(resolve(), {
                topic = topic, group = group, clientId = tostring(body.clientId or ""),
                strategyName = tostring(body.strategyName or "AVG"),
                messageModel = body.messageModel == "BROADCASTING" and "BROADCASTING" or "CLUSTERING",
                mode = mode, popShareQueueNum = share, queues = queues, consumers = cids,
            })
            if not ok then
                log.warn("assignment policy failed for %s of %s: %s", topic, group, tostring(res))
            elseif res ~= nil then
                assigned = {}
                for _, q in ipairs(res) do
                    assigned[#assigned + 1] = {
                        attachments = {}, mode = mode,
                        messageQueue = { brokerName = q.brokerName, queueId = q.queueId, topic = q.topic or topic },
                    }
                end
                setmetatable(assigned, fastjson.array_mt)
            end
        end
        -- nil assignments: the client keeps what it has (5.x).
        return reply.ok({}, fastjson.encode({ messageQueueAssignments = assigned }))
    end

    local function set_mode(ctx, cmd)
        local body = fastjson.decode(cmd.body or "")
        if type(body) ~= "table" or type(body.topic) ~= "string" or type(body.consumerGroup) ~= "string" then
            return reply.system_error("SetMessageRequestModeRequestBody: topic and consumerGroup are required")
        end
        if body.topic:sub(1, 7) == "%RETRY%" then
            return reply.error(R.NO_PERMISSION, "retry topic is not allowed to set mode")
        end
        local mode = body.mode == "POP" and "POP" or "PULL"
        local e = { consumerGroup = body.consumerGroup, mode = mode, topic = body.topic,
                    popShareQueueNum = math.tointeger(tonumber(body.popShareQueueNum) or 0) or 0 }
        modes:set(body.topic .. "@" .. body.consumerGroup, fastjson.encode(e))
        local ok, err = file.persist(conf)
        if not ok then
            log.error("cannot persist %s: %s", file.path(conf), tostring(err))
        end
        return reply.ok()
    end

    local function get_all(ctx, cmd)
        return reply.ok({}, file_body())
    end

    return {
        [Q.QUERY_ASSIGNMENT] = query,
        [Q.SET_MESSAGE_REQUEST_MODE] = set_mode,
        [Q.GET_ALL_MESSAGE_REQUEST_MODE] = get_all,
    }
end

return M
