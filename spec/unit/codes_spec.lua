-- rmq.codes: numbers checked against protocol.md §2.1, §2.2, §1.5, §6.1.
local codes = require "rmq.codes"

describe("rmq.codes", function()
    it("has the request codes of protocol.md §2.1", function()
        local cases = {
            SEND_MESSAGE = 10, PULL_MESSAGE = 11, QUERY_CONSUMER_OFFSET = 14,
            UPDATE_AND_CREATE_TOPIC = 17, HEART_BEAT = 34, CONSUMER_SEND_MSG_BACK = 36,
            END_TRANSACTION = 37, CHECK_TRANSACTION_STATE = 39,
            NOTIFY_CONSUMER_IDS_CHANGED = 40, LOCK_BATCH_MQ = 41,
            GET_ALL_DELAY_OFFSET = 45, PUT_KV_CONFIG = 100, REGISTER_BROKER = 103,
            UNREGISTER_BROKER = 104, GET_ROUTEINFO_BY_TOPIC = 105,
            GET_BROKER_CLUSTER_INFO = 106, WIPE_WRITE_PERM_OF_BROKER = 205,
            GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206, DELETE_TOPIC_IN_NAMESRV = 216,
            GET_KVLIST_BY_NAMESPACE = 219, GET_TOPICS_BY_CLUSTER = 224,
            SEND_MESSAGE_V2 = 310, UPDATE_NAMESRV_CONFIG = 318, GET_NAMESRV_CONFIG = 319,
            SEND_BATCH_MESSAGE = 320, QUERY_DATA_VERSION = 322,
            SEND_REPLY_MESSAGE_V2 = 325, ADD_WRITE_PERM_OF_BROKER = 327,
            DELETE_EXPIRED_COMMITLOG = 329,
            -- 5.x names listed in §2.1
            BROKER_HEARTBEAT = 904, LITE_PULL_MESSAGE = 361, POP_MESSAGE = 200050,
        }
        for name, code in pairs(cases) do
            assert.are.equal(code, codes.request[name], name)
        end
    end)

    it("has the response codes of protocol.md §2.2, 209-211 with their 4.9.8 meaning", function()
        local cases = {
            SUCCESS = 0, SYSTEM_ERROR = 1, SYSTEM_BUSY = 2, REQUEST_CODE_NOT_SUPPORTED = 3,
            FLUSH_DISK_TIMEOUT = 10, SLAVE_NOT_AVAILABLE = 11, FLUSH_SLAVE_TIMEOUT = 12,
            MESSAGE_ILLEGAL = 13, SERVICE_NOT_AVAILABLE = 14, NO_PERMISSION = 16,
            TOPIC_NOT_EXIST = 17, PULL_NOT_FOUND = 19, PULL_RETRY_IMMEDIATELY = 20,
            PULL_OFFSET_MOVED = 21, QUERY_NOT_FOUND = 22, SUBSCRIPTION_GROUP_NOT_EXIST = 26,
            TRANSACTION_STATE_UNKNOW = 202, CONSUMER_NOT_ONLINE = 206,
            UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209, DELETE_ACL_CONFIG_FAILED = 210,
            UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211, FLOW_CONTROL = 215,
        }
        for name, code in pairs(cases) do
            assert.are.equal(code, codes.response[name], name)
        end
        assert.are.equal("UPDATE_AND_CREATE_ACL_CONFIG_FAILED", codes.response_name[209])
        assert.is_nil(codes.response.POLLING_FULL)
    end)

    it("round-trips every request and response through the reverse maps", function()
        local n = 0
        for name, code in pairs(codes.request) do
            assert.are.equal(name, codes.request_name[code])
            n = n + 1
        end
        for code, name in pairs(codes.request_name) do
            assert.are.equal(code, codes.request[name])
        end
        assert.is_true(n > 100)
        for name, code in pairs(codes.response) do
            assert.are.equal(name, codes.response_name[code])
        end
        for code, name in pairs(codes.response_name) do
            assert.are.equal(code, codes.response[name])
        end
    end)

    it("keeps requests and responses apart where numbers overlap", function()
        assert.are.equal("UPDATE_AND_CREATE_TOPIC", codes.request_name[17])
        assert.are.equal("TOPIC_NOT_EXIST", codes.response_name[17])
    end)

    it("offers flat access to both tables, with no name in both", function()
        for name, code in pairs(codes.request) do
            assert.is_nil(codes.response[name], name)
            assert.are.equal(code, codes[name])
        end
        for name, code in pairs(codes.response) do
            assert.are.equal(code, codes[name])
        end
        assert.are.equal(310, codes.SEND_MESSAGE_V2)
        assert.are.equal(3, codes.REQUEST_CODE_NOT_SUPPORTED)
        assert.are.equal(codes.request, codes.req)
        assert.are.equal(codes.response, codes.resp)
    end)

    it("has the PermName bits", function()
        assert.are.same({ PERM_PRIORITY = 8, PERM_READ = 4, PERM_WRITE = 2, PERM_INHERIT = 1 },
            codes.perm)
    end)

    it("maps LanguageCode ordinals both ways", function()
        local names = { [0] = "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY",
            "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS" }
        for i = 0, 13 do
            assert.are.equal(names[i], codes.language[i])
            assert.are.equal(i, codes.language_code[names[i]])
        end
        assert.is_nil(codes.language[14])
    end)

    it("names 209-211 as 5.x does apart from the 4.9.8 table", function()
        assert.are.same({ POLLING_FULL = 209, POLLING_TIMEOUT = 210, BROKER_NOT_EXIST = 211 },
            codes.response_v5)
        assert.are.equal(210, codes.POLLING_TIMEOUT)
        assert.are.equal("DELETE_ACL_CONFIG_FAILED", codes.response_name[210])
    end)

    -- The C side's constants are generated from this module at build time
    -- (cmake/gen_codes.c -> build/gen/rmq_codes.h, docs/request-codes.md).
    describe("as C sees it", function()
        local build = os.getenv("RMQ_BUILD") or "build"

        local function header_enums()
            local f = assert(io.open(build .. "/gen/rmq_codes.h", "rb"))
            local text = f:read("a")
            f:close()
            local got = {}
            for name, n in text:gmatch("\n    (RMQ_[%w_]+) = (%d+),") do
                assert.is_nil(got[name], name)
                got[name] = tonumber(n)
            end
            return got, text
        end

        it("has every code of this module in the generated header, and nothing else", function()
            local got = header_enums()
            local want = {}
            for name, n in pairs(codes.request) do want["RMQ_REQ_" .. name] = n end
            for name, n in pairs(codes.response) do want["RMQ_RESP_" .. name] = n end
            for name, n in pairs(codes.response_v5) do want["RMQ_RESP_" .. name] = n end
            for name, n in pairs(codes.perm) do want["RMQ_" .. name] = n end
            for name, n in pairs(codes.version) do want["RMQ_MQVERSION_" .. name] = n end
            assert.are.same(want, got)
        end)

        it("names codes in C as the reverse maps do", function()
            local _, text = header_enums()
            local fn = text:match("rmq_response_name%(int32_t code%)(.-)\n}")
            assert.truthy(fn:find('case 210: return "DELETE_ACL_CONFIG_FAILED";', 1, true))
            assert.truthy(text:find('case 310: return "SEND_MESSAGE_V2";', 1, true))
        end)

        it("maps the store's statuses to reply codes as this module does", function()
            local _, text = header_enums()
            local function xs(macro, prefix)
                local body = assert(text:match("#define " .. macro .. "%(X%)(.-)\n\n"))
                local got = {}
                for st, code, flag in body:gmatch("X%(([%w_]+), RMQ_RESP_([%w_]+), (%d)%)") do
                    local name = st == "PUT_OK" and st or st:sub(#prefix + 1)
                    got[name] = { codes.response[code], flag == "1" }
                end
                return got
            end
            local function want(map, set)
                local t = {}
                for name, code in pairs(map) do t[name] = { code, set[name] == true } end
                return t
            end
            assert.are.same(want(codes.put_status, codes.put_stored), xs("RMQ_PUT_STATUS_CODES", "PUT_"))
            assert.are.same(want(codes.get_status, codes.get_scanned), xs("RMQ_GET_STATUS_CODES", "GET_"))
            assert.equal(codes.response.MESSAGE_ILLEGAL, codes.put_status.PROPERTIES_SIZE_EXCEEDED)
            assert.is_nil(codes.put_stored.MESSAGE_ILLEGAL)
            assert.equal(codes.response.PULL_NOT_FOUND, codes.get_status.OFFSET_OVERFLOW_ONE)
            assert.is_true(codes.get_scanned.NO_MATCHED_MESSAGE)
        end)

        it("is the only place under src/ that spells a code's number", function()
            -- A `#define NAME n` whose NAME (bar a local R_/RESP_/REQ_
            -- prefix) is a request or response name of this module, or a
            -- `case n: /* NAME */`.
            local names = {}
            for _, map in ipairs({ codes.request, codes.response, codes.response_v5 }) do
                for name in pairs(map) do names[name] = true end
            end
            local p = assert(io.popen("find src -name '*.[ch]' | sort"))
            local bad, files = {}, 0
            for path in p:lines() do
                files = files + 1
                local no = 0
                for line in io.lines(path) do
                    no = no + 1
                    local name = line:match("^%s*#%s*define%s+([%w_]+)%s+%-?%d+")
                    if name then
                        local bare = name:gsub("^R_", ""):gsub("^RESP_", ""):gsub("^REQ_", "")
                        if names[bare] then
                            bad[#bad + 1] = ("%s:%d: %s"):format(path, no, line)
                        end
                    end
                    -- and `case 310: /* SEND_MESSAGE_V2 */`: a number named in a comment
                    local cased = line:match("case%s+%d+%s*:%s*/%*%s*([%u_%d]+)")
                    if cased and names[cased] then
                        bad[#bad + 1] = ("%s:%d: %s"):format(path, no, line)
                    end
                end
            end
            p:close()
            assert.is_true(files > 100)
            assert.are.same({}, bad)
        end)
    end)
end)
