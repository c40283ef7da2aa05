-- HA replication (issue 11): starts the C service (rmq.ha, src/ha/) for
-- the broker's store in the main thread.
--
--   every broker listens on haListenPort (a slave too, as 4.9.8's: its
--     own slaves follow it); the bound port goes into b.ha_addr, the
--     haServerAddr registered with the NameServers (and the READY line's
--     ha=HOST:PORT).
--   slave: follows haMasterAddress, else the haServerAddr of the last
--     REGISTER_BROKER reply (register.ha_master_addr()), re-read every
--     second as 4.9.8 re-reads it at every registration.
--
-- Other code reads replication state with
--   require("rmq.ha").stats(shared.get_handle("broker.ha"))
-- (see src/lua/l_ha.c for the fields), from any thread.
local ha = require("rmq.ha")
local shared = require("rmq.shared")
local net = require("rmq.net")
local log = require("rmq.log")

local M = {}

local svc   -- the service (main thread)

local function options(b)
    local conf = b.conf
    return {
        slave = conf.brokerRole == "SLAVE",
        bind = conf.bindAddress or "0.0.0.0",
        haListenPort = conf.haListenPort or 0,
        haMasterAddress = conf.haMasterAddress,
        haSendHeartbeatInterval = conf.haSendHeartbeatInterval,
        haHousekeepingInterval = conf.haHousekeepingInterval,
        haTransferBatchSize = conf.haTransferBatchSize,
        haMaxSlaves = conf.haMaxSlaves,
        haTransferFromMinOffset = conf.haTransferFromMinOffset,
        haAllowedAddresses = conf.haAllowedAddresses,
    }
end

function M.main_init(b)
    local ok, h = pcall(ha.start, b.store, options(b))
    if not ok then
        error("HA: " .. tostring(h), 0)
    end
    svc = h
    shared.put_handle("broker.ha", h:share())
    -- A slave listens too, as 4.9.8's does (a slave of a slave).
    local ip = b.conf.brokerIP2 or b.ip
    b.ha_addr = ip .. ":" .. h:port()
    b.ready_fields = b.ready_fields or {}
    b.ready_fields.ha = (b.conf.bindAddress or "0.0.0.0") .. ":" .. h:port()   -- as bound
    log.info("HA: listening on port %d (%s)", h:port(), b.conf.brokerRole)
end

function M.main_start(b)
    if b.conf.brokerRole ~= "SLAVE" or b.conf.haMasterAddress then
        return
    end
    local register = require("rmq.broker.register")
    local function follow()
        local addr = register.ha_master_addr() or ""
        svc:set_master(addr)
    end
    follow()
    b.ha_timer = net.timer(1000, 1000, follow)
end

function M.main_stop(b)
    if b.ha_timer then
        b.ha_timer:stop()
        b.ha_timer = nil
    end
end

-- Only once the workers are gone: SYNC_MASTER sends answered during the
-- drain still need the slaves' acks, and a worker may read ha.stats.
function M.after_workers()
    if svc then
        svc:stop()
        svc = nil
    end
end

return M
