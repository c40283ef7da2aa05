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
local proc = require("rmq.proc")
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
    local p = assert(proc.spawn({
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

return M
