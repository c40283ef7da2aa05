-- The `rmq` command line.  Each command is {usage=, help=, run=function(
-- opts, args) -> exit code}; options are parsed by the table in `spec`.
-- Errors: one clear line on stderr and a non-zero exit: 2 for a usage
-- error (unknown command or option, a missing value), 1 otherwise.
-- `rmq help`, `rmq COMMAND --help` (or -h, anywhere after the command)
-- print the usage and the options.
--
-- Every command that talks to a server takes --access-key AK and
-- --secret-key SK (and --security-token T), else RMQ_ACCESS_KEY /
-- RMQ_SECRET_KEY (/ RMQ_SECURITY_TOKEN) from the environment: the flags
-- win, and a pair comes whole from one place.  They become the default
-- credentials of the process (net.credentials), so every request it
-- sends is signed as ACL 1.0 clients sign (rmq.client.credentials).
local core = require("rmq.core")
local cjson = require("cjson")

local M = {}

local commands = {}

-- {"-n", "--namesrv"} style option specs: name -> {short, long, arg?}.
-- With keep_unknown, options not in spec are kept among the arguments.
local function parse(spec, argv, keep_unknown)
    local opts, args = {}, {}
    local by = {}
    for name, s in pairs(spec) do
        for _, flag in ipairs(s) do
            by[flag] = { name = name, arg = s.arg }
        end
    end
    local i = 1
    while i <= #argv do
        local a = argv[i]
        local flag, inline = a:match("^(%-%-[^=]+)=(.*)$")
        flag = flag or a
        local s = by[flag]
        if s == nil and a:sub(1, 1) == "-" and #a > 1 and a ~= "-" and not keep_unknown then
            return nil, ("unknown option '%s'"):format(a)
        elseif s == nil then
            args[#args + 1] = a
        elseif s.arg then
            local v = inline
            if v == nil then
                i = i + 1
                v = argv[i]
            end
            if v == nil then
                return nil, ("option %s needs a value"):format(flag)
            end
            opts[s.name] = v
        else
            opts[s.name] = true
        end
        i = i + 1
    end
    return opts, args
end

local EXIT_FAILED, EXIT_USAGE = 1, 2

-- The credential options, added to the spec of every command that talks
-- to a server (all but those in NO_CREDENTIALS).
local CRED_SPEC = {
    accessKey = { "--access-key", arg = true },
    secretKey = { "--secret-key", arg = true },
    securityToken = { "--security-token", arg = true },
}
local NO_CREDENTIALS = { version = true, console = true }

-- Removes the credential options from argv (a raw command's): opts
-- fields and the other arguments, or nil, err.
local function take_credentials(argv)
    return parse(CRED_SPEC, argv, true)
end

-- The process's credentials from the options (else the environment),
-- set as the default every request is signed with.  nil, err when a
-- pair is incomplete.
local function apply_credentials(opts)
    local creds = require("rmq.client.credentials")
    local ok, c = pcall(function()
        if opts.accessKey or opts.secretKey or opts.securityToken then
            return creds.of(opts)
        end
        return creds.from_env()
    end)
    if not ok then
        -- The names the user gave them by.
        local names = { accessKey = "--access-key", secretKey = "--secret-key",
                        securityToken = "--security-token" }
        if not (opts.accessKey or opts.secretKey or opts.securityToken) then
            names = { accessKey = creds.ENV_ACCESS_KEY, secretKey = creds.ENV_SECRET_KEY,
                      securityToken = creds.ENV_SECURITY_TOKEN }
        end
        return nil, (tostring(c):gsub("%a+", names))
    end
    require("rmq.net").credentials(c)
    return true
end

local function fail(msg, code)
    io.stderr:write("rmq: " .. msg .. "\n")
    return code or EXIT_FAILED
end

local function namesrv_of(opts)
    return opts.namesrv or os.getenv("NAMESRV_ADDR") or "127.0.0.1:9876"
end

-- `rmq send --grpc`: QueryRoute (the topic must exist: a clear error
-- otherwise), then SendMessage, on one connection to the endpoint.
function M.grpc_send(opts, body, timer)
    local grpc = require("rmq.client.grpc")
    local c, err = grpc.connect(opts.namesrv or "127.0.0.1:8081")
    if not c then
        return fail("send: " .. err)
    end
    local ok, route_err = c:query_route(opts.topic)
    if not ok then
        c:close()
        return fail("send: " .. route_err)
    end
    local keys
    if opts.keys then
        keys = {}
        for k in tostring(opts.keys):gmatch("[^ ,]+") do
            keys[#keys + 1] = k
        end
    end
    local at = timer.deliverTimeMs or (timer.delayTimeMs and (os.time() * 1000 + timer.delayTimeMs))
    local e, serr = c:send(opts.topic, body, { tag = opts.tags, keys = keys, deliver_at_ms = at })
    c:close()
    if not e then
        return fail("send failed: " .. serr)
    end
    if opts.json then
        print(cjson.encode({ status = "SEND_OK", msgId = e.message_id, queueOffset = e.offset,
                             transactionId = e.transaction_id }))
    else
        print(("SEND_OK msgId=%s queueOffset=%s"):format(e.message_id, tostring(e.offset)))
    end
    return 0
end

-- `rmq consume --grpc`: ReceiveMessage (long polling 15 s, up to 32 at
-- a time) and one AckMessage for what was printed, until COUNT.
function M.grpc_consume(opts, show)
    local grpc = require("rmq.client.grpc")
    local invisible = tonumber(opts.invisible or 60000)
    if invisible == nil then
        return fail("consume: --invisible MS must be a number")
    end
    local c, err = grpc.connect(opts.namesrv or "127.0.0.1:8081")
    if not c then
        return fail("consume: " .. err)
    end
    local limit = tonumber(opts.count)
    local seen = 0
    while limit == nil or seen < limit do
        local msgs, rerr = c:receive(opts.group, opts.topic, {
            batch = limit and math.min(32, limit - seen) or 32, poll_ms = 15000,
            invisible_ms = math.tointeger(invisible), expression = opts.sql or opts.expr, sql = opts.sql ~= nil,
        })
        if not msgs then
            c:close()
            return fail("consume: " .. rerr)
        end
        for _, m in ipairs(msgs) do
            local sp = m.system_properties
            show({ msgId = sp.message_id, topic = m.topic.name, queueId = sp.queue_id, queueOffset = sp.queue_offset,
                   tags = sp.tag, keys = sp.keys and table.concat(sp.keys, " ") or nil, body = m.body,
                   bornHost = sp.born_host, reconsumeTimes = (sp.delivery_attempt or 1) - 1,
                   storeTimestamp = sp.store_timestamp and (sp.store_timestamp.seconds * 1000
                       + sp.store_timestamp.nanos // 1000000) or nil })
            seen = seen + 1
        end
        if #msgs > 0 then
            local ok, aerr = c:ack(opts.group, opts.topic, msgs)
            if not ok then
                io.stderr:write("consume: ack: " .. tostring(aerr) .. "\n")
            end
        end
    end
    c:close()
    return 0
end

commands.version = {
    usage = "rmq version",
    help = "print the version and the git revision it was built from",
    spec = {},
    run = function()
        print(("rmq %s (git %s)"):format(core.version, core.git_rev))
        return 0
    end,
}

commands.send = {
    usage = "rmq send -n NAMESRV -t TOPIC [-k KEYS] [--tags TAGS] [--delay DURATION | --deliver-at MS | "
        .. "--delay-level N] [--transaction commit|rollback] [--json] BODY|-\n"
        .. "       rmq send --grpc -n ENDPOINT -t TOPIC [-k KEYS] [--tags TAGS] [--delay DURATION | --deliver-at MS] "
        .. "[--json] BODY|-",
    help = "send one message (BODY, or stdin for -); --delay 90s|1500ms|2h|3d or --deliver-at EPOCH_MS: "
        .. "a timer message (held by the broker until then); --delay-level: one of messageDelayLevel's levels; "
        .. "--transaction: as a half message, then commit or roll back; --grpc: through RocketMQ 5's gRPC "
        .. "API at ENDPOINT (an rmq grpcServerPort, or a 5.x proxy), as the 5.x SDKs send",
    spec = {
        namesrv = { "-n", "--namesrv", arg = true },
        grpc = { "--grpc" },
        topic = { "-t", "--topic", arg = true },
        keys = { "-k", "--keys", arg = true },
        tags = { "--tags", arg = true },
        group = { "-g", "--group", arg = true },
        transaction = { "--transaction", arg = true },
        delay = { "--delay", arg = true },
        deliver_at = { "--deliver-at", arg = true },
        delay_level = { "--delay-level", arg = true },
        json = { "--json" },
    },
    run = function(opts, args)
        if not opts.topic then
            return fail("send: -t TOPIC is required")
        end
        local timer = {}
        if opts.delay then
            local n, unit = tostring(opts.delay):match("^(%d+)(%a*)$")
            local scale = ({ ms = 1, s = 1000, [""] = 1000, m = 60000, h = 3600000, d = 86400000 })[unit or "?"]
            if n == nil or scale == nil or #n > 12 then
                return fail("send: --delay takes a duration such as 1500ms, 90s, 5m, 2h or 3d", EXIT_USAGE)
            end
            timer.delayTimeMs = math.tointeger(tonumber(n)) * scale
        end
        if opts.deliver_at then
            if not tostring(opts.deliver_at):match("^%d+$") or #opts.deliver_at > 15 then
                return fail("send: --deliver-at takes a time in ms since the epoch", EXIT_USAGE)
            end
            timer.deliverTimeMs = math.tointeger(tonumber(opts.deliver_at))
        end
        if opts.delay_level then
            local lv = tostring(opts.delay_level):match("^%d+$") and math.tointeger(tonumber(opts.delay_level))
            if not lv or lv < 1 or lv > 1000 then
                return fail("send: --delay-level takes a level number (1 = the first of messageDelayLevel)",
                            EXIT_USAGE)
            end
            timer.delayTimeLevel = lv
        end
        if (opts.delay and 1 or 0) + (opts.deliver_at and 1 or 0) + (opts.delay_level and 1 or 0) > 1 then
            return fail("send: --delay, --deliver-at and --delay-level are exclusive", EXIT_USAGE)
        end
        local decision = opts.transaction and opts.transaction:upper()
        if decision and decision ~= "COMMIT" and decision ~= "ROLLBACK" then
            return fail("send: --transaction takes commit or rollback", EXIT_USAGE)
        end
        local body = args[1]
        if body == nil then
            return fail("send: a BODY (or - for stdin) is required")
        end
        if body == "-" then
            body = io.stdin:read("a")
        end
        if opts.grpc then
            if decision or timer.delayTimeLevel then
                return fail("send: --grpc takes neither --transaction nor --delay-level", EXIT_USAGE)
            end
            return M.grpc_send(opts, body, timer)
        end
        local msg = { topic = opts.topic, body = body, keys = opts.keys, tags = opts.tags,
                      delayTimeMs = timer.delayTimeMs, deliverTimeMs = timer.deliverTimeMs,
                      delayTimeLevel = timer.delayTimeLevel }
        local popts = { namesrvAddr = namesrv_of(opts), producerGroup = opts.group or "rmq_cli_producer" }
        local r, err, code
        if decision then
            local tp = require("rmq.client.transaction").new(popts)
            r, err, code = tp:send_in_transaction(msg, function() return decision end)
            tp:shutdown()   -- after END_TRANSACTION, on the same connection
            if r and err then
                return fail(("send: the half message was stored (msgId %s) but %s"):format(r.msgId, err))
            end
        else
            r, err, code = require("rmq.client.producer").new(popts):send(msg)
        end
        if not r then
            return fail(("send failed%s: %s"):format(code and (" (code " .. code .. ")") or "", err))
        end
        if opts.json then
            print(cjson.encode({ status = r.status, msgId = r.msgId, offsetMsgId = r.offsetMsgId,
                                 brokerName = r.queue.brokerName, queueId = r.queue.queueId,
                                 queueOffset = r.queueOffset, localTransactionState = r.localTransactionState }))
        else
            print(("%s msgId=%s offsetMsgId=%s queue=%s:%d queueOffset=%s%s"):format(r.status, r.msgId,
                tostring(r.offsetMsgId), r.queue.brokerName, r.queue.queueId, tostring(r.queueOffset),
                r.localTransactionState and (" transaction=" .. r.localTransactionState) or ""))
        end
        return 0
    end,
}

commands["topic-route"] = {
    usage = "rmq topic-route -n NAMESRV [--json] TOPIC",
    help = "show a topic's route (queues and brokers)",
    spec = { namesrv = { "-n", "--namesrv", arg = true }, json = { "--json" } },
    run = function(opts, args)
        local topic = args[1]
        if not topic then
            return fail("topic-route: a TOPIC is required")
        end
        local route = require("rmq.client.route")
        local r, err = route.fetch(route.parse_namesrv(namesrv_of(opts)), topic, 3000)
        if not r then
            return fail("topic-route: " .. err)
        end
        if opts.json then
            print(cjson.encode(r))
            return 0
        end
        print(("%-20s %-8s %-8s %-6s %s"):format("#Broker", "#Read", "#Write", "#Perm", "#Addresses"))
        local addrs = {}
        for _, bd in ipairs(r.brokerDatas or {}) do
            local list = {}
            for id, a in pairs(bd.brokerAddrs or {}) do list[#list + 1] = id .. "=" .. a end
            table.sort(list)
            addrs[bd.brokerName] = table.concat(list, " ")
        end
        for _, qd in ipairs(r.queueDatas or {}) do
            print(("%-20s %-8d %-8d %-6d %s"):format(qd.brokerName, qd.readQueueNums, qd.writeQueueNums,
                qd.perm, addrs[qd.brokerName] or "-"))
        end
        return 0
    end,
}

commands.consume = {
    usage = "rmq consume -n NAMESRV -t TOPIC -g GROUP [-e TAGS | --sql EXPR] [-c COUNT] [--from first|last] [--json]\n"
        .. "                   [--pop [--invisible MS] [--order]]\n"
        .. "       rmq consume --grpc -n ENDPOINT -t TOPIC -g GROUP [-e TAGS | --sql EXPR] [-c COUNT] [--json] "
        .. "[--invisible MS]",
    help = "consume messages and print them (until COUNT, or Ctrl-C); --pop: as a RocketMQ 5 POP consumer "
        .. "(each message acknowledged once printed); --grpc: as a 5.x SimpleConsumer through the gRPC API at "
        .. "ENDPOINT (ReceiveMessage, then AckMessage once printed; a new group starts at the queues' end)",
    spec = {
        grpc = { "--grpc" },
        namesrv = { "-n", "--namesrv", arg = true },
        topic = { "-t", "--topic", arg = true },
        group = { "-g", "--group", arg = true },
        expr = { "-e", "--expr", arg = true },
        sql = { "--sql", arg = true },
        count = { "-c", "--count", arg = true },
        from = { "--from", arg = true },
        json = { "--json" },
        pop = { "--pop" },
        invisible = { "--invisible", arg = true },
        order = { "--order" },
    },
    run = function(opts)
        if not opts.topic or not opts.group then
            return fail("consume: -t TOPIC and -g GROUP are required")
        end
        if opts.sql and opts.expr then
            return fail("consume: -e (tags) and --sql are exclusive")
        end
        local function show(m)
            if opts.json then
                print(cjson.encode({ msgId = m.msgId, topic = m.topic, queueId = m.queueId,
                                     queueOffset = m.queueOffset, tags = m.tags, keys = m.keys,
                                     body = m.body, bornHost = m.bornHost, reconsumeTimes = m.reconsumeTimes,
                                     storeTimestamp = m.storeTimestamp }))
            else
                print(("%s queue=%d offset=%d tags=%s %s"):format(m.msgId, m.queueId,
                    m.queueOffset, tostring(m.tags), m.body))
            end
            io.stdout:flush()
        end
        if opts.grpc then
            return M.grpc_consume(opts, show)
        end
        if opts.pop then
            local pop = require("rmq.client.pop")
            local invisible = tonumber(opts.invisible or 60000)
            if invisible == nil then
                return fail("consume: --invisible MS must be a number")
            end
            local c = pop.new({ namesrvAddr = namesrv_of(opts), consumerGroup = opts.group,
                                invisibleTime = math.tointeger(invisible) })
            local limit = tonumber(opts.count)
            local seen = 0
            while limit == nil or seen < limit do
                local r, err = c:pop(opts.topic, {
                    maxMsgNums = limit and math.min(32, limit - seen) or 32, pollTime = 15000,
                    exp = opts.sql or opts.expr or "*", expType = opts.sql and "SQL92" or "TAG",
                    initMode = opts.from == "last" and 1 or 0, order = opts.order,
                })
                if not r then
                    c:shutdown()
                    return fail("consume: " .. tostring(err))
                end
                for _, m in ipairs(r.messages) do
                    show(m)
                    seen = seen + 1
                    local ok, aerr = c:ack(m)
                    if not ok then
                        io.stderr:write("consume: ack: " .. tostring(aerr) .. "\n")
                    end
                end
            end
            c:shutdown()
            return 0
        end
        local net = require("rmq.net")
        local consumer = require("rmq.client.consumer")
        local c = consumer.new({
            namesrvAddr = namesrv_of(opts), consumerGroup = opts.group,
            consumeFromWhere = opts.from == "last" and "CONSUME_FROM_LAST_OFFSET" or "CONSUME_FROM_FIRST_OFFSET",
        })
        if opts.sql then
            c:subscribe(opts.topic, opts.sql, "SQL92")
        else
            c:subscribe(opts.topic, opts.expr or "*")
        end
        local limit = tonumber(opts.count)
        local seen = 0
        c:on_message(function(msgs)
            for _, m in ipairs(msgs) do
                if limit == nil or seen < limit then
                    seen = seen + 1
                    show(m)
                end
            end
            return "CONSUME_SUCCESS"
        end)
        local ok, err = pcall(c.start, c)
        if not ok then
            return fail("consume: " .. tostring(err))
        end
        while limit == nil or seen < limit do
            net.sleep(50)
        end
        c:shutdown()
        return 0
    end,
}

commands["cluster-list"] = {
    usage = "rmq cluster-list -n NAMESRV [--json]",
    help = "list clusters and their brokers",
    spec = { namesrv = { "-n", "--namesrv", arg = true }, json = { "--json" } },
    run = function(opts)
        -- rmq admin clusterList's request and decoding; this older table.
        local admin = require("rmq.admin")
        local ok, info = pcall(require("rmq.admin.remote").cluster_info, admin.context({ namesrvAddr = namesrv_of(opts) }))
        if not ok then
            return fail("cluster-list: " .. tostring(info))
        end
        if opts.json then
            print(cjson.encode(info))
            return 0
        end
        print(("%-20s %-20s %-6s %s"):format("#Cluster Name", "#Broker Name", "#BID", "#Addr"))
        for _, b in ipairs(require("rmq.admin.cluster").brokers(info)) do
            print(("%-20s %-20s %-6s %s"):format(b.cluster, b.broker, b.id, b.addr))
        end
        return 0
    end,
}

commands["broker-status"] = {
    usage = "rmq broker-status -n NAMESRV [--json]",
    help = "every broker with its role and max offset; per slave its acknowledged offset and lag",
    spec = { namesrv = { "-n", "--namesrv", arg = true }, json = { "--json" } },
    run = function(opts)
        local status = require("rmq.tools.broker_status")
        local addr = require("rmq.client.route").parse_namesrv(namesrv_of(opts))[1]
        local rows, err = status.collect(addr)
        if rows == nil then
            return fail("broker-status: " .. err)
        end
        print(opts.json and cjson.encode(rows) or status.format(rows))
        return 0
    end,
}

commands.bench = {
    usage = "rmq bench produce -n NAMESRV -t TOPIC [-s SIZE] [-c CONCURRENCY] [-d SECONDS]\n"
        .. "                  [--broker ADDR [-q QUEUES]] [--connections N] [--serialize JSON|ROCKETMQ]\n"
        .. "                  [--uniq-key] [--rate N] [--json]\n"
        .. "       rmq bench produce --grpc -n ENDPOINT -t TOPIC [the options above but --serialize, --uniq-key]\n"
        .. "       rmq bench consume -n NAMESRV -t TOPIC [-g GROUP] [-d SECONDS] [--from first|last]",
    help = "measure send throughput and latency (--rate: at most N sends a second; --grpc: RocketMQ 5's "
        .. "SendMessage at ENDPOINT, an rmq grpcServerPort or a 5.x proxy, each message with a message id)",
    spec = {
        namesrv = { "-n", "--namesrv", arg = true },
        topic = { "-t", "--topic", arg = true },
        size = { "-s", "--size", arg = true },
        concurrency = { "-c", "--concurrency", arg = true },
        seconds = { "-d", "--duration", arg = true },
        broker = { "--broker", arg = true },
        queues = { "-q", "--queues", arg = true },
        connections = { "--connections", arg = true },
        serialize = { "--serialize", arg = true },
        uniq_key = { "--uniq-key" },
        rate = { "--rate", arg = true },
        grpc = { "--grpc" },
        group = { "-g", "--group", arg = true },
        from = { "--from", arg = true },
        json = { "--json" },
    },
    run = function(opts, args)
        local bench = require("rmq.tools.bench")
        local topic = opts.topic or "BenchmarkTest"
        local code, err
        if args[1] == "consume" then
            code, err = bench.consume(opts, namesrv_of(opts), topic)
        elseif args[1] == "produce" then
            code, err = bench.produce(opts, opts.grpc and (opts.namesrv or "127.0.0.1:8081") or namesrv_of(opts), topic)
        else
            err = "bench: 'rmq bench produce' or 'rmq bench consume'"
        end
        if code == nil then
            return fail(err)
        end
        return code
    end,
}

commands.audit = require("rmq.tools.audit").command

commands.top = {
    usage = "rmq top -n NAMESRV [-i MILLIS] [--once] [--json] [--all]",
    help = "live TPS in/out per topic and lag per group, every second",
    spec = {
        namesrv = { "-n", "--namesrv", arg = true },
        interval = { "-i", "--interval", arg = true },
        once = { "--once" },
        json = { "--json" },
        all = { "--all" },
    },
    run = function(opts)
        local interval = 1000
        if opts.interval then
            interval = tonumber(opts.interval)
            if not interval or interval < 100 or interval ~= math.floor(interval) then
                return fail("top: -i MILLIS must be an integer of at least 100", EXIT_USAGE)
            end
        end
        if opts.json and not opts.once then
            return fail("top: --json needs --once (one frame for a script)", EXIT_USAGE)
        end
        local code, err = require("rmq.console.top").run({
            namesrv = namesrv_of(opts), interval = math.floor(interval), once = opts.once,
            json = opts.json, all = opts.all,
        })
        if code == nil then
            return fail("top: " .. tostring(err))
        end
        return code
    end,
}

commands.trace = {
    usage = "rmq trace -n NAMESRV [--trace-topic TOPIC] [--json] MSGID",
    help = "show a message's trace (the records clients with message trace wrote)",
    spec = {
        namesrv = { "-n", "--namesrv", arg = true },
        topic = { "--trace-topic", arg = true },
        json = { "--json" },
    },
    run = function(opts, args)
        local msg_id = args[1]
        if not msg_id then
            return fail("trace: a MSGID is required")
        end
        local trace = require("rmq.client.trace")
        local route = require("rmq.client.route")
        local recs, err = trace.query(route.parse_namesrv(namesrv_of(opts)), msg_id,
                                      { traceTopic = opts.topic })
        if not recs then
            return fail("trace: " .. err)
        end
        if opts.json then
            print(#recs == 0 and "[]" or cjson.encode(recs))   -- (this lua-cjson has no array_mt)
            return 0
        end
        if #recs == 0 then
            return fail(("trace: no trace of %s in %s"):format(msg_id, opts.topic or trace.DEFAULT_TOPIC))
        end
        local function when(ms)
            if not ms then
                return "-"
            end
            return os.date("%Y-%m-%d %H:%M:%S", ms // 1000) .. (".%03d"):format(ms % 1000)
        end
        print(("%-15s %-24s %-24s %-24s %-9s %s"):format("#Type", "#Group", "#Topic/Tags", "#Time",
            "#Cost(ms)", "#Status"))
        for _, r in ipairs(recs) do
            local what = r.topic and (r.topic .. (r.tags and r.tags ~= "null" and ("/" .. r.tags) or ""))
                or ("retry=" .. tostring(r.retryTimes or "-"))
            local status = r.transactionState or (r.success == nil and "-" or (r.success and "success" or "failed"))
            print(("%-15s %-24s %-24s %-24s %-9s %s"):format(r.type, tostring(r.groupName or "-"), what,
                when(r.timestamp), tostring(r.costTime or "-"), status))
        end
        return 0
    end,
}

commands.console = {
    usage = "rmq console ADDR [-e CODE] [--password PW]",
    help = "a Lua prompt into a running server's live console (conf `console`; ADDR: a socket path or HOST:PORT)",
    spec = { code = { "-e", "--eval", arg = true }, password = { "--password", arg = true } },
    run = function(opts, args)
        local addr = args[1]
        if addr == nil then
            return fail("console: ADDR is required (the server's READY line shows console=ADDR)", EXIT_USAGE)
        end
        local client = require("rmq.console_live.client")
        local c, err = client.open(addr, opts.password or os.getenv("RMQ_CONSOLE_PASSWORD"))
        if c == nil then
            return fail("console: " .. err, 3)
        end
        if opts.code then
            local ok, text = c:eval(opts.code)
            c:close()
            if ok then
                io.stdout:write(text)
                return 0
            end
            io.stderr:write(text)
            return EXIT_FAILED
        end
        -- rmq repl's line editor (rmq.lineedit) on a terminal when this
        -- build has it; plain stdin otherwise.
        local has_le, le = pcall(require, "rmq.lineedit")
        local editing = has_le and le.isatty(0)
        local history = os.getenv("HOME") and (os.getenv("HOME") .. "/.rmq_console_history")
        if editing and history then
            le.stifle_history(1000)
            le.read_history(history)
        end
        local name = c.hello:match("name=(%S+)") or "rmq"
        io.stdout:write(c.hello .. "\n" .. 'help() lists what the console offers; end with Ctrl-D\n')
        local prompt = name .. "> "
        while true do
            local line
            if editing then
                line = le.readline(prompt)
                if line and line:match("%S") then
                    le.add_history(line)
                end
            else
                io.stdout:write(prompt)
                io.stdout:flush()
                line = io.read("L")
            end
            if line == nil then
                io.stdout:write("\n")
                break
            end
            local kind, text = c:line((line:gsub("\r?\n$", "")))
            if kind == nil then
                c:close()
                return fail("console: connection lost: " .. tostring(text), 3)
            end
            if kind == "more" then
                prompt = ">> "
            else
                prompt = name .. "> "
                local out = kind == "err" and io.stderr or io.stdout
                out:write(text)
                out:flush()
            end
        end
        if editing and history then
            le.write_history(history)
        end
        c:close()
        return 0
    end,
}

commands.doctor = {
    usage = "rmq doctor CONF [--json] [--KEY=VALUE ...]",
    help = "what a conf exposes (bind address, ports, ACL, TLS, consoles): WARN/INFO/OK, exit 1 on a WARN",
    raw = true,   -- rmq-server's --KEY=VALUE overrides (rmq.tools.doctor)
    run = function(argv) return require("rmq.tools.doctor").main(argv) end,
}

commands.admin = {
    usage = "rmq admin COMMAND [OPTIONS] [--access-key AK --secret-key SK]",
    help = "mqadmin's commands (rmq admin lists them; rmq admin COMMAND -h)",
    raw = true,   -- its own options, parsed as mqadmin's
    run = function(argv) return require("rmq.admin").main(argv) end,
}

commands.repl = {
    usage = "rmq repl [-n NAMESRV] [-e CODE] [-i] [--history FILE] [--history-size N] [FILE.lua [ARGS...]]",
    help = "a Lua prompt where every admin command is a function (-e CODE, FILE.lua: run and exit)",
    spec = {
        namesrv = { "-n", "--namesrv", arg = true },
        code = { "-e", arg = true },
        interactive = { "-i" },
        history = { "--history", arg = true },
        historySize = { "--history-size", arg = true },
    },
    -- Options end at FILE, as lua's: what follows is the script's arg.
    raw = true,
    run = function(argv)
        local head, i = {}, 1
        local valued = { ["-n"] = true, ["--namesrv"] = true, ["-e"] = true, ["--history"] = true,
                         ["--history-size"] = true, ["--access-key"] = true, ["--secret-key"] = true,
                         ["--security-token"] = true }
        while i <= #argv and argv[i]:sub(1, 1) == "-" and argv[i] ~= "-" do
            if argv[i] == "-h" or argv[i] == "--help" then
                print("usage: " .. commands.repl.usage)
                return 0
            end
            head[#head + 1] = argv[i]
            if valued[argv[i]] and argv[i + 1] then
                i = i + 1
                head[#head + 1] = argv[i]
            end
            i = i + 1
        end
        local opts, err = parse(commands.repl.spec, head)
        if not opts then
            return fail("repl: " .. err .. "\nusage: " .. commands.repl.usage, EXIT_USAGE)
        end
        local cok, cerr = apply_credentials(opts)
        if not cok then
            return fail("repl: " .. cerr, EXIT_USAGE)
        end
        return require("rmq.repl").main({
            namesrv = namesrv_of(opts), code = opts.code, interactive = opts.interactive,
            history = opts.history, historySize = opts.historySize,
            file = argv[i], args = { [0] = argv[i], table.unpack(argv, i + 1) },
        })
    end,
}

-- The credential options on every command that talks to a server.
for name, cmd in pairs(commands) do
    if not NO_CREDENTIALS[name] and cmd.spec then
        for k, s in pairs(CRED_SPEC) do
            cmd.spec[k] = s
        end
    end
end

local function usage(out)
    out:write("usage: rmq COMMAND [OPTIONS] [ARGS]\n\ncommands:\n")
    local names = {}
    for name in pairs(commands) do
        names[#names + 1] = name
    end
    table.sort(names)
    for _, name in ipairs(names) do
        out:write(("  %-12s %s\n"):format(name, commands[name].help))
    end
    out:write("\n'rmq COMMAND --help' shows a command's options.\n"
        .. "Commands that talk to a server sign their requests (ACL) with --access-key AK --secret-key SK\n"
        .. "[--security-token T], else $RMQ_ACCESS_KEY and $RMQ_SECRET_KEY [$RMQ_SECURITY_TOKEN].\n")
    out:write("Any command: --tls (or RMQ_TLS=1) connects with TLS; --tls-trust CA.pem verifies the server,\n"
        .. "--tls-cert FILE --tls-key FILE present a client certificate.\n")
end

-- A command's usage and its options, one per line.
local function command_help(cmd)
    local lines = { "usage: " .. cmd.usage }
    local flags = {}
    for _, s in pairs(cmd.spec or {}) do
        flags[#flags + 1] = table.concat(s, ", ") .. (s.arg and " VALUE" or "")
    end
    table.sort(flags)
    if #flags > 0 then
        lines[#lines + 1] = "options:"
        for _, f in ipairs(flags) do
            lines[#lines + 1] = "  " .. f
        end
    end
    return table.concat(lines, "\n")
end

function M.main(argv)
    -- --tls / RMQ_TLS=1 (4.9.8's -Dtls.enable=true) for every command.
    local tls_argv, tls = require("rmq.client.tls").strip_argv(argv)
    if tls_argv == nil then
        return fail(tls, EXIT_USAGE)
    end
    argv = tls_argv
    local tls_ok, tls_err = require("rmq.client.tls").apply(tls)
    if not tls_ok then
        return fail(tls_err)
    end
    local name = argv[1]
    if name == nil or name == "--help" or name == "-h" or name == "help" then
        if argv[2] ~= nil and commands[argv[2]] then
            print(command_help(commands[argv[2]]))
            return 0
        end
        usage(name and io.stdout or io.stderr)
        return name and 0 or EXIT_USAGE
    end
    if name == "--version" then
        name = "version"
    end
    local cmd = commands[name]
    if cmd == nil then
        return fail(("unknown command '%s' (rmq help lists them)"):format(name), EXIT_USAGE)
    end
    local rest = { table.unpack(argv, 2) }
    if cmd.raw then
        if name == "admin" then
            -- mqadmin's own parser does not know them: taken out first.
            local copts, crest = take_credentials(rest)
            if not copts then
                return fail(name .. ": " .. crest, EXIT_USAGE)
            end
            local cok, cerr = apply_credentials(copts)
            if not cok then
                return fail(name .. ": " .. cerr, EXIT_USAGE)
            end
            rest = crest
        end
        return cmd.run(rest)
    end
    for _, a in ipairs(rest) do
        if a == "--help" or a == "-h" then
            print(command_help(cmd))
            return 0
        end
    end
    local opts, args = parse(cmd.spec, rest)
    if not opts then
        return fail(name .. ": " .. args .. "\nusage: " .. cmd.usage, EXIT_USAGE)
    end
    if not NO_CREDENTIALS[name] then
        local cok, cerr = apply_credentials(opts)
        if not cok then
            return fail(name .. ": " .. cerr, EXIT_USAGE)
        end
    end
    return cmd.run(opts, args)
end

M.commands = commands

return M
