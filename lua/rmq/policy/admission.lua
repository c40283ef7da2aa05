-- Flow control: whether a request past a limit is served or answered
-- SYSTEM_BUSY (2), RocketMQ 4.9.8's rule (README "Flow control").
--
-- admit(facts) -> "admit" | "busy", remark
--
-- The broker's C gate (src/broker/admission.c) measures every send, pull,
-- heartbeat and END_TRANSACTION and calls the admissionPolicy only for a
-- request past a limit, so a policy sees the rare requests, not every one
-- (a policy that wants to see every send of a kind sets that kind's wait
-- limit to 0: every request has waited 0 ms or more).
--   facts.code          request code
--   facts.kind          "send" (SEND_MESSAGE, _V2, SEND_BATCH_MESSAGE,
--                       CONSUMER_SEND_MSG_BACK), "pull", "heartbeat",
--                       "transaction"
--   facts.topic         the request's topic (sends and pulls; nil else)
--   facts.oneway        a oneway request (a busy one is dropped unanswered)
--   facts.putInLockMillis  how long the store's current put has held the
--                       commit log lock (0: no put in progress; sends only)
--   facts.osPageCacheBusyTimeOutMills  its limit (conf, live)
--   facts.pageCacheBusy putInLockMillis is over it (4.9.8's
--                       isOSPageCacheBusy)
--   facts.waitMillis    how long the request has waited behind the frames
--                       its worker handled before it since its poll
--                       returned (0 with fast failure off)
--   facts.waitLimitMillis  waitTimeMillsIn{Send,Pull,Heartbeat,
--                       Transaction}Queue, by kind
--   facts.waitOver      waitMillis >= waitLimitMillis
--   facts.brokerFastFailureEnable  conf (live)
--   facts.inFlight      requests the worker holds unanswered (held pulls,
--                       sends waiting for a flush, Lua handlers running)
--   facts.connInFlight  the same, on this request's connection
--   facts.worker        the worker's id; facts.peer  the client's address
-- A remark goes to the client as the reply's remark; without one the
-- gate writes RocketMQ's for the limit crossed.  The function runs on the
-- worker's thread for each such request: no I/O, no waiting.
--
-- A conf names another module (admissionPolicy = "my.policy", a module
-- with an admit function) or gives the function; the live console can
-- replace a module's code while the broker runs (the next busy request
-- follows).
local M = {}

M.REJECT = "[REJECTREQUEST]system busy, start flow control for a while"
M.TIMEOUT_CLEAN = "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
    .. "period in queue: %dms, size of queue: %d"

--- NettyRemotingAbstract's and BrokerFastFailure's remarks.
function M.remark(facts)
    if facts.pageCacheBusy then
        return M.REJECT
    end
    return M.TIMEOUT_CLEAN:format(facts.waitMillis, facts.inFlight)
end

function M.admit(facts)
    if facts.pageCacheBusy then
        return "busy", M.REJECT
    end
    if facts.brokerFastFailureEnable and facts.waitOver then
        return "busy", M.remark(facts)
    end
    return "admit"
end

return M
