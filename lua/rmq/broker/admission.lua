-- Flow control on this worker's broker listeners (README "Flow control"):
-- the C gate (rmq.processors.admission, src/broker/admission.c) measures
-- each send, pull, heartbeat and END_TRANSACTION against the conf's
-- limits (changed live through UPDATE_BROKER_CONFIG) and calls decide()
-- below only for a request past one; decide() runs the conf's
-- admissionPolicy (rmq.policy.admission by default), looked up again
-- after the live console swapped policy code.
--
--   admission.install(b)   b: the broker context (rmq.broker)
local log = require("rmq.log")
local policy = require("rmq.policy")
local processors = require("rmq.processors")

local M = {}

local DEFAULT = "rmq.policy.admission"

--- The policy function for `spec` (conf.admissionPolicy), or the default
--- with a warning when it cannot be resolved.
function M.resolve(spec)
    local fn, err = policy.resolve(spec, "admit", DEFAULT)
    if fn == nil then
        log.warn("admissionPolicy %s: %s; using %s", tostring(spec), tostring(err), DEFAULT)
        fn = require(DEFAULT).admit
    end
    return fn
end

function M.install(b)
    local conf = b.conf
    local fn, gen = nil, nil
    local function decide(facts)
        if gen ~= policy.generation() then
            fn, gen = M.resolve(conf.admissionPolicy), policy.generation()
        end
        return fn(facts)
    end
    -- Kept for the worker's life: collecting it removes the gate.
    M.gate = processors.admission({
        store = b.store, role = "broker", decide = decide,
        osPageCacheBusyTimeOutMills = conf.osPageCacheBusyTimeOutMills,
        waitTimeMillsInSendQueue = conf.waitTimeMillsInSendQueue,
        waitTimeMillsInPullQueue = conf.waitTimeMillsInPullQueue,
        waitTimeMillsInHeartbeatQueue = conf.waitTimeMillsInHeartbeatQueue,
        waitTimeMillsInTransactionQueue = conf.waitTimeMillsInTransactionQueue,
        brokerFastFailureEnable = conf.brokerFastFailureEnable,
    })
end

return M
