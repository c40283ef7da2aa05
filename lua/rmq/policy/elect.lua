-- rmq.policy.elect: which broker of a broker set becomes its master.
-- The controller (rmq.controller) calls it on CONTROLLER_ELECT_MASTER and
-- when its scan finds a master whose heartbeats stopped.  A conf names
-- another module with electPolicy; SIGHUP (or the live console) reloads
-- it on the running controller.
--
--   elect(candidates, ctx) -> broker id | nil, reason
--
-- candidates: a list, one per broker id the set was given:
--   { brokerId = 2, address = "10.0.0.2:10911",
--     maxOffset = 123456,           -- its commit log's max offset (last heartbeat)
--     epoch = 3,                    -- the last master epoch it has
--     priority = 0,                 -- brokerElectionPriority: smaller wins
--     lastHeartbeat = 1733300000000,-- ms since the epoch, nil: never heard
--     alive = true,                 -- heard within its heartbeat timeout
--     inSyncStateSet = true,
--     suspect = nil }               -- a string when the controller distrusts
--                                   -- its report (an epoch beyond the set's):
--                                   -- alive is then false
-- ctx: { clusterName =, brokerName =, oldMaster = id | nil,
--        prefer = id | nil (electMaster -b, designated),
--        unclean = enableElectUncleanMaster }
--
-- Default, as RocketMQ 5's DefaultElectPolicy: among the alive members of
-- the SyncStateSet (with unclean, then among every alive member), keep the
-- old master if it is one of them and no other broker is designated; a
-- designated broker wins if it is one of them, else nobody does;
-- otherwise the highest epoch, then the largest maxOffset, then the
-- smallest priority, then the smallest id.  A broker outside the
-- SyncStateSet cannot win a clean election whatever offset it reports.
local M = {}

local function better(a, b)
    if (a.epoch or 0) ~= (b.epoch or 0) then
        return (a.epoch or 0) > (b.epoch or 0)
    end
    if (a.maxOffset or 0) ~= (b.maxOffset or 0) then
        return (a.maxOffset or 0) > (b.maxOffset or 0)
    end
    if (a.priority or 0) ~= (b.priority or 0) then
        return (a.priority or 0) < (b.priority or 0)
    end
    return a.brokerId < b.brokerId
end

local function try(pool, ctx)
    if #pool == 0 then
        return nil
    end
    local by_id = {}
    for _, c in ipairs(pool) do
        by_id[c.brokerId] = c
    end
    if ctx.oldMaster and by_id[ctx.oldMaster] and (ctx.prefer == nil or ctx.prefer == ctx.oldMaster) then
        return ctx.oldMaster
    end
    if ctx.prefer ~= nil then
        if by_id[ctx.prefer] then
            return ctx.prefer
        end
        return nil, ("designated broker %s is not an alive candidate"):format(tostring(ctx.prefer))
    end
    local best = pool[1]
    for i = 2, #pool do
        if better(pool[i], best) then
            best = pool[i]
        end
    end
    return best.brokerId
end

function M.elect(candidates, ctx)
    local in_sss, alive = {}, {}
    for _, c in ipairs(candidates) do
        if c.alive then
            alive[#alive + 1] = c
            if c.inSyncStateSet then
                in_sss[#in_sss + 1] = c
            end
        end
    end
    local id, why = try(in_sss, ctx)
    if id ~= nil then
        return id
    end
    if ctx.unclean then
        local uid, uwhy = try(alive, ctx)
        if uid ~= nil then
            return uid
        end
        why = uwhy or why
    end
    return nil, why or (#alive == 0 and "no member of the broker set is alive"
        or "no alive member of the SyncStateSet")
end

return M
