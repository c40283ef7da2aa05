-- acl_client_spec: the project's client signing its requests (ACL 1.0,
-- protocol.md §8.2), what a server receives, and the refusals a broker
-- with aclEnable answers, as the user sees them.
local cjson = require("cjson")
local net = require("rmq.net")
local server = require("support.server")
local fixtures = require("support.fixtures")
local credentials = require("rmq.client.credentials")
local fx_it = fixtures.gate(it, pending)

-- A code no RocketMQ peer sends: the echo server answers it with the
-- extFields it received (JSON) and the body length in the remark.
local ECHO = 7201

local ECHO_CONF = ([[
local cjson = require("cjson")
local function echo(_, cmd)
    return { code = 0, body = cjson.encode(cmd.ext), remark = tostring(cmd.body_len) }
end
return { role = "namesrv", workers = 1, processors = { [%d] = echo } }
]]):format(ECHO)

describe("client signing", function()
    local echo

    setup(function()
        echo = server.start({ source = ECHO_CONF })
    end)

    teardown(function()
        if echo then
            echo:stop()
        end
    end)

    after_each(function()
        net.credentials(nil)
    end)

    local function received(cmd)
        cmd.code = cmd.code or ECHO
        local r = assert(net.call(echo.addr, cmd, 5000))
        assert.equal(0, r.code, r.remark)
        return cjson.decode(r.body), tonumber(r.remark)
    end

    fx_it("signs a request as the Java client (mqadmin) signed the captured one", function()
        -- mqadmin signs with conf/tools.yml's rocketmq2 / 12345678.
        local creds = credentials.of({ accessKey = "rocketmq2", secretKey = "12345678" })
        local n = 0
        for _, name in ipairs({ "update-and-create-topic", "cluster-info", "route-rocketmq-header" }) do
            for _, row in ipairs(fixtures.frames(name .. ".jsonl")) do
                local ext = row.decoded.extFields
                if row.dir == "c2s" and type(ext) == "table" and ext.AccessKey == "rocketmq2" then
                    local mine = {}
                    for k, v in pairs(ext) do
                        if k ~= "AccessKey" and k ~= "Signature" then
                            mine[k] = v
                        end
                    end
                    local got = received({ ext = mine, credentials = creds,
                                           serialize = row.decoded.serializeType })
                    assert.equal("rocketmq2", got.AccessKey)
                    assert.equal(ext.Signature, got.Signature, name)
                    n = n + 1
                end
            end
        end
        assert.equal(4, n)
    end)

    fx_it("signs numbers, booleans and the body as the cpp client signed its SEND_MESSAGE_V2", function()
        -- rocketmq-client-cpp without credentials: AccessKey "", an empty
        -- secret, OnsChannel and the header's JSON numbers signed as text.
        local row = fixtures.frames("send-cpp.jsonl")[1]
        local ext = row.decoded.extFields
        local mine, numbers = {}, 0
        for k, v in pairs(ext) do
            if k ~= "AccessKey" and k ~= "Signature" then
                -- as the Lua caller would have them: integers, booleans
                if type(v) == "number" then
                    v = assert(math.tointeger(v))
                    numbers = numbers + 1
                end
                mine[k] = v
            end
        end
        assert.is_true(numbers > 3)
        local body = assert(require("rmq.codec").decode(row.raw)).body
        local got, blen = received({ ext = mine, body = body,
                                     credentials = { accessKey = "", secretKey = "" } })
        assert.equal(#body, blen)
        assert.equal(ext.Signature, got.Signature)
    end)

    it("sends nothing extra without credentials", function()
        local got = received({ ext = { topic = "T" } })
        assert.same({ topic = "T" }, got)
    end)

    it("replaces AccessKey, SecurityToken and Signature already in the fields", function()
        local creds = { accessKey = "ak", secretKey = "sk", securityToken = "tok" }
        local got = received({ ext = { topic = "T", AccessKey = "forged", Signature = "forged" },
                               body = "payload", credentials = creds })
        assert.equal("ak", got.AccessKey)
        assert.equal("tok", got.SecurityToken)
        -- sorted keys: AccessKey, SecurityToken, topic; then the body
        assert.equal(require("rmq.acl").hmac("sk", "aktokTpayload"), got.Signature)
    end)

    it("signs every request of the state with its default credentials, unless told not to", function()
        net.credentials({ accessKey = "ak", secretKey = "sk" })
        local got = received({ ext = { topic = "T" } })
        assert.equal("ak", got.AccessKey)
        assert.equal(require("rmq.acl").hmac("sk", "akT"), got.Signature)
        -- a request's own credentials win; false sends it unsigned
        got = received({ ext = { topic = "T" }, credentials = { accessKey = "other", secretKey = "x" } })
        assert.equal("other", got.AccessKey)
        got = received({ ext = { topic = "T" }, credentials = false })
        assert.same({ topic = "T" }, got)
        -- conn:call and oneway go through the same encoder
        local c = assert(net.connect(echo.addr))
        local r = assert(c:call({ code = ECHO, ext = { topic = "T" } }, 5000))
        assert.equal("ak", cjson.decode(r.body).AccessKey)
        c:close()
        net.credentials(nil)
        assert.same({ topic = "T" }, (received({ ext = { topic = "T" } })))
    end)

    it("leaves _UNIQUE_KEY_QUERY out of the signature, as the 4.9.8 broker checks it", function()
        local got = received({ ext = { topic = "T", key = "k", _UNIQUE_KEY_QUERY = "true" },
                               credentials = { accessKey = "ak", secretKey = "sk" } })
        assert.equal("true", got._UNIQUE_KEY_QUERY)
        assert.equal(require("rmq.acl").hmac("sk", "akkT"), got.Signature)
    end)

    it("refuses malformed credentials with a clear error", function()
        local ok, err = pcall(net.call, echo.addr, { code = ECHO, credentials = { accessKey = "ak" } })
        assert.is_false(ok)
        assert.matches("credentials: secretKey must be a string", err)
        ok, err = pcall(net.call, echo.addr, { code = ECHO, credentials = "ak:sk" })
        assert.is_false(ok)
        assert.matches("field 'credentials' must be a table or false", err)
        assert.has_error(function() credentials.of({ accessKey = "ak" }) end,
            "credentials: accessKey given without secretKey")
        assert.has_error(function() credentials.of({ secretKey = "sk", accessKey = "" }) end,
            "credentials: accessKey must be a non-empty string")
        assert.is_nil(credentials.of({}))
        -- the echo server is still there
        assert.same({ topic = "T" }, (received({ ext = { topic = "T" } })))
    end)
end)

