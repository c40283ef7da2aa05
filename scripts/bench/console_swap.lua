-- The live console's costs: a broker (real process on loopback) with W
-- workers; how long a snippet round trip takes (`return 1`), a policy
-- swap on every worker (replace(), both phases), and the pulls a
-- connection gets answered per second without a swap, after one (the C
-- pull path hands every pull to the Lua policy) and after a reload of
-- the unchanged file (the C path again).
--
--   lua5.4 scripts/bench/console_swap.lua [WORKERS=2] [N=50] [SECONDS=3]
--
-- Run from the repository root after a build.
package.path = "spec/?.lua;spec/support/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./" .. (os.getenv("RMQ_BUILD") or "build") .. "/?.so;" .. package.cpath

local net = require("rmq.net")
local core = require("rmq.core")
local codes = require("rmq.codes")
local server = require("support.server")
local client = require("rmq.console_live.client")

local WORKERS = tonumber(arg[1]) or 2
local N = tonumber(arg[2]) or 50
local SECONDS = tonumber(arg[3]) or 3

local dir = server.tmpdir()
local s = server.start({
    role = "broker", workers = WORKERS, brokerName = "broker-bench",
    storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 4 * 1024 * 1024,
    namesrvAddr = "127.0.0.1:1", console = "unix",
})
local sock = dir .. "/store/console.sock"

local function percentiles(xs)
    table.sort(xs)
    return xs[math.max(1, #xs // 2)], xs[math.max(1, math.ceil(#xs * 0.99))]
end

local c = assert(client.open("unix:" .. sock))
local rtt, swaps = {}, {}
for i = 1, N do
    local t0 = core.mono_ms()
    assert(c:eval("return 1"))
    rtt[i] = core.mono_ms() - t0
end
local policy = "local M = {} function M.is_slow() return false end "
    .. "function M.suggest(f) return %d end return M"
for i = 1, N do
    local t0 = core.mono_ms()
    local ok, text = c:eval(("return replace('rmq.policy.slave_read', %q)"):format(policy:format(i % 2)))
    assert(ok, text)
    swaps[i] = core.mono_ms() - t0
end

local conn = assert(net.connect(s.addr))
local req = codes.request
local sent = assert(conn:call({
    code = req.SEND_MESSAGE_V2,
    ext = { a = "BenchP", b = "BenchSwap", c = "TBW102", d = 4, e = 0, f = 0, g = 1796034593124,
            h = 0, i = "TAGS\1A", j = 0, k = false, m = false },
    body = "x",
}))
assert(sent.code == 0, sent.remark)
local pull = {
    code = req.PULL_MESSAGE,
    ext = { consumerGroup = "BenchG", topic = "BenchSwap", queueId = 0, queueOffset = 0, maxMsgNums = 1,
            sysFlag = 0x4, commitOffset = 0, suspendTimeoutMillis = 0, subscription = "*", subVersion = 0,
            expressionType = "TAG" },
}
local function pull_rate()
    local n, t0 = 0, core.mono_ms()
    while core.mono_ms() - t0 < SECONDS * 1000 do
        assert(conn:call(pull).code == 0)
        n = n + 1
    end
    return n / SECONDS
end

-- The "before" figure comes from a second broker that never had a swap.
local s2dir = server.tmpdir()
local s2 = server.start({
    role = "broker", workers = WORKERS, brokerName = "broker-bench2",
    storePathRootDir = s2dir .. "/store", mappedFileSizeCommitLog = 4 * 1024 * 1024,
    namesrvAddr = "127.0.0.1:1",
})
local after = pull_rate()
-- Back to the file the server started with: the C path serves again.
assert(c:eval("return reload('rmq.policy.slave_read')"))
local reloaded = pull_rate()
conn:close()
conn = assert(net.connect(s2.addr))
assert(conn:call({
    code = req.SEND_MESSAGE_V2,
    ext = { a = "BenchP", b = "BenchSwap", c = "TBW102", d = 4, e = 0, f = 0, g = 1796034593124,
            h = 0, i = "TAGS\1A", j = 0, k = false, m = false },
    body = "x",
}).code == 0)
local before = pull_rate()
conn:close()
c:close()

local r50, r99 = percentiles(rtt)
local s50, s99 = percentiles(swaps)
print(("workers %d, %d runs each"):format(WORKERS, N))
print(("snippet round trip (return 1):      p50 %.2f ms  p99 %.2f ms"):format(r50, r99))
print(("policy swap on every worker:        p50 %.2f ms  p99 %.2f ms"):format(s50, s99))
print(("pulls/s on one connection: no swap (C) %.0f, replaced policy (Lua) %.0f, reloaded from the"
    .. " unchanged file (C) %.0f"):format(before, after, reloaded))
s:stop()
s2:stop()
