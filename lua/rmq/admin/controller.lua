-- The controller family (RocketMQ 5's mqadmin tools/command/controller
-- and ha): getControllerMetaData, getSyncStateSet, electMaster,
-- cleanBrokerMetadata, getControllerConfig, updateControllerConfig, and
-- getBrokerEpoch (5.x's tools/command/ha, which asks the brokers).  Same
-- names, options and output as 5.x; the controller requests go to the
-- active controller, found as 5.x's MQClientAPIImpl finds it
-- (GET_METADATA_INFO on the address given).
--
--   controller.metadata(ctx, {controllerAddress=}) -> GetMetaDataResponseHeader fields
--   controller.sync_state_set(ctx, {controllerAddress=, brokerName= | clusterName=}) -> BrokerReplicasInfo
--   controller.elect(ctx, {controllerAddress=, clusterName=, brokerName=, brokerId=}) -> header + members
--   controller.clean(ctx, {controllerAddress=, brokerName=, clusterName=, brokerControllerIdsToClean=, cleanLivingBroker=})
--   controller.config(ctx, {controllerAddress=}) -> { {addr=, config={k=v}}, ... }
--   controller.update_config(ctx, {controllerAddress=, key=, value=}) -> {controllers=, key=, value=}
--     (to every address given, as 5.x: each controller's own keys)
--   controller.broker_epoch(ctx, {brokerName= | clusterName=}) -> { {addr=, cache=EpochEntryCache}, ... }
--     (GET_BROKER_EPOCH_CACHE to every broker of the set or cluster, masters and slaves, found via -n)
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local remote = require("rmq.admin.remote")

local M = {}

local req = codes.request

local function addrs(list)
    local out = {}
    for a in tostring(list or ""):gmatch("[^;,%s]+") do
        out[#out + 1] = a
    end
    if #out == 0 then
        error(remote.usage("no controller address (-a)"), 0)
    end
    return out
end

function M.metadata(ctx, o)
    local addr = addrs(o.controllerAddress)[1]
    local r = remote.ok(ctx, addr, { code = req.CONTROLLER_GET_METADATA_INFO })
    return { group = r.ext.group, controllerLeaderId = r.ext.controllerLeaderId,
             controllerLeaderAddress = r.ext.controllerLeaderAddress, isLeader = r.ext.isLeader == "true",
             peers = r.ext.peers }
end

-- The active controller's address, through the first address given.
local function leader(ctx, o)
    local m = M.metadata(ctx, o)
    if m.isLeader then
        return addrs(o.controllerAddress)[1]
    end
    if m.controllerLeaderAddress == nil or m.controllerLeaderAddress == "" then
        error(remote.failed(addrs(o.controllerAddress)[1], "no active controller"), 0)
    end
    return m.controllerLeaderAddress
end

function M.sync_state_set(ctx, o)
    local names = {}
    if o.brokerName then
        names[1] = o.brokerName
    else
        local info = remote.cluster_info(ctx)
        for _, n in ipairs(info.clusterAddrTable[o.clusterName] or {}) do
            names[#names + 1] = n
        end
        table.sort(names)
        if #names == 0 then
            error(remote.failed(nil, ("cluster %s has no broker"):format(o.clusterName)), 0)
        end
    end
    local addr = leader(ctx, o)
    local r = remote.ok(ctx, addr, { code = req.CONTROLLER_GET_SYNC_STATE_DATA,
                                     body = fastjson.encode(setmetatable(names, fastjson.array_mt)) })
    return remote.json(r.body or "{}", addr)
end

function M.elect(ctx, o)
    local id = math.tointeger(tonumber(o.brokerId))
    if id == nil then
        error(remote.usage("brokerId must be a number, got " .. tostring(o.brokerId)), 0)
    end
    local addr = leader(ctx, o)
    local r = remote.ok(ctx, addr, { code = req.CONTROLLER_ELECT_MASTER, ext = {
        clusterName = o.clusterName, brokerName = o.brokerName, brokerId = id, designateElect = "true" } })
    local body = r.body and #r.body > 0 and remote.json(r.body, addr) or {}
    return { clusterName = o.clusterName, brokerName = o.brokerName, masterBrokerId = r.ext.masterBrokerId,
             masterAddress = r.ext.masterAddress, masterEpoch = r.ext.masterEpoch,
             syncStateSetEpoch = r.ext.syncStateSetEpoch,
             brokerAddrs = body.brokerMemberGroup and body.brokerMemberGroup.brokerAddrs or nil }
end

function M.clean(ctx, o)
    local addr = leader(ctx, o)
    remote.ok(ctx, addr, { code = req.CLEAN_BROKER_DATA, ext = {
        clusterName = o.clusterName, brokerName = o.brokerName,
        brokerControllerIdsToClean = o.brokerControllerIdsToClean,
        isCleanLivingBroker = o.cleanLivingBroker and "true" or "false" } })
    return { brokerName = o.brokerName }
end

function M.config(ctx, o)
    local out = {}
    for _, addr in ipairs(addrs(o.controllerAddress)) do
        local r = remote.ok(ctx, addr, { code = req.GET_CONTROLLER_CONFIG })
        out[#out + 1] = { addr = addr, config = remote.properties(r.body) }
    end
    return setmetatable(out, fastjson.array_mt)
end

function M.update_config(ctx, o)
    local key, value = o.key:match("^%s*(.-)%s*$"), o.value:match("^%s*(.-)%s*$")
    local body = require("rmq.admin.namesrv").properties_text({ [key] = value })
    local list = addrs(o.controllerAddress)
    for _, addr in ipairs(list) do
        remote.ok(ctx, addr, { code = req.UPDATE_CONTROLLER_CONFIG, body = body })
    end
    return { controllers = list, key = key, value = value }
end

-- The brokers of a set (5.x's CommandUtil.fetchMasterAndSlaveAddrByBrokerName), by id.
local function set_addrs(ctx, name)
    local info = remote.cluster_info(ctx)
    local set = info.brokerAddrTable[name]
    if set == nil or next(set.brokerAddrs or {}) == nil then
        error(remote.failed(nil, ("broker %s not found: make sure the specified brokerName exists or the "
            .. "name server connected to is correct"):format(name)), 0)
    end
    local out = {}
    for _, id in ipairs(remote.sorted_keys(set.brokerAddrs)) do
        out[#out + 1] = set.brokerAddrs[id]
    end
    return out
end

function M.broker_epoch(ctx, o)
    local list = o.brokerName and set_addrs(ctx, o.brokerName) or remote.all_addrs(ctx, o.clusterName)
    local out = {}
    for _, addr in ipairs(list) do
        local r = remote.ok(ctx, addr, { code = req.GET_BROKER_EPOCH_CACHE })
        out[#out + 1] = { addr = addr, cache = remote.json(r.body or "{}", addr) }
    end
    return setmetatable(out, fastjson.array_mt)
end

-- {{{ Output, as 5.x's commands print it

-- 5.x's printData: the last entry ends at the broker's maxOffset.
local function format_epoch(list)
    local out = {}
    for _, b in ipairs(list) do
        local c = b.cache
        out[#out + 1] = ("\n#clusterName\t%s\n#brokerName\t%s\n#brokerAddr\t%s\n#brokerId\t%s"):format(
            tostring(c.clusterName), tostring(c.brokerName), b.addr, tostring(c.brokerId))
        local entries = c.epochList or {}
        for i, e in ipairs(entries) do
            local stop = i == #entries and c.maxOffset or e.endOffset
            out[#out + 1] = ("\n#Epoch: EpochEntry{epoch=%s, startOffset=%s, endOffset=%s}"):format(
                tostring(e.epoch), tostring(e.startOffset), tostring(stop))
        end
        out[#out + 1] = "\n"
    end
    return table.concat(out)
end


local function format_metadata(m)
    local out = { ("\n#ControllerGroup\t%s"):format(m.group), ("\n#ControllerLeaderId\t%s"):format(m.controllerLeaderId),
                  ("\n#ControllerLeaderAddress\t%s"):format(m.controllerLeaderAddress) }
    for peer in tostring(m.peers or ""):gmatch("[^;]+") do
        out[#out + 1] = ("\n#Peer:\t%s"):format(peer)
    end
    out[#out + 1] = "\n"
    return table.concat(out)
end

local function identity(m)
    return ("ReplicaIdentity{brokerName='%s', brokerId=%s, brokerAddress='%s', alive=%s}"):format(
        tostring(m.brokerName), tostring(m.brokerId), tostring(m.brokerAddress), tostring(m.alive))
end

local function format_sss(info)
    local out = {}
    local tbl = info.replicasInfoTable or {}
    for _, name in ipairs(remote.sorted_keys(tbl)) do
        local r = tbl[name]
        local ins, outs = r.inSyncReplicas or {}, r.notInSyncReplicas or {}
        out[#out + 1] = ("\n#brokerName\t%s\n#MasterBrokerId\t%s\n#MasterAddr\t%s\n#MasterEpoch\t%s\n"
            .. "#SyncStateSetEpoch\t%s\n#SyncStateSetNums\t%d\n"):format(name, tostring(r.masterBrokerId),
            tostring(r.masterAddress), tostring(r.masterEpoch), tostring(r.syncStateSetEpoch), #ins)
        for _, m in ipairs(ins) do
            out[#out + 1] = ("\nInSyncReplica:\t%s\n"):format(identity(m))
        end
        for _, m in ipairs(outs) do
            out[#out + 1] = ("\nNotInSyncReplica:\t%s\n"):format(identity(m))
        end
    end
    return table.concat(out)
end

local function format_elect(r)
    local out = { ("\n#ClusterName\t%s"):format(r.clusterName), ("\n#BrokerName\t%s"):format(r.brokerName),
                  ("\n#BrokerMasterAddr\t%s"):format(tostring(r.masterAddress)),
                  ("\n#MasterEpoch\t%s"):format(tostring(r.masterEpoch)),
                  ("\n#SyncStateSetEpoch\t%s\n"):format(tostring(r.syncStateSetEpoch)) }
    local ids = {}
    for k in pairs(r.brokerAddrs or {}) do
        ids[#ids + 1] = math.tointeger(tonumber(k))
    end
    table.sort(ids)
    for _, id in ipairs(ids) do
        out[#out + 1] = ("\t#Broker\t%d\t%s\n"):format(id, r.brokerAddrs[tostring(id)] or r.brokerAddrs[id])
    end
    return table.concat(out)
end

-- }}}

local CONTROLLER = { "a", "controllerAddress", arg = true, required = true, desc = "the address of controller" }

M.commands = {
    { name = "getBrokerEpoch", desc = "Fetch broker epoch entries.",
      options = { { "c", "clusterName", arg = true, desc = "which cluster" },
                  { "b", "brokerName", arg = true, desc = "which broker to fetch" },
                  { "i", "interval", arg = true, desc = "the interval(second) of get info" } },
      check = function(o)
          if o.brokerName == nil and o.clusterName == nil then
              error(remote.usage("give -b brokerName or -c clusterName"), 0)
          end
          remote.check_interval(o)
      end,
      run = M.broker_epoch, format = format_epoch,
      every = remote.every_interval },
    { name = "getControllerMetaData", desc = "Get controller cluster's metadata.",
      options = { CONTROLLER }, run = M.metadata, format = format_metadata },
    { name = "getSyncStateSet", desc = "Fetch syncStateSet for target brokers.",
      options = { CONTROLLER, { "c", "clusterName", arg = true, desc = "which cluster" },
                  { "b", "brokerName", arg = true, desc = "which broker to fetch" } },
      check = function(o)
          if o.brokerName == nil and o.clusterName == nil then
              error(remote.usage("give -b brokerName or -c clusterName"), 0)
          end
      end,
      run = M.sync_state_set, format = format_sss },
    { name = "electMaster", desc = "Re-elect the specified broker as master.",
      options = { { "a", "controllerAddress", arg = true, required = true, desc = "The address of controller" },
                  { "b", "brokerId", arg = true, required = true,
                    desc = "The id of the broker which requires to become master" },
                  { "bn", "brokerName", arg = true, required = true,
                    desc = "The broker name of the replicas that require to be manipulated" },
                  { "c", "clusterName", arg = true, required = true, desc = "the clusterName of broker" } },
      run = M.elect, format = format_elect },
    { name = "cleanBrokerMetadata", desc = "Clean metadata of broker on controller.",
      options = { { "a", "controllerAddress", arg = true, required = true, desc = "The address of controller" },
                  { "b", "brokerControllerIdsToClean", arg = true,
                    desc = "The brokerController id list which requires to clean metadata. eg: 1;2;3" },
                  { "bn", "brokerName", arg = true, required = true,
                    desc = "The broker name of the replicas that require to be manipulated" },
                  { "c", "clusterName", arg = true, desc = "The clusterName of broker" },
                  { "l", "cleanLivingBroker", desc = "Whether clean up living brokers,default value is false" } },
      run = M.clean,
      format = function(r) return ("clear broker %s metadata from controller success! "):format(r.brokerName) end },
    { name = "getControllerConfig", desc = "Get controller config.",
      options = { { "a", "controllerAddress", arg = true, required = true,
                    desc = "Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878" } },
      run = M.config, format = remote.format_config },
    { name = "updateControllerConfig", desc = "Update controller config.",
      options = { { "a", "controllerAddress", arg = true, required = true,
                    desc = "Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878" },
                  { "k", "key", arg = true, required = true, desc = "config key" },
                  { "v", "value", arg = true, required = true, desc = "config value" } },
      run = M.update_config,
      format = function(r)
          return ("update controller config success![%s]\n%s : %s"):format(table.concat(r.controllers, ", "),
              r.key, r.value)
      end },
}

return M
