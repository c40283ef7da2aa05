-- The NameServer role (RocketMQ's NamesrvController): the route registry
-- brokers register with and clients read routes from, and the KV config.
--
--   main_init(conf)    main thread, before the workers: the shared registry
--                      (rmq.route, C, one per process), its switches from
--                      the conf, the KV config loaded from kvConfigPath
--   processors(conf)   each worker: the handlers (rmq.namesrv.processor)
--                      and the close hook that unregisters, at once, the
--                      brokers of a connection that closed
--   main_start(conf)   main thread: the liveness scan, every
--                      scanNotActiveBrokerInterval ms, drops brokers silent
--                      for longer than their heartbeat timeout
--   main_stop(conf)    stops the scan
--
-- Several NameServers never talk to each other: each keeps what the
-- brokers tell it.
local kvconfig = require "rmq.namesrv.kvconfig"
local log = require "rmq.log"
local net = require "rmq.net"
local processor = require "rmq.namesrv.processor"
local route = require "rmq.route"

local M = {}

local scan_timer = nil
local watch_timer = nil

function M.main_init(conf)
    local rt = route.shared()
    processor.apply_opts(rt, conf)
    kvconfig.load(rt, conf.kvConfigPath)
end

--- {[request code] = function(ctx, cmd)}, on_close(ctx) for one worker.
function M.processors(conf)
    return processor.new(route.shared(), conf)
end

local function start_scan(rt, interval)
    scan_timer = net.timer(interval, interval, function()
        local n = rt:scan()
        if n > 0 then
            log.info("scan: %d broker(s) expired", n)
        end
    end)
end

function M.main_start(conf)
    local rt = route.shared()
    local current = processor.conf_view(rt, conf)
    local interval = conf.scanNotActiveBrokerInterval
    start_scan(rt, interval)
    -- UPDATE_NAMESRV_CONFIG may change the interval: look once a second.
    watch_timer = net.timer(1000, 1000, function()
        local now = current().scanNotActiveBrokerInterval
        if now ~= interval then
            log.info("scanNotActiveBrokerInterval %d -> %d ms", interval, now)
            interval = now
            scan_timer:stop()
            start_scan(rt, interval)
        end
    end)
    local c = rt:counts()
    log.info("NameServer ready: %d topics, %d brokers registered; scan every %d ms, "
        .. "expiry after %d ms", c.topics, c.live, interval, conf.brokerChannelExpiredTime)
end

function M.main_stop(conf)
    if scan_timer then
        scan_timer:stop()
        scan_timer = nil
    end
    if watch_timer then
        watch_timer:stop()
        watch_timer = nil
    end
end

return M
