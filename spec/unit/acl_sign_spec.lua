-- acl_sign_spec: rmq.acl's request signatures (src/acl/acl_sign.c)
-- against the Signatures real clients put in the captured frames, and
-- against HMAC-SHA1 vectors that do not need the fixtures.
local acl = require "rmq.acl"
local codec = require "rmq.codec"
local fixtures = require "support.fixtures"
local fx_it = fixtures.gate(it, pending)

-- The secret each captured AccessKey signed with (fixtures README):
-- mqadmin's conf/tools.yml, and rocketmq-client-cpp's empty credentials.
local SECRETS = { rocketmq2 = "12345678", [""] = "" }

describe("rmq.acl signatures", function()
    -- RFC 2202 test cases 1-3 and the well-known "quick brown fox" one,
    -- as Base64 of the HMAC-SHA1 digest.
    it("computes HMAC-SHA1 as RFC 2202 gives it", function()
        assert.equal("thcxhlUFcmTii8C2+zeMjvFGvgA=",
            acl.hmac(("\x0b"):rep(20), "Hi There"))
        assert.equal("7/zfauXrL6LSdBbV8YTfnCWafHk=",
            acl.hmac("Jefe", "what do ya want for nothing?"))
        assert.equal("El1zQrmsEc2Ro5r0iqF7T2PxddM=",
            acl.hmac(("\xaa"):rep(20), ("\xdd"):rep(50)))
        assert.equal("3nybhbi3iqa8ino29wqQcBydtNk=",
            acl.hmac("key", "The quick brown fox jumps over the lazy dog"))
        -- An empty secret is a valid HMAC key (rocketmq-client-cpp signs
        -- with it when it has no credentials).
        assert.equal("+9sdGxiqbAgyS31ktx+3Y3BpDh0=", acl.hmac("", ""))
    end)

    it("signs the values sorted by key, then the body, without Signature", function()
        local fields = { topic = "T", AccessKey = "ak", Signature = "old",
                         b = "2", a = "1" }
        -- "AccessKey" < "a" < "b" < "topic": upper case sorts first.
        assert.equal("ak12Tbody", acl.content(fields, "body"))
        assert.equal(acl.hmac("secret", "ak12Tbody"), acl.sign(fields, "body", "secret"))
        assert.equal(acl.hmac("secret", "ak12T"), acl.sign(fields, nil, "secret"))
        -- numbers and booleans are signed as their text, as cpp and
        -- ali-ons sign their JSON numbers
        assert.equal("17true", acl.content({ a = 17, b = true }))
    end)

    it("orders keys as Java's String.compareTo (UTF-16 units)", function()
        -- U+FF21 (3 UTF-8 bytes) sorts after U+1F600 (4 bytes, starts
        -- with 0xF0) by bytes, but before it in UTF-16 (0xFF21 > 0xD83D).
        local fields = { ["\u{FF21}"] = "x", ["\u{1F600}"] = "y" }
        assert.equal("yx", acl.content(fields))
    end)

    it("signs a received command, leaving _UNIQUE_KEY_QUERY out on request", function()
        local frame = codec.encode({ code = 12, ext = { topic = "T", key = "k",
            AccessKey = "ak", _UNIQUE_KEY_QUERY = "true" } })
        local cmd = assert(codec.decode(frame))
        -- "_" (0x5F) sorts between upper and lower case
        assert.equal(acl.hmac("s3cret", "aktruekT"), acl.signature_of(cmd, "s3cret"))
        assert.equal(acl.hmac("s3cret", "akkT"), acl.signature_of(cmd, "s3cret", true))
    end)

    fx_it("recomputes every Signature in the captured frames", function()
        local checked, by_client = 0, {}
        for _, name in ipairs(fixtures.frame_files()) do
            for _, row in ipairs(fixtures.frames(name)) do
                local ext = row.decoded.extFields
                if type(ext) == "table" and type(ext.Signature) == "string" then
                    local secret = SECRETS[ext.AccessKey]
                    assert(secret, name .. ": unknown AccessKey " .. tostring(ext.AccessKey))
                    local cmd = assert(codec.decode(row.raw))
                    local what = ("%s line %d (code %d, %s)"):format(name, row.line,
                        row.decoded.code, row.client)
                    assert.equal(ext.Signature, acl.signature_of(cmd, secret), what)
                    -- the same from the fields table and the body
                    assert.equal(ext.Signature, acl.sign(cmd.ext, cmd.body, secret), what)
                    -- and a wrong secret or a changed value does not match
                    assert.not_equal(ext.Signature, acl.signature_of(cmd, secret .. "x"), what)
                    local changed = {}
                    for k, v in pairs(cmd.ext) do changed[k] = v end
                    changed.AccessKey = changed.AccessKey .. "x"
                    assert.not_equal(ext.Signature, acl.sign(changed, cmd.body, secret), what)
                    checked = checked + 1
                    by_client[row.client] = (by_client[row.client] or 0) + 1
                end
            end
        end
        -- 4 from mqadmin (java), 7 from rocketmq-client-cpp
        assert.equal(11, checked)
        assert.same({ java = 4, cpp = 7 }, by_client)
    end)
end)
