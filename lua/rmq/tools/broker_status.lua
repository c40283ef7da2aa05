-- `rmq broker-status`: every broker of every cluster a NameServer knows,
-- and for each slave how far it is behind its master, from what the
-- brokers answer over remoting (so it works against Java brokers too):
--
--   maxOffset   the broker's commitLogMaxOffset (GET_BROKER_RUNTIME_INFO)
--   ackOffset   a slave's: the offset it reports to its master as
--               acknowledged (a 4.x HAClient reports its max physical
--               offset): rmq's haSlaveMaxOffset, else commitLogMaxOffset
--   lagBytes    master maxOffset - slave ackOffset
--   lagSeconds  now - store time of the master's record at the slave's
--               ackOffset (VIEW_MESSAGE_BY_ID there: the oldest record the
--               slave lacks); 0 when it lacks nothing
--   lastSync    an rmq slave's last complete config sync (wall ms), from
--               its runtime info (slaveSyncTimestamp)
--
--   local status = require("rmq.tools.broker_status")
--   local rows, err = status.collect(namesrv_addr [, timeout_ms])
--   print(status.format(rows))
local net = require("rmq.net")
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local message = require("rmq.client.message")
local route = require("rmq.client.route")

local M = {}

local function runtime(addr, timeout)
    local r, err = net.call(addr, { code = codes.request.GET_BROKER_RUNTIME_INFO }, timeout)
    if r == nil then
        return nil, tostring(err)
    end
    if r.code ~= 0 then
        return nil, ("code %d %s"):format(r.code, tostring(r.remark))
    end
    local doc = fastjson.decode(r.body or "")
    if type(doc) ~= "table" or type(doc.table) ~= "table" then
        return nil, "runtime info is not a KVTable"
    end
    return doc.table
end

-- Store time of the master's record at physical offset `off`, or nil.
local function store_time(addr, off, timeout)
    local r = net.call(addr, { code = codes.request.VIEW_MESSAGE_BY_ID, ext = { offset = tostring(off) } }, timeout)
    if r == nil or r.code ~= 0 or r.body == nil then
        return nil
    end
    local msgs = message.decode_records(r.body)
    return msgs and msgs[1] and msgs[1].storeTimestamp
end

--- Every broker of a ClusterInfo (GET_BROKER_CLUSTER_INFO, decoded) as
--- {cluster=, broker=, id=, addr=}, sorted by cluster, broker name, id.
function M.brokers(info)
    return require("rmq.admin.cluster").brokers(info)
end

--- Rows {cluster=, broker=, id=, addr=, role=, maxOffset=, ackOffset=,
--- lagBytes=, lagSeconds=, lastSync=, error=}, sorted by cluster,
--- broker and id; or nil, err when the NameServer does not answer.
function M.collect(namesrv, timeout)
    timeout = timeout or 3000
    local r, err = net.call(namesrv, { code = codes.request.GET_BROKER_CLUSTER_INFO }, timeout)
    if r == nil then
        return nil, namesrv .. ": " .. tostring(err)
    end
    if r.code ~= 0 then
        return nil, ("code %d %s"):format(r.code, tostring(r.remark))
    end
    local rows = M.brokers(route.decode_json(r.body or "{}") or {})
    local master
    for _, row in ipairs(rows) do
        local rt, rerr = runtime(row.addr, timeout)
        if rt == nil then
            row.error = rerr
        else
            row.role = rt.brokerRole or (row.id == 0 and "MASTER" or "SLAVE")
            row.maxOffset = tonumber(rt.commitLogMaxOffset)
            row.lastSync = tonumber(rt.slaveSyncTimestamp)
            row.haAck = tonumber(rt.haSlaveMaxOffset)
        end
        if row.id == 0 then
            master = row
        elseif master and master.broker ~= row.broker then
            master = nil   -- a group without master
        end
        if row.id ~= 0 and row.maxOffset then
            row.ackOffset = row.haAck or row.maxOffset
            row.haAck = nil
            if master and master.maxOffset then
                row.lagBytes = math.max(0, master.maxOffset - row.ackOffset)
                if row.lagBytes == 0 then
                    row.lagSeconds = 0
                else
                    local ts = store_time(master.addr, row.ackOffset, timeout)
                    row.lagSeconds = ts and math.max(0, (core.now_ms() - ts) / 1000)
                end
            end
        end
    end
    return rows
end

local function cell(v, fmt)
    if v == nil then
        return "-"
    end
    return fmt and fmt:format(v) or tostring(v)
end

--- The rows as a table for people.
function M.format(rows)
    local out = { ("%-16s %-16s %-4s %-22s %-12s %14s %14s %12s %9s %s"):format("#Cluster", "#Broker",
        "#BID", "#Addr", "#Role", "#MaxOffset", "#AckOffset", "#LagBytes", "#LagSec", "#LastSync") }
    for _, r in ipairs(rows) do
        local sync = r.lastSync and os.date("!%H:%M:%S", r.lastSync // 1000) or "-"
        out[#out + 1] = ("%-16s %-16s %-4d %-22s %-12s %14s %14s %12s %9s %s"):format(r.cluster, r.broker,
            r.id, r.addr, r.error and "(no answer)" or cell(r.role), cell(r.maxOffset), cell(r.ackOffset),
            cell(r.lagBytes), cell(r.lagSeconds, "%.1f"), sync)
    end
    return table.concat(out, "\n")
end

return M
