-- What ACL costs a broker: `rmq bench produce` (the C load generator,
-- its frames signed once per queue with --access-key/--secret-key)
-- against one broker with aclEnable = false and one with aclEnable =
-- true (plain_acl.yml with one account allowed the topic), in one run,
-- rounds alternating off / on.  Figures only; spec/integration/
-- acl_client_spec.lua asserts the behaviour.
--
--   lua5.4 scripts/bench/acl.lua [SECONDS [ROUNDS [SIZE [CONCURRENCY [WORKERS]]]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: 10 s per round, 2 rounds each, 1024-byte
-- bodies, 64 in flight, 2 workers.  Printed per round: Send TPS, average
-- and p99 RT, failed sends and the broker's CPU time per message (from
-- /proc/PID/stat); then the mean TPS of each mode and the on/off ratio.
-- The servers and their temp dirs are removed at the end.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local cjson = require("cjson")
local net = require("rmq.net")
local server = require("support.server")

local SECONDS = tonumber(arg[1]) or 10
local ROUNDS = tonumber(arg[2]) or 2
local SIZE = tonumber(arg[3]) or 1024
local CONC = tonumber(arg[4]) or 64
local WORKERS = tonumber(arg[5]) or 2
local TOPIC = "BenchAclTopic"
local AK, SK = "BenchAcl", "BenchAclSecret"

local dir = server.tmpdir()
local acl = require("support.acl_yml").write({ accounts = {
    { accessKey = AK, secretKey = SK, admin = true, defaultTopicPerm = "DENY", defaultGroupPerm = "SUB",
      topicPerms = { TOPIC .. "on=PUB|SUB" } },
} }, dir .. "/plain_acl.yml")

local ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = dir .. "/kv.json" })

local function broker(name, on)
    local conf = { role = "broker", workers = WORKERS, brokerName = name, brokerClusterName = "BenchAcl" .. name,
                   storePathRootDir = dir .. "/" .. name, mappedFileSizeCommitLog = 256 * 1024 * 1024,
                   namesrvAddr = ns.addr, aclEnable = on, aclFile = acl }
    local b = server.start(conf)
    local r = assert(net.call(b.addr, { code = 17, ext = {
        topic = TOPIC .. name, defaultTopic = "TBW102", readQueueNums = 8, writeQueueNums = 8, perm = 6,
        topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false },
        credentials = { accessKey = AK, secretKey = SK } }, 5000))
    assert(r.code == 0, r.remark)
    return b
end

-- A topic per broker (BenchAclTopicoff, BenchAclTopicon), so that each
-- bench goes to one broker only.
local off = broker("off", false)
local on = broker("on", true)

local function bench(b, topic)
    local cmd = ("%s/rmq bench produce -n %s -t %s -s %d -c %d -d %d --json --access-key %s --secret-key %s"
        .. " 2>&1"):format(build, ns.addr, topic, SIZE, CONC, SECONDS, AK, SK)
    local c0 = b:cpu_seconds()
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    local s = cjson.decode((assert(out:match("\n(%b{})\n"), out)))
    s.cpu_us = (b:cpu_seconds() - c0) * 1e6 / math.max(1, s.ok)
    return s
end

print(("rmq bench produce -s %d -c %d -d %d, %d workers, one broker each mode"):format(SIZE, CONC, SECONDS, WORKERS))
local sum = { off = 0, on = 0 }
for round = 1, ROUNDS do
    for _, mode in ipairs({ "off", "on" }) do
        local s = bench(mode == "off" and off or on, TOPIC .. mode)
        sum[mode] = sum[mode] + s.tps
        print(("round %d aclEnable=%-5s Send TPS %8.0f | avg RT %.3f ms | p99 RT %.3f ms | failed %d | "
            .. "broker CPU %.1f us/msg"):format(round, tostring(mode == "on"), s.tps, s.avg_ms, s.p99_ms,
            s.failed, s.cpu_us))
    end
end
local m_off, m_on = sum.off / ROUNDS, sum.on / ROUNDS
print(("mean Send TPS: aclEnable=false %.0f, aclEnable=true %.0f (on/off %.3f)"):format(m_off, m_on, m_on / m_off))
off:stop()
on:stop()
ns:stop()
os.execute("rm -rf '" .. dir .. "'")
