-- Starts a real single-member etcd (Debian's etcd-server) for a spec: on
-- 127.0.0.1, client and peer ports found free (server.fixed_ports), its
-- data dir in the spec's temp dir; stopped by PID.
--
--   local etcd = require("support.etcd")
--   if not etcd.available() then pending(etcd.why) return end
--   local e = etcd.start()
--   e.url            "http://127.0.0.1:PORT"
--   e:stop()         SIGTERM, then wait
--   e:kill()         SIGKILL, then wait
local net = require("rmq.net")
local children = require("support.children")
local server = require("support.server")
local tmp = require("support.tmp")

local M = {}

local BINARY = "/usr/bin/etcd"

function M.available()
    local f = io.open(BINARY)
    if f then
        f:close()
        return true
    end
    M.why = "etcd is not installed (Debian package etcd-server; scripts/setup.sh installs it): controller specs skipped"
    return false
end

local Etcd = {}
Etcd.__index = Etcd

function Etcd:stop()
    if not self.proc.exited then
        self.proc:kill(15)
        self.proc:wait()
    end
end

function Etcd:kill()
    if not self.proc.exited then
        self.proc:kill(9)
        self.proc:wait()
    end
end

function Etcd:log()
    local f = io.open(self.dir .. "/stderr")
    local s = f and f:read("a") or ""
    if f then
        f:close()
    end
    return s
end

function M.start()
    local dir = tmp.dir()
    local base = server.fixed_ports(2)
    local client, peer = "http://127.0.0.1:" .. base, "http://127.0.0.1:" .. (base + 1)
    local p = assert(children.spawn({
        file = BINARY,
        args = { "--name", "spec", "--data-dir", dir .. "/data",
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", "spec=" .. peer },
        stdout = dir .. "/stdout", stderr = dir .. "/stderr",
    }))
    local e = setmetatable({ proc = p, dir = dir, url = client, port = base }, Etcd)
    local c = require("rmq.controller.etcd").new({ etcdEndpoints = client, etcdRequestTimeoutMillis = 1000 })
    local ok = server.eventually(function()
        if p.exited then
            return true
        end
        return c:range("/") ~= nil
    end, 30000)
    if not ok or p.exited then
        e:kill()
        error("etcd did not start:\n" .. e:log())
    end
    net.sleep(0)
    return e
end

-- {{{ A cluster of n members (quorum specs)
--
--   local cl = etcd.cluster(3)
--   cl.urls            "http://127.0.0.1:P1;http://127.0.0.1:P2;..." (etcdEndpoints)
--   cl.members[i]      an Etcd (url, proc, dir): :kill() is kill -9 by PID
--   cl:restart(i)      starts member i again on its data dir
--   cl:stop()          SIGTERM to every member still running

local Cluster = {}
Cluster.__index = Cluster

local function spawn_member(m, initial)
    m.proc = assert(children.spawn({
        file = BINARY,
        args = { "--name", m.name, "--data-dir", m.dir .. "/data",
                 "--listen-client-urls", m.url, "--advertise-client-urls", m.url,
                 "--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--initial-cluster-token", "rmq-spec" },
        stdout = m.dir .. "/stdout", stderr = m.dir .. "/stderr",
    }))
end

-- Waits until a linearizable read through member m succeeds (the member
-- is up and the cluster has a quorum).
local function wait_member(m, what)
    local c = require("rmq.controller.etcd").new({ etcdEndpoints = m.url, etcdRequestTimeoutMillis = 1000 })
    local ok = server.eventually(function()
        return m.proc.exited or c:range("/") ~= nil
    end, 60000)
    if not ok or m.proc.exited then
        error(("etcd member %s did not %s:\n%s"):format(m.name, what, m:log()))
    end
end

function Cluster:restart(i)
    local m = self.members[i]
    assert(m.proc.exited, "member " .. i .. " is running")
    spawn_member(m, self.initial)
end

--- Waits until member i serves linearizable reads (it and a quorum are up).
function Cluster:wait(i)
    wait_member(self.members[i], "serve")
end

function Cluster:stop()
    for _, m in ipairs(self.members) do
        m:stop()
    end
end

function M.cluster(n)
    local base = server.fixed_ports(2 * n)
    local members, initial, urls = {}, {}, {}
    for i = 1, n do
        local port = base + 2 * (i - 1)
        local m = setmetatable({ name = "m" .. i, dir = tmp.dir(), port = port,
            url = "http://127.0.0.1:" .. port, peer = "http://127.0.0.1:" .. (port + 1) }, Etcd)
        members[i] = m
        initial[i] = m.name .. "=" .. m.peer
        urls[i] = m.url
    end
    local cl = setmetatable({ members = members, initial = table.concat(initial, ","),
        urls = table.concat(urls, ";") }, Cluster)
    for _, m in ipairs(members) do
        spawn_member(m, cl.initial)
    end
    local ok, err = pcall(function()
        for _, m in ipairs(members) do
            wait_member(m, "start")
        end
    end)
    if not ok then
        cl:stop()
        error(err)
    end
    return cl
end

-- }}}

return M
