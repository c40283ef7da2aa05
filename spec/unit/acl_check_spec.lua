-- acl_check_spec: the ACL 1.0 check (src/acl/acl.c) through rmq.acl's
-- tables, without a server: address patterns as RemoteAddressStrategy-
-- Factory reads them, permissions as Permission.checkPermission, the
-- resources each request code needs, and 4.9.8's remark texts.
local acl = require "rmq.acl"

local SECRET = "12345678"
local EXC = "org.apache.rocketmq.acl.common.AclException: "

local function signed(cmd, ak, secret)
    local ext = {}
    for k, v in pairs(cmd.ext or {}) do ext[k] = v end
    ext.AccessKey = ak
    ext.Signature = acl.sign(ext, cmd.body, secret or SECRET)
    return { code = cmd.code, ext = ext, body = cmd.body }
end

local function table_of(accounts, whites)
    local t = acl.table()
    for _, w in ipairs(whites or {}) do
        assert(t:white(w))
    end
    for _, a in ipairs(accounts) do
        assert(t:account(a))
    end
    return t
end

local function msg(remark)
    return remark and remark:match("^" .. EXC:gsub("%p", "%%%0") .. "(.-), org%.apache") or remark
end

describe("rmq.acl check", function()
    it("matches address patterns as RemoteAddressStrategyFactory", function()
        local cases = {
            -- pattern, address, matches
            { "192.168.1.7", "192.168.1.7:1", true }, { "192.168.1.7", "192.168.1.8:1", false },
            { "*", "10.1.2.3:1", true }, { "*.*.*.*", "10.1.2.3:1", true },
            { "", "127.0.0.1:1", false }, { "   ", "127.0.0.1:1", false },
            { "10.0.0.1,10.0.0.2", "10.0.0.2:9", true }, { "10.0.0.1,10.0.0.2", "10.0.0.3:9", false },
            { "192.168.1.{1,2,3}", "192.168.1.3:5", true }, { "192.168.1.{1,2,3}", "192.168.1.4:5", false },
            { "192.168.*.*", "192.168.200.1:5", true }, { "192.168.*.*", "192.169.0.1:5", false },
            { "192.168.1-10.*", "192.168.10.99:5", true }, { "192.168.1-10.*", "192.168.11.1:5", false },
            -- 4.9.8 looks at the first range segment only: the rest is not checked
            { "10.1-2.3.4", "10.2.9.9:1", true },
            { "::1", "[::1]:5", true }, { "0:0:0:0:0:0:0:1", "[::1]:5", true },
            { "2001:db8::1,2001:db8::2", "[2001:db8::2]:5", true },
            -- IPv6 ranges: the groups before the range segment (expandIP's
            -- widening of "::"), then the range; the rest not checked
            { "2001:db8::*", "[2001:db8::5]:1", true }, { "2001:db8::*", "[2001:db8:0:7::1]:1", true },
            { "2001:db8::*", "[2001:db8:1::1]:1", false }, { "2001:db8::*", "10.0.0.1:1", false },
            { "2001:db8:0:0:0:0:0:1-ff", "[2001:db8::10]:1", true },
            { "2001:db8:0:0:0:0:0:1-ff", "[2001:db8::100]:1", false },
            { "fe80::1-ff:*", "[fe80:0:5::9]:1", true }, { "fe80::1-ff:*", "[fe80:0:100::9]:1", false },
            -- an IPv4-mapped peer is its IPv4 address, as Java sees it
            { "127.0.0.1", "[::ffff:127.0.0.1]:5", true },
        }
        for _, c in ipairs(cases) do
            local t = table_of({}, { c[1] })
            local ok = t:check({ code = 10 }, c[2], "broker")
            assert.equal(c[3], ok, ("%q vs %s"):format(c[1], c[2]))
        end
    end)

    it("refuses bad patterns with 4.9.8's messages", function()
        local bad = {
            { "300.1.1.1", "Netaddress examine Exception netaddress is 300.1.1.1" },
            { "hostname", "Netaddress examine Exception netaddress is hostname" },
            { "10.0.0.1,bogus", "Netaddress examine Exception netaddress is bogus" },
            { "10.1.2", "Netaddress examine Exception netaddress is 10.1.2" },
            { "10.5-1.*.*", "RangeRemoteAddressStrategy netaddress examine scope Exception start is 5 , end is 1" },
            { "10.1.{2,3", "Netaddress examine Exception netaddress is 10.1.{2" },
            { "1.2.{3,4}", "MultipleRemoteAddressStrategy has got a/some wrong format IP(s) " },
            { "2001:*:db8::1", "Netaddress examine scope Exception netaddress is 2001:*:db8::1" },
            { "2001:db8::1-ff:2", "Netaddress examine scope Exception netaddress is 2001:db8::1-ff:2" },
            { "2001:db8::ff-1", "RangeRemoteAddressStrategy netaddress examine scope Exception start is 255 , end is 1" },
            { "::1-ff", "Netaddress examine scope Exception netaddress is ::1-ff" },
        }
        for _, b in ipairs(bad) do
            local ok, err = acl.check_address(b[1])
            assert.is_nil(ok, b[1])
            assert.equal(b[2], err)
        end
        assert.is_true(acl.check_address("10.10.103.*"))
    end)

    it("checks signatures, the white lists and admin codes in 4.9.8's order", function()
        local t = table_of({
            { accessKey = "RocketMQ", secretKey = SECRET, defaultTopicPerm = "PUB" },
            { accessKey = "white-one", secretKey = "whitesecret", whiteRemoteAddress = "10.0.0.*" },
            { accessKey = "the-admin", secretKey = SECRET, admin = true },
        })
        local send = { code = 310, ext = { a = "G", b = "T" }, body = "x" }
        assert.is_true(t:check(signed(send, "RocketMQ"), "1.2.3.4:5", "broker"))
        local ok, remark = t:check(send, "1.2.3.4:5", "broker")
        assert.is_false(ok)
        assert.equal("No accessKey is configured", msg(remark))
        -- the account's white address: no signature needed, only the AK
        assert.is_true(t:check({ code = 310, ext = { AccessKey = "white-one", b = "T" } }, "10.0.0.9:1", "broker"))
        ok, remark = t:check({ code = 310, ext = { AccessKey = "white-one", b = "T" } }, "10.0.1.9:1", "broker")
        assert.is_false(ok)
        assert.equal("Check signature failed for accessKey=white-one", msg(remark))
        -- admin codes
        ok, remark = t:check(signed({ code = 17, ext = { topic = "T" } }, "RocketMQ"), "1.2.3.4:5", "broker")
        assert.is_false(ok)
        assert.equal("Need admin permission for request code=17, but accessKey=RocketMQ is not", msg(remark))
        assert.is_true(t:check(signed({ code = 17, ext = { topic = "T" } }, "the-admin"), "1.2.3.4:5", "broker"))
        -- rmq's extension: ACL requests, resets, deletes need admin too
        for _, code in ipairs({ 50, 51, 52, 53, 54, 205, 212, 225, 316, 329 }) do
            ok, remark = t:check(signed({ code = code, ext = {} }, "RocketMQ"), "1.2.3.4:5", "broker")
            assert.is_false(ok, code)
            assert.equal(("Need admin permission for request code=%d, but accessKey=RocketMQ is not"):format(code),
                msg(remark))
        end
        -- the NameServer: registration, KV and config need admin, reads do not
        for _, code in ipairs({ 100, 102, 103, 104, 205, 216, 318, 327 }) do
            ok = t:check(signed({ code = code, ext = {} }, "RocketMQ"), "1.2.3.4:5", "namesrv")
            assert.is_false(ok, code)
        end
        assert.is_true(t:check(signed({ code = 105, ext = { topic = "T" } }, "RocketMQ"), "1.2.3.4:5", "namesrv"))
        ok, remark = t:check({ code = 105, ext = { topic = "T" } }, "1.2.3.4:5", "namesrv")
        assert.is_false(ok)
        assert.equal("No accessKey is configured", msg(remark))
    end)

    it("accepts QUERY_MESSAGE signed with or without _UNIQUE_KEY_QUERY", function()
        local t = table_of({ { accessKey = "RocketMQ", secretKey = SECRET, defaultTopicPerm = "SUB" } })
        local q = { code = 12, ext = { topic = "T", key = "K", maxNum = "32", beginTimestamp = "0",
                                       endTimestamp = "1", _UNIQUE_KEY_QUERY = "true" } }
        -- the Java client signs every field (its hook runs after the key is set)
        assert.is_true(t:check(signed(q, "RocketMQ"), "1.2.3.4:5", "broker"))
        -- the 4.9.8 broker signs without it
        local without = {}
        for k, v in pairs(q.ext) do without[k] = v end
        without._UNIQUE_KEY_QUERY = nil
        without.AccessKey = "RocketMQ"
        local ext = {}
        for k, v in pairs(q.ext) do ext[k] = v end
        ext.AccessKey = "RocketMQ"
        ext.Signature = acl.sign(without, nil, SECRET)
        assert.is_true(t:check({ code = 12, ext = ext }, "1.2.3.4:5", "broker"))
    end)

    it("checks each resource against the perms or the defaults, naming it as 4.9.8 does", function()
        local t = table_of({ { accessKey = "RocketMQ", secretKey = SECRET, defaultTopicPerm = "DENY",
            defaultGroupPerm = "SUB", topicPerms = { "A=PUB|SUB", "P=PUB", " S = SUB ", "D=DENY",
            "RMQ_SYS_TRACE_TOPIC=DENY" }, groupPerms = { "DG=DENY", "PG=PUB" } } })
        local function check(cmd)
            local ok, remark = t:check(signed(cmd, "RocketMQ"), "1.2.3.4:5", "broker")
            return ok, msg(remark)
        end
        assert.is_true(check({ code = 310, ext = { a = "G", b = "A" } }))
        assert.is_true(check({ code = 310, ext = { a = "G", b = "P" } }))
        assert.same({ false, "No default permission for topic:S" }, { check({ code = 310, ext = { b = "S" } }) })
        assert.same({ false, "No default permission for topic:Other" }, { check({ code = 10, ext = { topic = "Other" } }) })
        assert.is_true(check({ code = 11, ext = { topic = "S", consumerGroup = "G" } }))
        assert.same({ false, "No default permission for topic:P" },
            { check({ code = 11, ext = { topic = "P", consumerGroup = "G" } }) })
        -- two refused: the one Java's HashMap iterates first (checked
        -- against a 4.9.8 broker)
        assert.same({ false, "No default permission for topic:AclOther" },
            { check({ code = 11, ext = { topic = "AclOther", consumerGroup = "AclDeniedGroup" } }) })
        -- groups: explicit DENY, PUB only (a group needs SUB), default SUB
        assert.same({ false, "No default permission for group:DG" },
            { check({ code = 36, ext = { group = "DG" } }) })
        assert.same({ false, "No default permission for group:PG" },
            { check({ code = 38, ext = { consumerGroup = "PG" } }) })
        assert.is_true(check({ code = 35, ext = { consumerGroup = "G" } }))
        assert.same({ false, "No default permission for topic:D" },
            { check({ code = 15, ext = { consumerGroup = "G", topic = "D" } }) })
        -- a retry topic needs SUB on the group: V2's "a", V1's "group"
        assert.same({ false, "No default permission for group:DG" },
            { check({ code = 310, ext = { a = "DG", b = "%RETRY%DG" } }) })
        assert.same({ false, "No default permission for group:DG" },
            { check({ code = 10, ext = { group = "DG", topic = "%RETRY%DG" } }) })
        -- V1 without "group" (as 4.9.8 reads it): no resource at all
        assert.is_true(check({ code = 10, ext = { topic = "%RETRY%DG" } }))
        -- HEART_BEAT: every consumer group and subscribed topic
        local hb = '{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
            .. '[{"topic":"A","subString":"*"},{"topic":"D","subString":"*"}]}],"producerDataSet":[]}'
        assert.same({ false, "No default permission for topic:D" }, { check({ code = 34, ext = {}, body = hb }) })
        local ok, remark = check({ code = 34, ext = {}, body = "{nope" })
        assert.is_false(ok)
        assert.truthy(remark:find("HeartbeatData", 1, true), remark)
        -- a large heartbeat: 2,000 consumers, names repeated
        local parts = {}
        for i = 1, 2000 do
            parts[i] = ('{"groupName":"G%d","subscriptionDataSet":[{"topic":"A","subString":"*"},'
                .. '{"topic":"S","subString":"*"}]}'):format(i % 700)
        end
        local big = '{"clientID":"c","consumerDataSet":[' .. table.concat(parts, ",") .. '],"producerDataSet":[]}'
        assert.is_true(check({ code = 34, ext = {}, body = big }))
        parts[1500] = '{"groupName":"DG","subscriptionDataSet":[{"topic":"A","subString":"*"}]}'
        big = '{"clientID":"c","consumerDataSet":[' .. table.concat(parts, ",") .. '],"producerDataSet":[]}'
        assert.same({ false, "No default permission for group:DG" }, { check({ code = 34, ext = {}, body = big }) })
        -- trace data passes whatever the topic's perms (4.9.8's exception)
        assert.is_true(check({ code = 310, ext = { b = "RMQ_SYS_TRACE_TOPIC" } }))
        -- codes with no resources need only the signature
        assert.is_true(check({ code = 105, ext = { topic = "D" } }))
    end)

    it("checks the codes 4.9.8 lets through as 5.x does (rmq's extension)", function()
        local t = table_of({ { accessKey = "RocketMQ", secretKey = SECRET, defaultTopicPerm = "DENY",
            defaultGroupPerm = "SUB", topicPerms = { "A=PUB|SUB", "P=PUB", "S=SUB", "D=DENY" },
            groupPerms = { "DG=DENY", "PG=PUB" } } })
        local function check(cmd)
            local ok, remark = t:check(signed(cmd, "RocketMQ"), "1.2.3.4:5", "broker")
            return ok, msg(remark)
        end
        local D, DG = "No default permission for topic:D", "No default permission for group:DG"
        -- SEND_BATCH_MESSAGE and SEND_REPLY_MESSAGE_V2 as 310, SEND_REPLY_MESSAGE as 10
        for _, code in ipairs({ 320, 325 }) do
            assert.same({ false, D }, { check({ code = code, ext = { a = "G", b = "D" } }) })
            assert.same({ false, "No default permission for topic:S" },
                { check({ code = code, ext = { a = "G", b = "S" } }) })
            assert.is_true(check({ code = code, ext = { a = "G", b = "P" } }))
            assert.same({ false, DG }, { check({ code = code, ext = { a = "DG", b = "%RETRY%DG" } }) })
            assert.is_true(check({ code = code, ext = { a = "G", b = "%RETRY%G" } }))
        end
        assert.same({ false, D }, { check({ code = 324, ext = { group = "G", topic = "D" } }) })
        assert.is_true(check({ code = 324, ext = { group = "G", topic = "A" } }))
        -- QUERY_CONSUMER_OFFSET: the group and the topic, SUB
        assert.same({ false, D }, { check({ code = 14, ext = { consumerGroup = "G", topic = "D" } }) })
        assert.same({ false, DG }, { check({ code = 14, ext = { consumerGroup = "DG", topic = "S" } }) })
        assert.same({ false, "No default permission for topic:P" },
            { check({ code = 14, ext = { consumerGroup = "G", topic = "P" } }) })
        assert.is_true(check({ code = 14, ext = { consumerGroup = "G", topic = "S" } }))
        -- END_TRANSACTION: the producer group (not DENY), the topic PUB when named
        assert.is_true(check({ code = 37, ext = { producerGroup = "G", commitLogOffset = "0" } }))
        assert.is_true(check({ code = 37, ext = { producerGroup = "PG" } }))
        assert.same({ false, DG }, { check({ code = 37, ext = { producerGroup = "DG" } }) })
        assert.same({ false, "No default permission for topic:S" },
            { check({ code = 37, ext = { producerGroup = "G", topic = "S" } }) })
        assert.is_true(check({ code = 37, ext = { producerGroup = "G", topic = "P" } }))
        -- LOCK/UNLOCK_BATCH_MQ: the body's group and every mqSet topic, SUB
        local function lock(group, topics)
            local mqs = {}
            for i, tp in ipairs(topics) do
                mqs[i] = ('{"brokerName":"b","queueId":%d,"topic":"%s"}'):format(i, tp)
            end
            return ('{"clientId":"c","consumerGroup":"%s","mqSet":[%s],"onlyThisBroker":false}')
                :format(group, table.concat(mqs, ","))
        end
        for _, code in ipairs({ 41, 42 }) do
            assert.is_true(check({ code = code, ext = {}, body = lock("G", { "S", "A" }) }))
            assert.is_true(check({ code = code, ext = {}, body = lock("G", {}) }))
            assert.same({ false, D }, { check({ code = code, ext = {}, body = lock("G", { "S", "D" }) }) })
            assert.same({ false, DG }, { check({ code = code, ext = {}, body = lock("DG", { "S" }) }) })
            assert.same({ false, DG }, { check({ code = code, ext = {}, body = lock("G", { "%RETRY%DG" }) }) })
            for _, bad in ipairs({ "", "{nope", '{"mqSet":[]}', '{"consumerGroup":"G","mqSet":[1]}',
                                   '{"consumerGroup":"\\u0047","mqSet":[]}' }) do
                local ok, remark = check({ code = code, ext = {}, body = bad })
                assert.is_false(ok, bad)
                assert.truthy(remark:find("LOCK_BATCH_MQ body", 1, true), remark)
            end
        end
        -- GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY: admin only
        for _, code in ipairs({ 307, 309 }) do
            assert.same({ false, ("Need admin permission for request code=%d, but accessKey=RocketMQ is not")
                :format(code) }, { check({ code = code, ext = { consumerGroup = "G", clientId = "c" } }) })
        end
    end)

    it("tries the signature with _UNIQUE_KEY_QUERY only for QUERY_MESSAGE", function()
        local t = table_of({ { accessKey = "RocketMQ", secretKey = SECRET, defaultTopicPerm = "PUB|SUB" } })
        -- signed over every field, _UNIQUE_KEY_QUERY included: only 12 carries it
        local q = { code = 12, ext = { topic = "T", key = "K", _UNIQUE_KEY_QUERY = "true" } }
        assert.is_true(t:check(signed(q, "RocketMQ"), "1.2.3.4:5", "broker"))
        q.code = 10
        local ok, remark = t:check(signed(q, "RocketMQ"), "1.2.3.4:5", "broker")
        assert.is_false(ok)
        assert.equal("Check signature failed for accessKey=RocketMQ", msg(remark))
    end)

    it("gives an admin without perms every resource, and one with perms only those", function()
        local t = table_of({
            { accessKey = "admin-all", secretKey = SECRET, admin = true },
            { accessKey = "admin-some", secretKey = SECRET, admin = true, topicPerms = { "X=SUB" } },
        })
        assert.is_true(t:check(signed({ code = 310, ext = { b = "Any" } }, "admin-all"), "1.2.3.4:5", "broker"))
        local ok, remark = t:check(signed({ code = 310, ext = { b = "Any" } }, "admin-some"), "1.2.3.4:5", "broker")
        assert.is_false(ok)
        assert.equal("No default permission for topic:Any", msg(remark))
    end)

    it("refuses accounts 4.9.8 refuses", function()
        local t = acl.table()
        local ok, err = t:account({ accessKey = "short", secretKey = SECRET })
        assert.is_nil(ok)
        assert.equal("The accessKey=short and secretKey=12345678 cannot be null and length should longer than 6", err)
        ok, err = t:account({ accessKey = "long-enough", secretKey = SECRET, topicPerms = { "nopermhere" } })
        assert.is_nil(ok)
        assert.equal("Parse resource permission failed for topic:nopermhere", err)
        ok, err = t:account({ accessKey = "long-enough", secretKey = SECRET, whiteRemoteAddress = "1.2.3" })
        assert.is_nil(ok)
        assert.equal("Netaddress examine Exception netaddress is 1.2.3", err)
        assert.is_true(acl.perm_valid("PUB|SUB"))
        assert.is_true(acl.perm_valid("DENY"))
        assert.is_false(acl.perm_valid("ALL"))
    end)

    it("holds 10,000 accounts with 10,000 topic perms each answering for its own", function()
        local t = acl.table()
        local perms = {}
        for i = 1, 10000 do
            perms[i] = ("T%05d=%s"):format(i, i % 2 == 0 and "PUB" or "DENY")
        end
        for i = 1, 10000 do
            assert(t:account({ accessKey = ("account-%05d"):format(i), secretKey = "secret-" .. i,
                               topicPerms = i == 1 and perms or nil, defaultTopicPerm = "PUB" }))
        end
        assert.equal(10000, t:count())
        for _, i in ipairs({ 1, 2, 3, 4999, 10000 }) do
            local ok = t:check(signed({ code = 310, ext = { b = ("T%05d"):format(i) } }, "account-00001",
                                      "secret-1"), "1.2.3.4:5", "broker")
            assert.equal(i % 2 == 0, ok, i)
            -- the other accounts have no perms: their default PUB
            local other = i == 1 and 2 or i
            assert.is_true(t:check(signed({ code = 310, ext = { b = "T00001" } }, ("account-%05d"):format(other),
                                          "secret-" .. other), "1.2.3.4:5", "broker"))
        end
    end)

    it("finds plain_acl.yml where aclFile, rocketmqHome or the conf file say", function()
        local plain = require "rmq.acl.plain"
        plain.set_conf_path("/etc/rmq/broker.lua")
        assert.equal("/etc/rmq/plain_acl.yml", plain.path({}))
        assert.equal("/opt/rmq/conf/plain_acl.yml", plain.path({ rocketmqHome = "/opt/rmq" }))
        assert.equal("/x/acl.yml", plain.path({ aclFile = "/x/acl.yml", rocketmqHome = "/opt/rmq" }))
        plain.set_conf_path("broker.lua")
        assert.equal("./plain_acl.yml", plain.path({}))
    end)

    it("reads plain_acl.yml's YAML with libyaml, saying where it is wrong", function()
        local data = assert(acl.yaml_decode([[
# comment
globalWhiteRemoteAddresses: [10.10.103.*, "192.168.0.*"]
accounts:
- accessKey: RocketMQ
  secretKey: 12345678
  whiteRemoteAddress:
  admin: false
  topicPerms:
  - 'topicA=DENY'
]]))
        assert.same({ "10.10.103.*", "192.168.0.*" }, data.globalWhiteRemoteAddresses)
        assert.equal("12345678", data.accounts[1].secretKey)
        assert.equal(acl.NULL, data.accounts[1].whiteRemoteAddress)
        assert.is_false(data.accounts[1].admin)
        assert.same({ "topicA=DENY" }, data.accounts[1].topicPerms)
        local v, err = acl.yaml_decode("accounts:\n- a: 1\n   b: [2\n")
        assert.is_nil(v)
        assert.matches("^line %d+ column %d+: ", err)
        v, err = acl.yaml_decode("a: &x 1\nb: *x\n")
        assert.is_nil(v)
        assert.matches("anchors and aliases are not supported", err)
        assert.equal(acl.NULL, acl.yaml_decode(""))
        -- the line and column of the node at fault (1-based, as editors count)
        local where = {
            { "a: 1\nb:\n  c: &x 1\n", "line 3 column 6: anchors and aliases are not supported" },
            { "a: 1\nb: *x\n", "line 2 column 4: anchors and aliases are not supported" },
            { "a: 1\nlist: &l\n  - 1\n", "line 2 column 7: anchors and aliases are not supported" },
            { "a: 1\n? [x]\n: 2\n", "line 2 column 3: a mapping key must be a scalar" },
        }
        for _, w in ipairs(where) do
            v, err = acl.yaml_decode(w[1])
            assert.is_nil(v)
            assert.equal(w[2], err, w[1])
        end
        v, err = acl.yaml_decode("a: 1\nb: 2\nc: 3\n", 3)
        assert.is_nil(v)
        assert.equal("line 3 column 4: too many nodes", err)
    end)
end)
