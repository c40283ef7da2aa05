-- Topic routes on the client side: asking the NameServers
-- (GET_ROUTEINFO_BY_TOPIC) and turning a TopicRouteData into the queues a
-- producer may send to (TopicPublishInfo) or a consumer may read.
local cjson = require("cjson.safe")
local net = require("rmq.net")
local codes = require("rmq.codes")

local M = {}

M.PERM_READ = 4
M.PERM_WRITE = 2
M.MASTER_ID = "0"

--- Splits "a:9876;b:9876" into a list.
function M.parse_namesrv(addr)
    local out = {}
    for a in tostring(addr or ""):gmatch("[^;%s]+") do
        out[#out + 1] = a
    end
    return out
end

-- fastjson may key brokerAddrs by bare numbers ({0:"..."}) for old
-- clients; we ask as 4.9.8 (version 409), which gets quoted keys, but a
-- lenient pass costs nothing: quote bare integer keys before decoding.
local function lenient_decode(body)
    local t = cjson.decode(body)
    if t == nil then
        t = cjson.decode((body:gsub("([{,])(%-?%d+):", '%1"%2":')))
    end
    return t
end

M.decode_json = lenient_decode

--- Asks the NameServers in turn for a topic's route, signed with
-- `credentials` (rmq.client.credentials) when given.
-- @return route table, or nil, message, response code
function M.fetch(namesrvs, topic, timeout, start, credentials)
    local last_err, last_code = "no NameServer address (namesrvAddr)", nil
    local n = #namesrvs
    for i = 0, n - 1 do
        local addr = namesrvs[((start or 0) + i) % n + 1]
        local r, err = net.call(addr, {
            code = codes.request.GET_ROUTEINFO_BY_TOPIC,
            ext = { topic = topic },
            credentials = credentials,
        }, timeout)
        if r == nil then
            last_err, last_code = ("%s: %s"):format(addr, err), nil
        elseif r.code == codes.response.TOPIC_NOT_EXIST then
            return nil, r.remark or ("no route for topic " .. topic), r.code
        elseif r.code ~= 0 then
            last_err, last_code = ("%s: code %d %s"):format(addr, r.code, r.remark or ""), r.code
        else
            local route = lenient_decode(r.body or "")
            if type(route) ~= "table" then
                return nil, ("%s: unreadable route body for %s"):format(addr, topic)
            end
            return route
        end
    end
    return nil, last_err, last_code
end

local function by_name(list)
    local t = {}
    for _, bd in ipairs(list or {}) do
        t[bd.brokerName] = bd
    end
    return t
end

local function sorted_queue_datas(route)
    local qds = {}
    for i, qd in ipairs(route.queueDatas or {}) do
        qds[i] = qd
    end
    table.sort(qds, function(a, b) return a.brokerName < b.brokerName end)
    return qds
end

--- The writable queues of a route (TopicPublishInfo): for each QueueData
-- with write permission whose broker has a master, writeQueueNums queues.
-- With `default_queue_nums` (a TBW102 template route), each broker
-- offers min(that, readQueueNums) queues, as Java's auto-create path.
function M.publish_info(topic, route, default_queue_nums)
    local brokers = by_name(route.brokerDatas)
    local queues, addrs = {}, {}
    if route.orderTopicConf and route.orderTopicConf ~= "" then
        -- "brokerName:queueNum;..." decides the queues of an ordered topic.
        for name, num in route.orderTopicConf:gmatch("([^:;]+):(%d+)") do
            for q = 0, tonumber(num) - 1 do
                queues[#queues + 1] = { topic = topic, brokerName = name, queueId = q }
            end
        end
    else
        for _, qd in ipairs(sorted_queue_datas(route)) do
            local bd = brokers[qd.brokerName]
            local master = bd and bd.brokerAddrs and bd.brokerAddrs[M.MASTER_ID]
            if (qd.perm & M.PERM_WRITE) ~= 0 and master then
                local n = qd.writeQueueNums
                if default_queue_nums then
                    n = math.min(default_queue_nums, qd.readQueueNums)
                end
                for q = 0, n - 1 do
                    queues[#queues + 1] = { topic = topic, brokerName = qd.brokerName, queueId = q }
                end
            end
        end
    end
    for name, bd in pairs(brokers) do
        addrs[name] = bd.brokerAddrs or {}
    end
    return { topic = topic, queues = queues, brokers = addrs, route = route }
end

--- The readable queues of a route, sorted by broker name then queue id.
function M.subscribe_queues(topic, route)
    local out = {}
    for _, qd in ipairs(sorted_queue_datas(route)) do
        if (qd.perm & M.PERM_READ) ~= 0 then
            for q = 0, qd.readQueueNums - 1 do
                out[#out + 1] = { topic = topic, brokerName = qd.brokerName, queueId = q }
            end
        end
    end
    return out
end

--- The master address of a broker name in a publish info, or nil.
function M.master(info, broker_name)
    local addrs = info.brokers[broker_name]
    return addrs and addrs[M.MASTER_ID]
end

return M
