-- TEMPORARY stand-in for engineer ha5's rmq.broker.replica_role (the
-- epoch-fenced role switch with AutoSwitchHAService under it): the lead
-- drops this file for theirs.  It only does what today's 4.x broker can
-- do while running: record the role and id as run-time settings (every
-- worker's conf sees them through rmq.broker.tables) and re-register with
-- the NameServers at once, so the route names the new master.  It does
-- not switch replication, nor refuse sends on a slave.
--
--   change_to_master(b, {epoch =, sync_state_set =, broker_id =})
--   change_to_slave(b, {master_addr =, master_ha_addr =, epoch =, broker_id =})
local log = require("rmq.log")
local register = require("rmq.broker.register")
local tables = require("rmq.broker.tables")

local M = {}

function M.change_to_master(b, t)
    tables.set_setting("brokerRole", b.conf.brokerRole == "SYNC_MASTER" and "SYNC_MASTER" or "ASYNC_MASTER")
    tables.set_setting("brokerId", 0)
    tables.sync_conf(b.conf)
    log.info("broker %s: master now (controller id %s, epoch %s)", b.conf.brokerName,
        tostring(t.broker_id), tostring(t.epoch))
    register.now()
    return true
end

function M.change_to_slave(b, t)
    tables.set_setting("brokerRole", "SLAVE")
    tables.set_setting("brokerId", t.broker_id)
    tables.sync_conf(b.conf)
    log.info("broker %s: slave of %s now (controller id %s, epoch %s)", b.conf.brokerName,
        tostring(t.master_addr), tostring(t.broker_id), tostring(t.epoch))
    register.now()
    return true
end

return M
