-- What the ACL check costs per request (src/acl/acl.c, run by every
-- worker before any processor): nanoseconds per check of one decoded
-- request, in C (rmq.acl's t:bench: no Lua and no decoding in the loop),
-- against an account table as large as plain_acl.yml files get; and what
-- loading such a file costs (libyaml + building the table).
--
--   lua5.4 scripts/bench/acl_check.lua [ACCOUNTS [PERMS [N]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: ACCOUNTS = 10000 accounts, PERMS = 10000
-- topicPerms on the account that signs (the others have 2 each), N =
-- 200000 checks per figure.  Figures: ms to decode and build the file,
-- then ns per check (the thread's CPU time) for a signed SEND_MESSAGE_V2 (13 header fields, a
-- 1 KiB body), a signed PULL_MESSAGE (a topic and a group), a HEART_BEAT
-- (one consumer, two topics: its body is parsed), a white-listed
-- address (no signature), and a refusal (wrong signature).  The HMAC
-- over the header and body is most of a signed check.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local acl = require("rmq.acl")
local codec = require("rmq.codec")
local core = require("rmq.core")
local plain = require("rmq.acl.plain")

local ACCOUNTS = tonumber(arg[1]) or 10000
local PERMS = tonumber(arg[2]) or 10000
local N = tonumber(arg[3]) or 200000

-- The file, as an operator would write it.
local lines = { "globalWhiteRemoteAddresses:", "- 10.10.103.*", "- 192.168.0.*", "accounts:" }
for i = 1, ACCOUNTS do
    lines[#lines + 1] = ("- accessKey: account-%06d"):format(i)
    lines[#lines + 1] = ("  secretKey: secret-%06d"):format(i)
    lines[#lines + 1] = "  defaultTopicPerm: DENY"
    lines[#lines + 1] = "  defaultGroupPerm: SUB"
    lines[#lines + 1] = "  topicPerms:"
    local np = i == 1 and PERMS or 2
    for j = 1, np do
        lines[#lines + 1] = ("  - Topic%06d=%s"):format(j, j % 3 == 0 and "SUB" or "PUB|SUB")
    end
    lines[#lines + 1] = "  groupPerms:"
    lines[#lines + 1] = "  - GroupDenied=DENY"
end
local text = table.concat(lines, "\n") .. "\n"
local conf = { aclMaxAccounts = 10000000, aclMaxResourcePerms = 100000000 }

local t0 = core.now_ms()
local data = assert(acl.yaml_decode(text, #text))
local t1 = core.now_ms()
local t = assert(plain.build(conf, data))
local t2 = core.now_ms()
print(("plain_acl.yml: %d accounts, %d topicPerms on one, %.1f MB: YAML %d ms, table %d ms")
    :format(t:count(), PERMS, #text / 1e6, t1 - t0, t2 - t1))

local AK, SK = "account-000001", "secret-000001"
local function signed(cmd, secret)
    cmd.ext.AccessKey = AK
    cmd.ext.Signature = acl.sign(cmd.ext, cmd.body, secret or SK)
    return codec.encode(cmd)
end

local send = signed({ code = 310, body = ("x"):rep(1024), ext = {
    a = "ProducerGroup", b = ("Topic%06d"):format(PERMS // 2 // 3 * 3 + 1), c = "TBW102", d = "4", e = "0", f = "0",
    g = "1796034593124", h = "0", i = "UNIQ_KEY\1C0A80001000018B4AAC2\2WAIT\1true\2TAGS\1TagA", j = "0",
    k = "false", m = "false" } })
local pull = signed({ code = 11, ext = {
    consumerGroup = "ConsumerGroup", topic = "Topic000002", queueId = "0", queueOffset = "0",
    maxMsgNums = "32", sysFlag = "6", commitOffset = "0", suspendTimeoutMillis = "15000",
    subscription = "*", subVersion = "0", expressionType = "TAG" } })
local hb = signed({ code = 34, ext = {}, body = '{"clientID":"c1","consumerDataSet":[{"groupName":"ConsumerGroup",'
    .. '"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    .. '"subscriptionDataSet":[{"topic":"Topic000001","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1},'
    .. '{"topic":"Topic000002","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1}],"unitMode":false}],'
    .. '"producerDataSet":[]}' })
local bad = signed({ code = 310, body = "x", ext = { a = "G", b = "Topic000001" } }, "wrong-secret")

local cases = {
    { "signed SEND_MESSAGE_V2, 1 KiB body", send, "127.0.0.1:40000", true },
    { "signed PULL_MESSAGE", pull, "127.0.0.1:40000", true },
    { "signed HEART_BEAT (body parsed)", hb, "127.0.0.1:40000", true },
    { "white-listed address", send, "192.168.0.7:40000", true },
    { "refused: wrong signature", bad, "127.0.0.1:40000", false },
}
for _, c in ipairs(cases) do
    t:bench(c[2], c[3], "broker", N // 10)  -- warm up
    local ns, ok = t:bench(c[2], c[3], "broker", N)
    assert(ok == c[4], c[1] .. ": unexpected result")
    print(("%-40s %8.0f ns per check"):format(c[1], ns))
end
