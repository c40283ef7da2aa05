-- The functions of `rmq repl`: every `rmq admin` command (lua/rmq/admin,
-- bound generically, so a new command appears here with no change) under
-- its snake_case name (topicRoute -> topic_route), and a few of the REPL's
-- own (send, consume, trace, namesrv, ...).
--
-- An admin command function takes its options as a table, by mqadmin's
-- long or short names (update_topic{topic = "T", c = "DefaultCluster",
-- r = 8}), or its required options positionally, in the order mqadmin
-- declares them (topic_route("T")); a command without required options
-- takes its first option with a value so (consumer_progress("g")).  A
-- table of the other options may follow.  It returns the command's result (a Lua table) or raises an
-- error whose tostring is one line and whose .exit is the admin exit code
-- (1 a server refused, 2 usage, 3 nothing answered).
--
--   local commands = require("rmq.repl.commands")
--   local session = commands.new({ namesrv = "127.0.0.1:9876" })
--   session.env.topic_route("T")    -- the functions, also in session.env
--   session.docs[name]              -- {usage=, desc=, options=} per function
--   session.formatter[result]       -- the command's own text for a result
local cjson = require("cjson")

local M = {}

M.EXIT_REFUSED, M.EXIT_USAGE, M.EXIT_UNREACHABLE = 1, 2, 3

local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.message end

--- An error the REPL shows as one line and -e/FILE turn into an exit code.
function M.error(exit, message)
    return setmetatable({ exit = exit, message = message }, Error)
end

local function raise(exit, message)
    error(M.error(exit, message), 0)
end

--- The admin exit code a raised value stands for (nil: a plain Lua error).
function M.exit_of(e)
    if type(e) == "table" and math.type(e.exit) == "integer" then
        return e.exit
    end
    return nil
end

--- topicRoute -> topic_route, queryMsgById -> query_msg_by_id,
--- clusterRT -> cluster_rt, checkMsgSendRT -> check_msg_send_rt.
function M.snake(name)
    local s = name:gsub("(%u+)(%u%l)", "%1_%2"):gsub("([%l%d])(%u)", "%1_%2")
    return s:lower()
end

-- {{{ the REPL's own functions, over rmq.client

local function need_string(fn, what, v)
    if type(v) ~= "string" or v == "" then
        raise(M.EXIT_USAGE, ("%s: %s (a string) is required"):format(fn, what))
    end
    return v
end

local function net_error(exit_hint, err, code)
    -- rmq.client reports a refusal with its response code; anything
    -- without one is a connection that did not answer.  One line: a
    -- remark may carry newlines (TOPIC_NOT_EXIST's FAQ link).
    err = tostring(err):gsub("%s*[\r\n]+%s*", " ")
    if code then
        local name = require("rmq.codes").response_name[code] or "UNKNOWN"
        raise(exit_hint or M.EXIT_REFUSED, ("%s (code %d): %s"):format(name, code, err))
    end
    raise(M.EXIT_UNREACHABLE, tostring(err))
end

local function builtins(session)
    local route = require("rmq.client.route")
    local net = require("rmq.net")
    local codes = require("rmq.codes")
    local fns, docs = {}, {}

    local function namesrvs()
        return route.parse_namesrv(session.namesrv)
    end

    local function call_namesrv(req, timeout)
        local last
        for _, addr in ipairs(namesrvs()) do
            local r, err = net.call(addr, req, timeout or session.timeout)
            if r then
                return r, addr
            end
            last = addr .. ": " .. tostring(err)
        end
        raise(M.EXIT_UNREACHABLE, last or "no NameServer address (namesrv(\"HOST:PORT\"))")
    end
    session.call_namesrv = call_namesrv

    docs.namesrv = { usage = "namesrv([ADDR])", desc = "show, or set, the NameServer address(es) used" }
    fns.namesrv = function(addr)
        if addr ~= nil then
            need_string("namesrv", "ADDR", addr)
            session.namesrv = addr
            session.names:invalidate()
        end
        return session.namesrv
    end

    docs.cluster_list = { usage = "cluster_list()", desc = "clusters and their brokers" }
    fns.cluster_list = function()
        local r, addr = call_namesrv({ code = codes.request.GET_BROKER_CLUSTER_INFO })
        if r.code ~= 0 then
            raise(M.EXIT_REFUSED, ("%s refused GET_BROKER_CLUSTER_INFO (code %d): %s"):format(addr, r.code,
                tostring(r.remark)))
        end
        local rows = require("rmq.tools.broker_status").brokers(route.decode_json(r.body or "{}") or {})
        return setmetatable(rows, { __columns = { "cluster", "broker", "id", "addr" } })
    end

    docs.topic_route = { usage = "topic_route(TOPIC)", desc = "a topic's route: queues and brokers" }
    fns.topic_route = function(topic)
        need_string("topic_route", "TOPIC", topic)
        local r, err, code = route.fetch(namesrvs(), topic, session.timeout)
        if not r then
            net_error(nil, err, code)
        end
        return r
    end

    docs.broker_status = { usage = "broker_status()", desc = "every broker's role, max offset, slave lag" }
    fns.broker_status = function()
        local rows, err = require("rmq.tools.broker_status").collect(namesrvs()[1], session.timeout)
        if not rows then
            raise(M.EXIT_UNREACHABLE, err)
        end
        return rows
    end

    docs.topic_list = { usage = "topic_list()", desc = "every topic the NameServer knows, sorted" }
    fns.topic_list = function()
        return session.names:topics(true)
    end

    docs.group_list = { usage = "group_list()", desc = "every subscription group of the masters, sorted" }
    fns.group_list = function()
        return session.names:groups(true)
    end

    docs.send = { usage = 'send(TOPIC, BODY [, {keys=, tags=, group=}])',
                  desc = "send one message; the send result" }
    fns.send = function(topic, body, o)
        need_string("send", "TOPIC", topic)
        if type(body) ~= "string" then
            raise(M.EXIT_USAGE, "send: BODY (a string) is required")
        end
        if o ~= nil and type(o) ~= "table" then
            raise(M.EXIT_USAGE, "send: the third argument is a table {keys=, tags=, group=}")
        end
        o = o or {}
        local p = require("rmq.client.producer").new({ namesrvAddr = session.namesrv,
                                                       producerGroup = o.group or "rmq_repl_producer" })
        local r, err, code = p:send({ topic = topic, body = body, keys = o.keys, tags = o.tags })
        if p.shutdown then
            p:shutdown()
        end
        if not r then
            net_error(nil, err, code)
        end
        session.names:invalidate()
        return { status = r.status, msgId = r.msgId, offsetMsgId = r.offsetMsgId,
                 brokerName = r.queue.brokerName, queueId = r.queue.queueId, queueOffset = r.queueOffset }
    end

    docs.consume = { usage = "consume(TOPIC, GROUP [, {count=, timeout=, expr=, from=}])",
                     desc = "consume up to count messages (waiting at most timeout ms); the messages" }
    fns.consume = function(topic, group, o)
        need_string("consume", "TOPIC", topic)
        need_string("consume", "GROUP", group)
        o = o or {}
        local count = math.tointeger(o.count or 10)
        local timeout = math.tointeger(o.timeout or 3000)
        if not count or count < 1 or not timeout or timeout < 0 then
            raise(M.EXIT_USAGE, "consume: count must be a positive integer, timeout a number of ms")
        end
        local consumer = require("rmq.client.consumer")
        local c = consumer.new({ namesrvAddr = session.namesrv, consumerGroup = group,
            consumeFromWhere = o.from == "last" and "CONSUME_FROM_LAST_OFFSET" or "CONSUME_FROM_FIRST_OFFSET" })
        c:subscribe(topic, o.expr or "*")
        local got = {}
        c:on_message(function(msgs)
            for _, m in ipairs(msgs) do
                if #got < count then
                    got[#got + 1] = { msgId = m.msgId, queueId = m.queueId, queueOffset = m.queueOffset,
                                      tags = m.tags, keys = m.keys, body = m.body }
                end
            end
            return "CONSUME_SUCCESS"
        end)
        local ok, err = pcall(c.start, c)
        if not ok then
            raise(M.EXIT_UNREACHABLE, "consume: " .. tostring(err))
        end
        local deadline = require("rmq.core").now_ms() + timeout
        while #got < count and require("rmq.core").now_ms() < deadline do
            net.sleep(50)
        end
        c:shutdown()
        return setmetatable(got, { __columns = { "queueId", "queueOffset", "msgId", "tags", "keys", "body" } })
    end

    docs.trace = { usage = "trace(MSGID [, TRACE_TOPIC])", desc = "a message's trace records" }
    fns.trace = function(msg_id, trace_topic)
        need_string("trace", "MSGID", msg_id)
        local recs, err = require("rmq.client.trace").query(namesrvs(), msg_id, { traceTopic = trace_topic })
        if not recs then
            raise(M.EXIT_UNREACHABLE, "trace: " .. tostring(err))
        end
        return recs
    end

    docs.json = { usage = "json(VALUE)", desc = "VALUE as JSON text" }
    fns.json = function(v)
        local ok, s = pcall(cjson.encode, v)
        if not ok then
            raise(M.EXIT_USAGE, "json: " .. tostring(s))
        end
        return s
    end
    return fns, docs
end

-- }}}

-- {{{ the admin commands, bound generically

-- The admin framework (lua/rmq/admin/init.lua), when this tree has it.
local function admin_module()
    local ok, admin = pcall(require, "rmq.admin")
    if ok and type(admin) == "table" and type(admin.commands) == "function" and type(admin.run) == "function" then
        return admin
    end
    return nil
end

-- Option values as the CLI would pass them: strings, true for flags.
local function option_value(v)
    if type(v) == "boolean" then
        return v or nil
    end
    return tostring(v)
end

local function admin_function(session, admin, cmd, fname)
    local by_name = {}
    local positional = {}
    for _, spec in ipairs(cmd.options or {}) do
        if spec[2] then
            by_name[spec[2]] = spec[2]
        end
        if spec[1] then
            by_name[spec[1]] = spec[2]
        end
        if spec.required and spec.arg then
            positional[#positional + 1] = spec[2]
        end
    end
    -- Without required options, the first option with a value may come
    -- first: consumer_progress("g"), broker_status("HOST:PORT").
    local optional_first = false
    if #positional == 0 then
        for _, spec in ipairs(cmd.options or {}) do
            if spec.arg and spec[2] then
                positional[1], optional_first = spec[2], true
                break
            end
        end
    end
    by_name.namesrvAddr, by_name.n = "namesrvAddr", "namesrvAddr"
    local function usage()
        local parts = {}
        for _, p in ipairs(positional) do
            parts[#parts + 1] = p:upper()
        end
        if #parts == 0 then
            return fname .. "([{OPTIONS}])"
        elseif optional_first then
            return ("%s([%s] [, {OPTIONS}])"):format(fname, parts[1])
        end
        return ("%s(%s [, {OPTIONS}])"):format(fname, table.concat(parts, ", "))
    end
    local fn = function(...)
        local argv = table.pack(...)
        local o = {}
        local npos = 0
        for i = 1, argv.n do
            local v = argv[i]
            if type(v) == "table" and i == argv.n then
                for k, x in pairs(v) do
                    local long = type(k) == "string" and by_name[k]
                    if not long then
                        raise(M.EXIT_USAGE, ("%s: no option '%s' (help(%q) lists them)"):format(fname,
                            tostring(k), fname))
                    end
                    o[long] = option_value(x)
                end
            elseif v ~= nil and type(v) ~= "table" then
                npos = npos + 1
                local name = positional[npos]
                if name == nil then
                    raise(M.EXIT_USAGE, ("%s: too many arguments; usage: %s"):format(fname, usage()))
                end
                o[name] = option_value(v)
            else
                raise(M.EXIT_USAGE, ("%s: usage: %s"):format(fname, usage()))
            end
        end
        local ctx = admin.context({ namesrvAddr = o.namesrvAddr or session.namesrv, timeout = session.timeout })
        o.namesrvAddr = nil
        local res, err = admin.run(cmd.name, o, ctx)
        session.names:invalidate()   -- a command may have made or removed a topic or group
        if res == nil then
            if M.exit_of(err) == M.EXIT_USAGE then
                raise(M.EXIT_USAGE, ("%s: %s (usage: %s)"):format(fname, tostring(err), usage()))
            end
            error(err, 0)
        end
        if type(res) == "table" and cmd.format then
            -- The command's own table, as `rmq admin` prints it; where that
            -- is JSON (topicRoute, as mqadmin's), the REPL's tables read better.
            session.formatter[res] = function(r)
                local text = cmd.format(r, o)
                if type(text) ~= "string" or text:match("^%s*[%[{]") then
                    return nil
                end
                return text
            end
        end
        return res
    end
    local options = {}
    for _, spec in ipairs(cmd.options or {}) do
        options[#options + 1] = { short = spec[1], long = spec[2], arg = spec.arg, required = spec.required,
                                  desc = spec.desc }
    end
    return fn, { usage = usage(), desc = cmd.desc or "", options = options, admin = cmd.name }
end

-- }}}

--- A REPL session: its environment of functions, and their docs.
--- opts: namesrv ("a:9876;b:9876"), timeout (ms), names (a names cache).
function M.new(opts)
    local session = {
        namesrv = opts.namesrv, timeout = opts.timeout or 5000, names = opts.names,
        formatter = setmetatable({}, { __mode = "k" }), docs = {},
    }
    local env = {}
    local own, own_docs = builtins(session)
    local admin = admin_module()
    if admin then
        local reg, order = admin.commands()
        for _, name in ipairs(order) do
            local fname = M.snake(name)
            env[fname], session.docs[fname] = admin_function(session, admin, reg[name], fname)
        end
    end
    -- The REPL's own fill in what admin does not have (admin's topicRoute
    -- wins over the fallback topic_route, for example); namesrv, send,
    -- consume, trace and json are always ours.
    local always = { namesrv = true, send = true, consume = true, trace = true, json = true }
    for name, fn in pairs(own) do
        if env[name] == nil or always[name] then
            env[name], session.docs[name] = fn, own_docs[name]
        end
    end
    session.env = env
    return session
end

return M
