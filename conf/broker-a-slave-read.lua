-- rmq broker configuration: broker-a (conf/broker-a.lua) with read/write
-- separation, two examples in one policy: consumers of the group
-- "report-readers" always read from the slave (brokerId 1,
-- conf/broker-a-s.lua); every other group follows RocketMQ 4.9.8's rule
-- (the slave once it has fallen behind by more than
-- accessMessageInMemoryMaxRatio % of RAM) except while the slave itself
-- is more than 64 MiB behind the master (rmq.policy.slave_read_lag; the
-- lag is the HA service's figure, without it the rule is 4.9.8's).  Run
-- it instead of broker-a.lua:
--
--     rmq-server conf/broker-a-slave-read.lua
--
-- slaveReadPolicy is a function of the pull's facts (listed in
-- lua/rmq/policy/slave_read.lua) returning the brokerId the consumer
-- should pull from next, or a module name: "rmq.policy.slave_read" (the
-- default), "rmq.policy.slave_read_lag", "rmq.policy.slave_read_always"
-- (every consumer to the slave).
-- `mqadmin updateBrokerConfig -k slaveReadPolicy -v MODULE` replaces it
-- while the broker runs; the next pull reply follows.

local home = os.getenv("HOME") or "."
local by_lag = require("rmq.policy.slave_read_lag")

return {
    role = "broker",
    brokerClusterName = "DefaultCluster",
    brokerName = "broker-a",
    brokerId = 0,
    brokerRole = "ASYNC_MASTER",
    namesrvAddr = "127.0.0.1:9876",
    listenPort = 10911,

    -- Private to this host; conf/broker-a.lua says how to open up.
    bindAddress = "127.0.0.1",
    storePathRootDir = home .. "/rmq/store-a",
    flushDiskType = "ASYNC_FLUSH",

    -- Without it every policy's answer is the master (0).
    slaveReadEnable = true,
    slaveReadPolicy = function(facts)
        if facts.group == "report-readers" then
            return 1
        end
        return by_lag.suggest(facts)
    end,

    workers = 0,
    logLevel = "info",
}
