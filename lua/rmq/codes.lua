-- rmq.codes: the one registry of RocketMQ numbers.
--
-- Request codes, response codes, PermName bits and LanguageCode ordinals,
-- as Apache RocketMQ 4.9.8 defines them (protocol.md §2.1, §2.2, §1.5,
-- §6.1). Nothing else in rmq may spell a code as a bare number: look it
-- up here, so that a grep for a name finds every use.
--
--   local codes = require "rmq.codes"
--   codes.request.SEND_MESSAGE_V2      --> 310   (alias: codes.req)
--   codes.response.TOPIC_NOT_EXIST     --> 17    (alias: codes.resp)
--   codes.SEND_MESSAGE_V2              --> 310   (flat: requests and responses)
--   codes.request_name[105]            --> "GET_ROUTEINFO_BY_TOPIC"
--   codes.response_name[3]             --> "REQUEST_CODE_NOT_SUPPORTED"
--
-- This file is also the C side's table: at build time cmake/gen_codes.c
-- runs it and writes build/gen/rmq_codes.h (RMQ_REQ_*, RMQ_RESP_*, ...),
-- so a number and its name exist here only (docs/request-codes.md).
--
-- Request and response numbers overlap (17 is UPDATE_AND_CREATE_TOPIC as a
-- request and TOPIC_NOT_EXIST as a response), hence two reverse maps. The
-- *names* never collide: the flat table is built from both, and a
-- collision is a load-time error, so it cannot slip in unnoticed.

local M = {}

--- RequestCode (common/.../protocol/RequestCode.java @4.9.8), protocol.md §2.1.
M.request = {
    SEND_MESSAGE = 10,
    PULL_MESSAGE = 11,                  -- main port only, never the VIP port
    QUERY_MESSAGE = 12,
    QUERY_BROKER_OFFSET = 13,
    QUERY_CONSUMER_OFFSET = 14,
    UPDATE_CONSUMER_OFFSET = 15,
    UPDATE_AND_CREATE_TOPIC = 17,
    GET_ALL_TOPIC_CONFIG = 21,
    GET_TOPIC_CONFIG_LIST = 22,
    GET_TOPIC_NAME_LIST = 23,
    UPDATE_BROKER_CONFIG = 25,
    GET_BROKER_CONFIG = 26,
    TRIGGER_DELETE_FILES = 27,
    GET_BROKER_RUNTIME_INFO = 28,
    SEARCH_OFFSET_BY_TIMESTAMP = 29,
    GET_MAX_OFFSET = 30,
    GET_MIN_OFFSET = 31,
    GET_EARLIEST_MSG_STORETIME = 32,
    VIEW_MESSAGE_BY_ID = 33,
    HEART_BEAT = 34,
    UNREGISTER_CLIENT = 35,
    CONSUMER_SEND_MSG_BACK = 36,
    END_TRANSACTION = 37,
    GET_CONSUMER_LIST_BY_GROUP = 38,
    CHECK_TRANSACTION_STATE = 39,       -- broker -> producer, one-way
    NOTIFY_CONSUMER_IDS_CHANGED = 40,   -- broker -> consumer, one-way
    LOCK_BATCH_MQ = 41,
    UNLOCK_BATCH_MQ = 42,
    GET_ALL_CONSUMER_OFFSET = 43,
    GET_ALL_DELAY_OFFSET = 45,
    CHECK_CLIENT_CONFIG = 46,
    UPDATE_AND_CREATE_ACL_CONFIG = 50,
    DELETE_ACL_CONFIG = 51,
    GET_BROKER_CLUSTER_ACL_INFO = 52,
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53,
    -- Not in protocol.md's table, but defined (deprecated, no handler) in
    -- the 4.x RequestCode.java and still in 5.x; kept so that a log line
    -- names it if an old mqadmin sends it.
    GET_BROKER_CLUSTER_ACL_CONFIG = 54,
    PUT_KV_CONFIG = 100,
    GET_KV_CONFIG = 101,
    DELETE_KV_CONFIG = 102,
    REGISTER_BROKER = 103,
    UNREGISTER_BROKER = 104,
    GET_ROUTEINFO_BY_TOPIC = 105,
    GET_BROKER_CLUSTER_INFO = 106,
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200,
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201,
    GET_TOPIC_STATS_INFO = 202,
    GET_CONSUMER_CONNECTION_LIST = 203,
    GET_PRODUCER_CONNECTION_LIST = 204,
    WIPE_WRITE_PERM_OF_BROKER = 205,
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206,
    DELETE_SUBSCRIPTIONGROUP = 207,
    GET_CONSUME_STATS = 208,
    SUSPEND_CONSUMER = 209,
    RESUME_CONSUMER = 210,
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211,
    RESET_CONSUMER_OFFSET_IN_BROKER = 212,
    ADJUST_CONSUMER_THREAD_POOL = 213,
    WHO_CONSUME_THE_MESSAGE = 214,
    DELETE_TOPIC_IN_BROKER = 215,
    DELETE_TOPIC_IN_NAMESRV = 216,
    GET_KVLIST_BY_NAMESPACE = 219,
    RESET_CONSUMER_CLIENT_OFFSET = 220,
    GET_CONSUMER_STATUS_FROM_CLIENT = 221,
    INVOKE_BROKER_TO_RESET_OFFSET = 222,
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223,
    GET_TOPICS_BY_CLUSTER = 224,
    QUERY_TOPIC_CONSUME_BY_WHO = 300,
    REGISTER_FILTER_SERVER = 301,
    REGISTER_MESSAGE_FILTER_CLASS = 302,
    QUERY_CONSUME_TIME_SPAN = 303,
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304,
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305,
    CLEAN_EXPIRED_CONSUMEQUEUE = 306,
    GET_CONSUMER_RUNNING_INFO = 307,
    QUERY_CORRECTION_OFFSET = 308,
    CONSUME_MESSAGE_DIRECTLY = 309,
    SEND_MESSAGE_V2 = 310,
    GET_UNIT_TOPIC_LIST = 311,
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312,
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313,
    CLONE_GROUP_OFFSET = 314,
    VIEW_BROKER_STATS_DATA = 315,
    CLEAN_UNUSED_TOPIC = 316,
    GET_BROKER_CONSUME_STATS = 317,
    UPDATE_NAMESRV_CONFIG = 318,
    GET_NAMESRV_CONFIG = 319,
    SEND_BATCH_MESSAGE = 320,
    QUERY_CONSUME_QUEUE = 321,
    QUERY_DATA_VERSION = 322,
    RESUME_CHECK_HALF_MESSAGE = 323,
    SEND_REPLY_MESSAGE = 324,
    SEND_REPLY_MESSAGE_V2 = 325,
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326,
    ADD_WRITE_PERM_OF_BROKER = 327,
    GET_ALL_PRODUCER_INFO = 328,
    DELETE_EXPIRED_COMMITLOG = 329,

    -- 5.x codes (remoting/.../protocol/RequestCode.java @5.x) that
    -- protocol.md §2.1 lists. No 4.x client sends them; they are here so
    -- that a 5.x client or broker meeting rmq is logged by name and
    -- answered REQUEST_CODE_NOT_SUPPORTED on purpose, not by accident.
    UPDATE_AND_CREATE_TOPIC_LIST = 18,
    GET_CLIENT_CONFIG = 47,
    GET_TIMER_CHECK_POINT = 60,
    GET_TIMER_METRICS = 61,
    REGISTER_TOPIC_IN_NAMESRV = 217,
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST = 225,
    QUERY_TOPICS_BY_CONSUMER = 343,
    QUERY_SUBSCRIPTION_BY_CONSUMER = 345,
    GET_TOPIC_CONFIG = 351,
    GET_SUBSCRIPTIONGROUP_CONFIG = 352,
    LITE_PULL_MESSAGE = 361,
    RECALL_MESSAGE = 370,
    QUERY_ASSIGNMENT = 400,
    SET_MESSAGE_REQUEST_MODE = 401,
    GET_ALL_MESSAGE_REQUEST_MODE = 402,
    UPDATE_AND_CREATE_STATIC_TOPIC = 513,
    GET_BROKER_MEMBER_GROUP = 901,
    ADD_BROKER = 902,
    REMOVE_BROKER = 903,
    BROKER_HEARTBEAT = 904,
    NOTIFY_MIN_BROKER_ID_CHANGE = 905,
    EXCHANGE_BROKER_HA_INFO = 906,
    GET_BROKER_HA_STATUS = 907,
    RESET_MASTER_FLUSH_OFFSET = 908,
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001,
    CONTROLLER_ELECT_MASTER = 1002,
    CONTROLLER_REGISTER_BROKER = 1003,
    CONTROLLER_GET_REPLICA_INFO = 1004,
    CONTROLLER_GET_METADATA_INFO = 1005,
    CONTROLLER_GET_SYNC_STATE_DATA = 1006,
    GET_BROKER_EPOCH_CACHE = 1007,
    NOTIFY_BROKER_ROLE_CHANGED = 1008,
    UPDATE_CONTROLLER_CONFIG = 1009,
    GET_CONTROLLER_CONFIG = 1010,
    CLEAN_BROKER_DATA = 1011,
    CONTROLLER_GET_NEXT_BROKER_ID = 1012,
    CONTROLLER_APPLY_BROKER_ID = 1013,
    UPDATE_COLD_DATA_FLOW_CTR_CONFIG = 2001,
    REMOVE_COLD_DATA_FLOW_CTR_CONFIG = 2002,
    GET_COLD_DATA_FLOW_CTR_INFO = 2003,
    SET_COMMITLOG_READ_MODE = 2004,
    AUTH_CREATE_USER = 3001,
    AUTH_UPDATE_USER = 3002,
    AUTH_DELETE_USER = 3003,
    AUTH_GET_USER = 3004,
    AUTH_LIST_USER = 3005,
    AUTH_CREATE_ACL = 3006,
    AUTH_UPDATE_ACL = 3007,
    AUTH_DELETE_ACL = 3008,
    AUTH_GET_ACL = 3009,
    AUTH_LIST_ACL = 3010,
    POP_MESSAGE = 200050,
    ACK_MESSAGE = 200051,
    PEEK_MESSAGE = 200052,
    CHANGE_MESSAGE_INVISIBLETIME = 200053,
    NOTIFICATION = 200054,
    POLLING_INFO = 200055,
    BATCH_ACK_MESSAGE = 200151,
}

--- ResponseCode: RemotingSysResponseCode (0-4) + ResponseCode @4.9.8,
--- protocol.md §2.2.
M.response = {
    SUCCESS = 0,
    SYSTEM_ERROR = 1,               -- the Java producer retries another broker
    SYSTEM_BUSY = 2,
    REQUEST_CODE_NOT_SUPPORTED = 3,
    TRANSACTION_FAILED = 4,
    FLUSH_DISK_TIMEOUT = 10,        -- stored; client sees SendStatus FLUSH_DISK_TIMEOUT
    SLAVE_NOT_AVAILABLE = 11,
    FLUSH_SLAVE_TIMEOUT = 12,
    MESSAGE_ILLEGAL = 13,
    SERVICE_NOT_AVAILABLE = 14,
    VERSION_NOT_SUPPORTED = 15,
    NO_PERMISSION = 16,
    TOPIC_NOT_EXIST = 17,
    TOPIC_EXIST_ALREADY = 18,
    PULL_NOT_FOUND = 19,
    PULL_RETRY_IMMEDIATELY = 20,
    PULL_OFFSET_MOVED = 21,
    QUERY_NOT_FOUND = 22,
    SUBSCRIPTION_PARSE_FAILED = 23,
    SUBSCRIPTION_NOT_EXIST = 24,
    SUBSCRIPTION_NOT_LATEST = 25,
    SUBSCRIPTION_GROUP_NOT_EXIST = 26,
    FILTER_DATA_NOT_EXIST = 27,
    FILTER_DATA_NOT_LATEST = 28,
    TRANSACTION_SHOULD_COMMIT = 200,
    TRANSACTION_SHOULD_ROLLBACK = 201,
    TRANSACTION_STATE_UNKNOW = 202,     -- sic: RocketMQ's spelling
    TRANSACTION_STATE_GROUP_WRONG = 203,
    NO_BUYER_ID = 204,
    NOT_IN_CURRENT_UNIT = 205,
    CONSUMER_NOT_ONLINE = 206,
    CONSUME_MSG_TIMEOUT = 207,
    NO_MESSAGE = 208,
    -- 209-211 carry their 4.9.8 meaning. 5.x reuses the numbers as
    -- POLLING_FULL, POLLING_TIMEOUT and BROKER_NOT_EXIST; those names are
    -- left out so that response_name[209] has one answer.
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209,
    DELETE_ACL_CONFIG_FAILED = 210,
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211,
    FLOW_CONTROL = 215,

    -- 5.x additions whose numbers are unused in 4.9.8 (§2.2). The
    -- client-side RPC_* pseudo codes are left out: rmq never sends them.
    INVALID_PARAMETER = 29,
    BROKER_DISPATCH_NOT_COMPLETE = 212,
    BROADCAST_CONSUMPTION = 213,
    NOT_LEADER_FOR_QUEUE = 501,
    ILLEGAL_OPERATION = 604,
    GO_AWAY = 1500,
    USER_NOT_EXIST = 3001,
    POLICY_NOT_EXIST = 3002,
    -- The controller's (rmq.controller, RocketMQ 5 ResponseCode).
    CONTROLLER_FENCED_MASTER_EPOCH = 2000,
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001,
    CONTROLLER_INVALID_MASTER = 2002,
    CONTROLLER_INVALID_REPLICAS = 2003,
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004,
    CONTROLLER_INVALID_REQUEST = 2005,
    CONTROLLER_BROKER_NOT_ALIVE = 2006,
    CONTROLLER_NOT_LEADER = 2007,
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008,
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009,
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010,
    CONTROLLER_MASTER_STILL_EXIST = 2011,
    CONTROLLER_ELECT_MASTER_FAILED = 2012,
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013,
    CONTROLLER_BROKER_ID_INVALID = 2014,
}

--- 5.x names of response numbers that 4.9.8 gives another meaning
--- (ResponseCode @5.x, §2.2): the POP family answers with these.  Kept
--- apart so that response_name[210] has one answer; also flat
--- (codes.POLLING_TIMEOUT).
M.response_v5 = {
    POLLING_FULL = 209,
    POLLING_TIMEOUT = 210,
    BROKER_NOT_EXIST = 211,
}

--- The store's put statuses (as st:put names them) -> a SEND's reply code
--- (protocol.md §4.1, step 12); any other status is SYSTEM_ERROR.  And
--- those after which the message is in the commit log.
M.put_status = {
    PUT_OK = M.response.SUCCESS,
    FLUSH_DISK_TIMEOUT = M.response.FLUSH_DISK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT = M.response.FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE = M.response.SLAVE_NOT_AVAILABLE,
    MESSAGE_ILLEGAL = M.response.MESSAGE_ILLEGAL,
    PROPERTIES_SIZE_EXCEEDED = M.response.MESSAGE_ILLEGAL,
    SERVICE_NOT_AVAILABLE = M.response.SERVICE_NOT_AVAILABLE,
}
M.put_stored = {
    PUT_OK = true, FLUSH_DISK_TIMEOUT = true, FLUSH_SLAVE_TIMEOUT = true,
    SLAVE_NOT_AVAILABLE = true,
}

--- The store's get statuses (as st:get names them) -> a PULL's reply code
--- (protocol.md §4.3, step 5); NO_MATCHED_LOGIC_QUEUE and
--- NO_MESSAGE_IN_QUEUE are absent: PULL_OFFSET_MOVED when the pull asked
--- for an offset other than 0, else PULL_NOT_FOUND.  And those after which
--- the read scanned consume queue entries (so its last scanned physical
--- offset means something to the slave-read rule).
M.get_status = {
    FOUND = M.response.SUCCESS,
    MESSAGE_WAS_REMOVING = M.response.PULL_RETRY_IMMEDIATELY,
    NO_MATCHED_MESSAGE = M.response.PULL_RETRY_IMMEDIATELY,
    OFFSET_FOUND_NULL = M.response.PULL_NOT_FOUND,
    OFFSET_OVERFLOW_BADLY = M.response.PULL_OFFSET_MOVED,
    OFFSET_OVERFLOW_ONE = M.response.PULL_NOT_FOUND,
    OFFSET_TOO_SMALL = M.response.PULL_OFFSET_MOVED,
}
M.get_scanned = { FOUND = true, NO_MATCHED_MESSAGE = true, MESSAGE_WAS_REMOVING = true }
for _, t in ipairs({ { M.put_stored, M.put_status, "put" }, { M.get_scanned, M.get_status, "get" } }) do
    for name in pairs(t[1]) do
        if t[2][name] == nil then
            error(("rmq.codes: %s status %s has no reply code"):format(t[3], name))
        end
    end
end

-- Short aliases, the spelling the processor tables use (style.md §10.3).
M.req = M.request
M.resp = M.response

--- PermName bits (protocol.md §6.1).
M.perm = {
    PERM_PRIORITY = 8,      -- unused by RocketMQ itself
    PERM_READ = 4,
    PERM_WRITE = 2,
    PERM_INHERIT = 1,       -- the topic is an auto-create template (TBW102)
}

--- MQVersion.Version ordinals (common/.../MQVersion.java): a
--- RemotingCommand's `version`, for the decisions that depend on it
--- (protocol.md §1.9).
M.version = {
    V3_0_11 = 37,           -- REGISTER_BROKER bodies are RegisterBrokerBody from here
    V3_4_9 = 121,           -- a retry's maxReconsumeTimes header counts from here
    V4_9_4 = 401,           -- GET_ROUTEINFO_BY_TOPIC answers standard JSON from here
}

--- LanguageCode: M.language[ordinal] = name (the byte of the binary
--- header, §1.5) and M.language_code[name] = ordinal (the JSON header
--- carries the name, §1.4).
M.language = {
    [0] = "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY",
    "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST",
    "NODE_JS",              -- 5.x only
}
M.language_code = {}
for ordinal = 0, #M.language do
    M.language_code[M.language[ordinal]] = ordinal
end

-- Reverse maps, and a check that no number is given two names within
-- one table (a typo in a number would otherwise silently shadow).
local function reverse(map, what)
    local names = {}
    for name, code in pairs(map) do
        if names[code] ~= nil then
            error(("rmq.codes: %s code %d is both %s and %s")
                :format(what, code, names[code], name))
        end
        names[code] = name
    end
    return names
end

M.request_name = reverse(M.request, "request")
M.response_name = reverse(M.response, "response")

-- Flat access. Request and response names are disjoint in 4.9.8 (and in
-- the 5.x names kept above); if that ever changes, fail here rather than
-- let codes.X mean one thing in a handler and another in a reply.
for _, map in ipairs({ M.request, M.response, M.response_v5 }) do
    for name, code in pairs(map) do
        if M[name] ~= nil and M[name] ~= code then
            error(("rmq.codes: name %s is both %d and %d")
                :format(name, M[name], code))
        end
        M[name] = code
    end
end

return M
