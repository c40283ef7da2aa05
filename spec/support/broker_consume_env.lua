-- A NameServer and a broker on loopback for the consume-side specs
-- (spec/integration/broker_consume_*_spec.lua, broker_scale_groups_spec,
-- interop_ali_ons_spec) and scripts/bench/heartbeat.lua, and what those
-- share.
--
--   local env = require("support.broker_consume_env")
--   local e = env.start({ workers = 2, ... broker conf keys })
--   e.ns, e.broker            support.server handles
--   e.ns_addr, e.addr         "127.0.0.1:PORT"
--   e:route(topic [, queues]) the NameServer knows topic (see below)
--   e:restart()               SIGTERM the broker, start it on the same store
--   e:stop()
--   env.mq(topic, qid)        the broker's message queue
--   env.send_to(p, topic, qid, msg)   a send to that one queue
--
-- Routes: the broker registers itself with the NameServer
-- (rmq.broker.register).  Until it has registered a topic, e:route
-- registers the broker's identity with that topic itself, as the broker
-- would, over a connection kept open (a NameServer drops a broker whose
-- registering connection closes).
local net = require("rmq.net")
local server = require("support.server")
local ns = require("support.nsclient")

local M = {}

local Env = {}
Env.__index = Env

M.BROKER = "broker-a"
M.CLUSTER = "DefaultCluster"

--- The message queue {topic, brokerName, queueId} of the env's broker.
function M.mq(topic, qid)
    return { topic = topic, brokerName = M.BROKER, queueId = qid }
end

--- Sends msg to queue qid of topic (send_orderly with a fixed queue id):
--- the producer's result, or nil, err.
function M.send_to(p, topic, qid, msg)
    msg.topic = topic
    return p:send_orderly(msg, qid, function(queues, _, arg)
        for _, q in ipairs(queues) do
            if q.queueId == arg then
                return q
            end
        end
    end)
end

local function broker_conf(e)
    local conf = {
        role = "broker", workers = 2, brokerName = M.BROKER,
        brokerClusterName = M.CLUSTER,
        storePathRootDir = e.store,
        mappedFileSizeCommitLog = 16 * 1024 * 1024,
        namesrvAddr = e.ns.addr,
    }
    for k, v in pairs(e.opts) do
        conf[k] = v
    end
    if conf.luaSource then
        -- Conf keys that are Lua (functions): source text returning a
        -- table merged over the others.
        local extra = conf.luaSource
        conf.luaSource = nil
        return { source = "local c = " .. server.serialize(conf, "") .. "\n"
            .. "for k, v in pairs((function() " .. extra .. " end)()) do c[k] = v end\nreturn c\n" }
    end
    return conf
end

function M.start(opts)
    local e = setmetatable({ opts = opts or {}, registered = {} }, Env)
    local dir = server.tmpdir()
    e.dir = dir
    e.store = dir .. "/store"
    e.ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = dir .. "/kv.json" })
    e.ns_addr = e.ns.addr
    e:start_broker()
    return e
end

-- The route of topic from the NameServer, or nil.
function Env:lookup(topic)
    local c = assert(net.connect(self.ns_addr))
    local r = ns.route(c, topic)
    c:close()
    return r
end

-- Registers the broker's identity with every topic asked for so far.
function Env:stand_in()
    local list = { { "TBW102", 8, 8, 7 } }
    for t, n in pairs(self.registered) do
        list[#list + 1] = { t, n, n, 6 }
    end
    self.counter = (self.counter or 0) + 1
    if self.ns_conn == nil or self.ns_conn.closed then
        self.ns_conn = assert(net.connect(self.ns_addr))
    end
    local rep = assert(ns.register(self.ns_conn, {
        cluster = M.CLUSTER, name = M.BROKER, id = 0, addr = self.addr,
        topics = list, counter = self.counter, timestamp = os.time() * 1000,
    }))
    assert(rep.code == 0, rep.remark)
end

--- Makes sure the NameServer routes `topic` (and TBW102) to this broker.
function Env:route(topic, queues)
    local r = server.eventually(function() return self:lookup(topic) end, 300)
    if r then
        return r
    end
    self.registered[topic] = queues or 4
    self:stand_in()
    r = self:lookup(topic)
    if r then
        return r
    end
    -- Seen once in a loaded CI run (never by hand in ~300 tries): the
    -- route was missing right after the stand-in registration was taken.
    -- Say what the NameServer holds, so the next sighting shows why, and
    -- register again until it routes.
    local c = assert(net.connect(self.ns_addr))
    local info = ns.cluster_info(c)
    c:close()
    io.stderr:write(("broker_consume_env: %s not routed after the stand-in registration; "
        .. "the NameServer's brokers: %s\n"):format(topic, server.serialize(info.brokerAddrTable or {}, "")))
    for _ = 1, 50 do
        net.sleep(200)
        self:stand_in()
        r = self:lookup(topic)
        if r then
            return r
        end
    end
    error(topic .. " is not routed after 50 stand-in registrations")
end

--- Starts the broker (again) on the same store.
function Env:start_broker()
    self.broker = server.start(broker_conf(self))
    self.addr = self.broker.addr
    if next(self.registered) then
        -- The stand-in registration named the old address.
        if self.ns_conn then
            self.ns_conn:close()
            self.ns_conn = nil
        end
        self:stand_in()
    end
end

--- Stops the broker (SIGTERM; SIGKILL with opts.kill) and starts it
--- again on the same store, with the conf keys of opts.conf changed.
function Env:restart(opts)
    opts = opts or {}
    if opts.kill then
        self.broker:kill()
    else
        local status = self.broker:stop()
        if status ~= 0 then
            error("the broker exited with status " .. tostring(status) .. ":\n" .. self.broker:log(), 2)
        end
    end
    for k, v in pairs(opts.conf or {}) do
        self.opts[k] = v
    end
    self:start_broker()
end

function Env:stop()
    if self.ns_conn then
        self.ns_conn:close()
    end
    local st = self.broker:stop()
    self.ns:stop()
    return st
end

return M
