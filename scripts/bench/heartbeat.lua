-- HEART_BEAT cost against a real broker, by the number of consumer
-- groups in the heartbeat.
--
--   lua5.4 scripts/bench/heartbeat.lua [ROUNDS [REPEATS [SIZES [AUTO_SIZES [V2_SIZES]]]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: 5 rounds, 5 repeats, sizes "10,1000,5000",
-- auto-create sizes "10,1000" ("" skips that part).
--
-- Bodies are what a 4.9.8 Java push consumer sends for N groups
-- (fastjson's sorted keys; each group subscribes one topic and its
-- %RETRY% topic; one CLIENT_INNER_PRODUCER): about 460 bytes per group.
-- Brokers: a NameServer and a broker (2 workers, logLevel warn) on
-- 127.0.0.1, as the consume specs start them.
--
-- Part 1, the registry (broker with autoCreateSubscriptionGroup=false,
-- so a new group costs one cached miss in rmq.broker.groups), each
-- round on fresh group names:
--   first    a new connection's first heartbeat: N groups new to the
--            registry, N NOTIFY_CONSUMER_IDS_CHANGED received
--   repeat   the same heartbeat again on that connection, REPEATS
--            times: nothing changes, nobody is told
-- Part 2, with subscription-group auto-creation (default conf), for
-- AUTO_SIZES:
--   first (auto-create)   N groups new to the registry and the broker:
--                         rmq.broker.groups / topics create N
--                         subscription groups and N %RETRY% topics
--   first (known groups)  after that connection closed (the registry
--                         forgot its groups), a new connection with the
--                         same body: the configs exist
-- Part 3, 5.x heartbeat v2 (a 5.x client's version and fingerprint), for
-- V2_SIZES (default SIZES): the repeat of the full heartbeat beside the
-- one without subscriptions ("withoutSub":true) that a 5.x client sends
-- while its fingerprint holds.
-- Figures: the round trip (request written to reply read, NOTIFY frames
-- included), median (min-max) over rounds (repeat: rounds x REPEATS).
-- The client and the broker share this machine's cores.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local env = require("support.broker_consume_env")

local ROUNDS = tonumber(arg[1]) or 5
local REPEATS = tonumber(arg[2]) or 5
local function sizes(text)
    local out = {}
    for v in text:gmatch("%d+") do
        out[#out + 1] = tonumber(v)
    end
    return out
end
local SIZES = sizes(arg[3] or "10,1000,5000")
local AUTO_SIZES = sizes(arg[4] or "10,1000")
local V2_SIZES = sizes(arg[5] or arg[3] or "10,1000,5000")

local function body_for(n, prefix, client_id)
    local parts = {}
    local v = 1796034607842
    for i = 1, n do
        local g = ("%s%05d"):format(prefix, i)
        parts[i] = ('{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",'
            .. '"groupName":"%s","messageModel":"CLUSTERING","subscriptionDataSet":['
            .. '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
            .. '"subVersion":%d,"tagsSet":[],"topic":"BenchTopic"},'
            .. '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
            .. '"subVersion":%d,"tagsSet":[],"topic":"%%RETRY%%%s"}],"unitMode":false}')
            :format(g, v + i, v + i + 1, g)
    end
    return ('{"clientID":"%s","consumerDataSet":[%s],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}')
        :format(client_id, table.concat(parts, ","))
end

-- The 5.x forms: the full heartbeat with a fingerprint, and the one
-- without subscriptions.
local function v2_bodies(n, prefix, client_id)
    local full = body_for(n, prefix, client_id):gsub('^{', '{"heartbeatFingerprint":123456789,', 1)
    local parts = {}
    for i = 1, n do
        parts[i] = ('{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",'
            .. '"groupName":"%s%05d","messageModel":"CLUSTERING","subscriptionDataSet":[],"unitMode":false}')
            :format(prefix, i)
    end
    local bare = ('{"clientID":"%s","consumerDataSet":[%s],"heartbeatFingerprint":123456789,'
        .. '"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":true}')
        :format(client_id, table.concat(parts, ","))
    return full, bare
end

local function median(xs)
    local s = {}
    for i, x in ipairs(xs) do
        s[i] = x
    end
    table.sort(s)
    local n = #s
    if n == 0 then
        return 0 / 0
    end
    if n % 2 == 1 then
        return s[(n + 1) // 2]
    end
    return (s[n // 2] + s[n // 2 + 1]) / 2
end

local function minmax(xs)
    local lo, hi = math.huge, -math.huge
    for _, x in ipairs(xs) do
        lo, hi = math.min(lo, x), math.max(hi, x)
    end
    return lo, hi
end

local function connect(e, counter)
    return assert(net.connect(e.addr, { on_request = function(ctx, cmd)
        if cmd.code == 40 then
            counter.n = counter.n + 1
        end
    end }))
end

local function timed_heartbeat(conn, body, version)
    local t0 = core.mono_ms()
    local r = assert(conn:call({ code = 34, body = body, version = version }, 600000))
    local dt = core.mono_ms() - t0
    assert(r.code == 0, r.remark)
    return dt
end

local function members(conn, group)
    local r = assert(conn:call({ code = 38, ext = { consumerGroup = group } }))
    return r.code == 0
end

local function fmt(xs)
    local lo, hi = minmax(xs)
    return ("%8.2f (%.2f-%.2f)"):format(median(xs), lo, hi)
end

-- Waits until the broker forgot the group (its connection closed).
local function forgotten(e, group)
    local probe = assert(net.connect(e.addr))
    local waited = 0
    while members(probe, group) and waited < 10000 do
        net.sleep(10)
        waited = waited + 10
    end
    probe:close()
end

local function part1(e)
    print(("%7s %9s  %-24s %-24s %s"):format("groups", "body", "first", "repeat",
        "notified first/repeat"))
    for _, n in ipairs(SIZES) do
        local first, again = {}, {}
        local size, notified_first, notified_repeat = 0, 0, 0
        for r = 1, ROUNDS do
            local prefix = ("R%d_%d_"):format(n, r)
            local body = body_for(n, prefix, ("127.0.0.1@bench-%d-%d"):format(n, r))
            size = #body
            local counter = { n = 0 }
            local c = connect(e, counter)
            first[#first + 1] = timed_heartbeat(c, body)
            notified_first = counter.n
            counter.n = 0
            for _ = 1, REPEATS do
                again[#again + 1] = timed_heartbeat(c, body)
            end
            net.sleep(50)
            notified_repeat = notified_repeat + counter.n
            c:close()
            forgotten(e, prefix .. "00001")
        end
        print(("%7d %7.0fKB  %-24s %-24s %d/%d"):format(n, size / 1024, fmt(first), fmt(again),
            notified_first, notified_repeat))
    end
end

local function part2(e)
    print(("%7s %9s  %-24s %s"):format("groups", "body", "first (auto-create)", "first (known groups)"))
    for _, n in ipairs(AUTO_SIZES) do
        local fresh, known = {}, {}
        local size = 0
        for r = 1, ROUNDS do
            local prefix = ("A%d_%d_"):format(n, r)
            local body = body_for(n, prefix, ("127.0.0.1@bench-%d-%d"):format(n, r))
            size = #body
            local c = connect(e, { n = 0 })
            fresh[#fresh + 1] = timed_heartbeat(c, body)
            c:close()
            forgotten(e, prefix .. "00001")
            local c2 = connect(e, { n = 0 })
            known[#known + 1] = timed_heartbeat(c2, body)
            c2:close()
            forgotten(e, prefix .. "00001")
        end
        print(("%7d %7.0fKB  %-24s %s"):format(n, size / 1024, fmt(fresh), fmt(known)))
    end
end

local V5_3_0 = 473

local function part3(e)
    print(("%7s %9s %9s  %-24s %s"):format("groups", "full", "bare", "repeat (full, v2)",
        "repeat (withoutSub)"))
    for _, n in ipairs(V2_SIZES) do
        local full_t, bare_t = {}, {}
        local fsize, bsize = 0, 0
        for r = 1, ROUNDS do
            local prefix = ("V%d_%d_"):format(n, r)
            local full, bare = v2_bodies(n, prefix, ("127.0.0.1@bench-%d-%d"):format(n, r))
            fsize, bsize = #full, #bare
            local c = connect(e, { n = 0 })
            timed_heartbeat(c, full, V5_3_0)
            for _ = 1, REPEATS do
                full_t[#full_t + 1] = timed_heartbeat(c, full, V5_3_0)
                bare_t[#bare_t + 1] = timed_heartbeat(c, bare, V5_3_0)
            end
            -- what was measured is the "unchanged" answer
            local check = assert(c:call({ code = 34, body = bare, version = V5_3_0 }, 600000))
            assert(check.ext and check.ext.IS_SUB_CHANGE == "false", "withoutSub not taken as unchanged")
            c:close()
            forgotten(e, prefix .. "00001")
        end
        print(("%7d %7.0fKB %7.0fKB  %-24s %s"):format(n, fsize / 1024, bsize / 1024, fmt(full_t), fmt(bare_t)))
    end
end

local function run(opts, part)
    local e = env.start(opts)
    local ok, err = pcall(part, e)
    e:stop()
    if not ok then
        error(err, 0)
    end
end

print(("%d rounds x %d repeats, %d cores; ms: median (min-max) round trip"):format(ROUNDS, REPEATS,
    core.cpu_count()))
print("registry (autoCreateSubscriptionGroup=false):")
run({ workers = 2, logLevel = "warn", autoCreateSubscriptionGroup = false }, part1)
if #AUTO_SIZES > 0 then
    print("with subscription-group auto-creation (rmq.broker.groups / topics):")
    run({ workers = 2, logLevel = "warn" }, part2)
end
if #V2_SIZES > 0 then
    print("5.x heartbeat v2 (autoCreateSubscriptionGroup=false):")
    run({ workers = 2, logLevel = "warn", autoCreateSubscriptionGroup = false }, part3)
end
