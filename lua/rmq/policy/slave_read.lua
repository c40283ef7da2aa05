-- Which broker a consumer should pull from next (suggestWhichBrokerId in
-- the PULL_MESSAGE reply), RocketMQ 4.9.8's rule (protocol.md 6.8).
--
-- suggest(facts) -> brokerId
--   facts.slaveReadEnable              broker conf
--   facts.maxPhyOffset                 commit log max offset
--   facts.lastPhyOffset                physical offset of the last consume
--                                      queue entry the pull examined
--   facts.physicalMemory               bytes of RAM
--   facts.accessMessageInMemoryMaxRatio  percent (40)
--   facts.whichBrokerWhenConsumeSlowly   the group's setting (1)
--   facts.groupBrokerId                  the group's brokerId (0)
--   facts.group, facts.topic, facts.queueId  what is pulled
--   facts.slave                          this broker is a slave
--   facts.slaveAckOffset, facts.slaveLagBytes, facts.slaveConnected
--                                        replication (rmq.ha's figures:
--                                        on a master the slaves' highest
--                                        acknowledged offset and the bytes
--                                        past it; on a slave its own; nil
--                                        without HA; given to policies
--                                        other than this one)
--
-- A broker's slaveReadPolicy names a module with such a suggest
-- (UPDATE_BROKER_CONFIG may replace it: the next pull reply follows);
-- examples: rmq.policy.slave_read_always, rmq.policy.slave_read_lag and
-- conf/broker-a-slave-read.lua.
--
-- A consumer is "slow" when what it still has to read is more than the
-- share of memory the page cache may hold: then it is sent to a slave so
-- the master's cache serves the consumers that keep up.
local M = {}

function M.is_slow(facts)
    local memory = facts.physicalMemory * facts.accessMessageInMemoryMaxRatio // 100
    return facts.maxPhyOffset - facts.lastPhyOffset > memory
end

function M.suggest(facts)
    if not facts.slaveReadEnable then
        return 0
    end
    if M.is_slow(facts) then
        return facts.whichBrokerWhenConsumeSlowly or 1
    end
    return facts.groupBrokerId or 0
end

return M
