-- rmq.processors, the constructors of the native request processors:
-- what they accept.  (What the processors answer is in
-- spec/integration/native_processors_spec.lua and native_differential_spec.lua.)
local store = require("rmq.store")
local util = require("support.store")
local processors = require("rmq.processors")
local native = require("rmq.native")
local send = require("rmq.broker.send")

describe("rmq.processors.send", function()
    local dir, st

    setup(function()
        dir = util.tmpdir()
        st = assert(store.open(dir, { mappedFileSizeCommitLog = 256 * 1024, storeHost = "127.0.0.1:10911" }))
    end)

    teardown(function()
        st:close()
        util.rmrf(dir)
    end)

    local function opts(extra)
        local o = { store = st, v1 = send.HEADER_V1, v2 = send.HEADER_V2, cluster = "C", region = "R",
                    brokerPermission = 6, notAllowed = { "SCHEDULE_TOPIC_XXXX" } }
        for k, v in pairs(extra) do
            o[k] = v
        end
        return o
    end

    it("keeps string options only (a number's text would not outlive the call)", function()
        assert.is_true(native.is(processors.send(opts({}))))
        assert.has_error(function() processors.send(opts({ cluster = 123 })) end, "opts.cluster must be a string")
        assert.has_error(function() processors.send(opts({ region = 7 })) end, "opts.region must be a string")
        assert.has_error(function() processors.send(opts({ notAllowed = { "A", 5 } })) end,
                         "opts.notAllowed[2] must be a string")
    end)
end)
