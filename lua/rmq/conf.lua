-- rmq.conf: load and check the configuration of `rmq-server CONF`.
--
-- A conf file is Lua that returns a table. Keys use RocketMQ's own names
-- (BrokerConfig, MessageStoreConfig, NamesrvConfig, NettyServerConfig, as
-- of 4.9.8) so that a RocketMQ user finds them where they expect; a few
-- keys are ours (role, workers, logLevel, processors, the *Policy keys).
-- Every key is declared in M.schema below, with its type, its default and
-- the roles it applies to. Anything else is an error that names the file
-- and, when a declared key is close, suggests it: a typo must never be
-- silently ignored, because the default it leaves in place looks fine.
--
-- For the same reason a key we do not implement is refused, not ignored.
-- A value asking for a behaviour rmq lacks (tls.test.mode.enable = true,
-- a tls* key that is not one of 4.9.8's) is refused with one line naming the
-- key, the value and why; the value meaning what rmq does anyway
-- (transientStorePoolEnable = false) is accepted
-- silently. Java tuning keys (thread pools, Netty buffers) are refused
-- whatever their value, with what to use instead: a conf that sets them
-- expects an effect it would not get.
--
--   local conf, warnings = conf.load("conf/broker-a.lua", { "listenPort=10921" })
--   if not conf then die(warnings) end      -- warnings is the error message
--
-- The file runs in a fresh environment with only harmless globals. This
-- is hygiene, not a sandbox: `require` is there, and the conf is as
-- trusted as the binary. What it buys is that a conf cannot read or
-- clobber the server's globals, and that `print` goes to stderr, where it
-- cannot corrupt the READY line the specs read from stdout.

local codes = require "rmq.codes"
local strings = require "rmq.strings"

local M = {}

--- The roles a conf may declare. standalone = namesrv + broker in one
--- process, so it takes every key of both.
M.roles = { "namesrv", "broker", "standalone", "controller", "proxy" }

local ROLE_SET = { namesrv = true, broker = true, standalone = true, controller = true, proxy = true }

-- Role sets used by the schema. A key for namesrv or broker also applies
-- to standalone (see applies()); STANDALONE marks keys only it has.
local ALL = { namesrv = true, broker = true, standalone = true }
local BOTH = { namesrv = true, broker = true }
local NS = { namesrv = true }
local BR = { broker = true }
local STANDALONE = { standalone = true }
-- The controller (rmq.controller) takes the keys both servers have (BOTH,
-- ALL: ports, logging, limits, TLS, metrics) and its own (CTL).  A
-- NameServer takes CTL too: with enableControllerInNamesrv it runs the
-- controller, from the same file, as 5.x's NamesrvStartup reads the
-- ControllerConfig keys from the namesrv conf.
local CTL = { controller = true, namesrv = true }
-- The cluster-mode gRPC proxy (role = "proxy", docs/grpc.md) holds no
-- messages and no tables: its own keys (PROXY), and of the others only
-- these (the process, its sockets and the gRPC port's limits); any other
-- key in a proxy's conf is refused.
local PROXY = { proxy = true }
local PROXY_SHARED = {
    role = true, bindAddress = true, workers = true, logLevel = true, logFile = true, logBufferBytes = true,
    shutdownAwaitMillis = true, serverChannelMaxIdleTimeSeconds = true, frameMaxLength = true,
    writeBufferHighWaterMark = true, writeBufferLowWaterMark = true,
    serverChannelWriteTimeoutMillis = true, serverChannelMaxInFlight = true,
    serverChannelCloseLingerMillis = true, serverChannelMaxFramesPerTurn = true, serverPeerMaxFramesPerTurn = true,
    serverBatchWriteEnable = true,
    serverReservedDescriptors = true, memoryBudgetBytes = true, memoryBudgetPerPeerBytes = true,
    memoryBudgetPerConnectionBytes = true, namesrvAddr = true, maxMessageSize = true,
    grpcServerPort = true, grpcMaxInboundMessageSize = true, grpcMaxConnectionBufferBytes = true,
    grpcMaxInboundMetadataSize = true, grpcMaxConcurrentStreams = true, grpcMaxStreamsPerSecond = true,
    grpcMaxResetsPerSecond = true, grpcMaxSettingsEntries = true, grpcMaxSettingsPerSecond = true,
    grpcRequestTimeoutMillis = true, grpcKeepAliveTimeMillis = true,
    grpcKeepAliveTimeoutMillis = true,
    grpcClientConsumerMinLongPollingTimeoutMillis = true, grpcClientConsumerMaxLongPollingTimeoutMillis = true,
    minInvisibleTimeMillsForRecv = true, maxInvisibleTimeMills = true, grpcMaxProducerTopics = true,
    popInvisibleTimeMinMillis = true,
    -- ReceiveMessage's auto_renew (5.x ProxyConfig's keys).
    enableProxyAutoRenew = true, defaultInvisibleTimeMills = true, renewAheadTimeMillis = true,
    renewMaxTimeMillis = true, renewSchedulePeriodMillis = true, maxRenewRetryTimes = true,
    invisibleTimeMillisWhenClear = true,
    -- TLS on the gRPC port, as a broker's (the SDKs default to TLS).
    ["tls.server.mode"] = true, ["tls.server.certPath"] = true, ["tls.server.keyPath"] = true,
    ["tls.server.keyPassword"] = true, ["tls.server.need.client.auth"] = true,
    ["tls.server.authClient"] = true, ["tls.server.trustCertPath"] = true,
    ["tls.server.handshakeTimeoutMillis"] = true, ["tls.test.mode.enable"] = true,
}

-- {{{ Small helpers

local function home()
    local h = os.getenv("HOME")
    if h == nil or h == "" then
        return nil
    end
    return h
end

-- Expand a leading "~" with $HOME, as RocketMQ's defaults do with
-- user.home. Applied to defaults and to user values of path keys alike,
-- so "~/rmq/store-a" in a conf means what a shell user expects.
local function expand(path)
    if path:sub(1, 1) ~= "~" or (#path > 1 and path:sub(2, 2) ~= "/") then
        return path
    end
    local h = home()
    if h == nil then
        return nil, ("cannot expand %q: HOME is not set"):format(path)
    end
    return h .. path:sub(2)
end

local getenv_nonempty = strings.getenv

-- BrokerConfig.brokerName defaults to the host name (InetAddress
-- .getLocalHost().getHostName()), with "DEFAULT_BROKER" when that fails.
local function hostname()
    for _, file in ipairs({ "/proc/sys/kernel/hostname", "/etc/hostname" }) do
        local f = io.open(file, "r")
        if f then
            local name = f:read("l")
            f:close()
            if name and name:match("%S") then
                return strings.trim(name)
            end
        end
    end
    return getenv_nonempty("HOSTNAME") or "DEFAULT_BROKER"
end

local sorted_keys = strings.sorted_keys
M.sorted_keys = sorted_keys   -- (also the live console's table printer)

-- Levenshtein distance, case-insensitive: "listenport" is one typo away
-- from nothing, it *is* listenPort.
local function distance(a, b)
    a, b = a:lower(), b:lower()
    if a == b then
        return 0
    end
    local prev, cur = {}, {}
    for j = 0, #b do
        prev[j] = j
    end
    for i = 1, #a do
        cur[0] = i
        local ca = a:byte(i)
        for j = 1, #b do
            local cost = (ca == b:byte(j)) and 0 or 1
            cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        end
        prev, cur = cur, prev
    end
    return prev[#b]
end

--- The candidate closest to `name`, or nil if none is reasonably close:
--- at most 2 edits, or a quarter of the name's length for long names.
--- Ties go to the alphabetically first candidate, so messages are stable.
function M.suggest(name, candidates)
    if type(name) ~= "string" then
        return nil
    end
    local limit = math.max(2, #name // 4)
    local best, best_d
    for _, c in ipairs(candidates) do
        local d = distance(name, c)
        if d <= limit and (best_d == nil or d < best_d or (d == best_d and c < best)) then
            best, best_d = c, d
        end
    end
    return best
end

local function did_you_mean(name, candidates)
    local s = M.suggest(name, candidates)
    if s == nil then
        return ""
    end
    return (" (did you mean '%s'?)"):format(s)
end

-- A value for an error message: type and, for scalars, the value itself,
-- always on one line.
local function show(v)
    local t = type(v)
    if t == "string" then
        local s = v
        if #s > 60 then
            s = s:sub(1, 57) .. "..."
        end
        return "string " .. ("%q"):format(s):gsub("\\\n", "\\n")
    elseif math.type(v) == "integer" then
        return "integer " .. tostring(v)
    elseif t == "number" then
        return "number " .. tostring(v)
    elseif t == "boolean" then
        return "boolean " .. tostring(v)
    end
    return t
end

-- A value as a conf would write it: true, 8, "SYNC_MASTER".
local function literal(v)
    if type(v) == "string" then
        return (("%q"):format(v):gsub("\\\n", "\\n"))
    end
    return tostring(v)
end

local function first_line(s)
    return (tostring(s):match("^[^\n]*"))
end

-- }}}

-- {{{ Value checks used by the schema

local function check_host_ports(v)
    if v == "" then
        return "must not be empty"
    end
    for part in (v .. ";"):gmatch("([^;]*);") do
        local port = part:match("^%s*[^%s:;]+:(%d+)%s*$")
        if port == nil or tonumber(port) > 65535 then
            return ("must be host:port entries separated by ';'"
                .. " (e.g. \"127.0.0.1:9876;10.0.0.2:9876\"), got %s")
                :format(show(v))
        end
    end
end

local function check_host_port(v)
    local port = v:match("^%s*[^%s:;]+:(%d+)%s*$")
    if port == nil or tonumber(port) > 65535 then
        return ("must be host:port, got %s"):format(show(v))
    end
end

-- MessageStoreConfig.deleteWhen: hours of the day, ';'-separated; files
-- past fileReservedTime are deleted when the hour matches.
local function check_hours(v)
    for part in (v .. ";"):gmatch("([^;]*);") do
        local h = tonumber(part:match("^%s*(%d%d?)%s*$"))
        if h == nil or h > 23 then
            return ("must be hours 00-23 separated by ';' (e.g. \"04\" or \"04;16\"), got %s"):format(show(v))
        end
    end
end

-- MessageStoreConfig.messageDelayLevel: "1s 5s 10s 30s 1m ... 2h".
local function check_delay_levels(v)
    local n = 0
    for token in v:gmatch("%S+") do
        if not token:match("^%d+[smhd]$") then
            return ("must be space-separated durations such as \"1s 5s 1m 2h\" (units s, m, h, d), got %s")
                :format(show(v))
        end
        n = n + 1
    end
    if n == 0 then
        return "must list at least one delay level"
    end
end

local function check_module_name(v)
    if not v:match("^[%w_]+[%w_%.]*$") then
        return ("must be a module name such as \"rmq.policy.slave_read\", got %s"):format(show(v))
    end
end

-- pullFilters: keys are topics or "topic@group"; values functions,
-- module.function names or { fn = one of those, body = boolean }.
local function check_pull_filters(v)
    for k, f in pairs(v) do
        if type(k) ~= "string" or k == "" then
            return "must map topic names (or \"topic@group\") to filters, got key " .. show(k)
        end
        if type(f) == "table" then
            if f.body ~= nil and type(f.body) ~= "boolean" then
                return ("[%s].body must be a boolean"):format(k)
            end
            f = f.fn
        end
        if type(f) == "string" then
            if not f:match("^[%w_]+[%w_%.]*%.[%w_]+$") then
                return ("[%s] must name a module function such as \"mymodule.keep\", got %s"):format(k, show(f))
            end
        elseif type(f) ~= "function" then
            return ("[%s] must be a function, a \"module.fn\" name or { fn = ..., body = true }"):format(k)
        end
    end
end

-- }}}

-- {{{ The schema
--
-- Each entry:
--   name      the key, RocketMQ's spelling
--   type      "integer" | "number" | "boolean" | "string" | "table" | "policy"
--             (policy: a module name, resolved by rmq.policy, or a function)
--   roles     set of roles it applies to; a namesrv or broker key also
--             applies to standalone
--   default   a value, or function(conf, role) -> value | nil, err, called
--             in schema order with the keys above it already settled, so
--             derived defaults (haListenPort, storePathCommitLog) come
--             after what they derive from
--   default_by_role  { role = value }, wins over `default`
--   doc       one line for help output
--   enum      allowed string values;  min, max  integer bounds
--   path      leading "~" is expanded with $HOME
--   check     function(value) -> nil | "must ..." for shape rules
--   normalize function(value, role) -> value, nil, warnings | nil, err
--   required  the key must be given (only `role`)
--   refuse    function(value) -> nil | why, fix: a value rmq does not
--             implement; load refuses it with "key 'k' = v is not
--             supported[ yet]: why; fix" (see only() below)
--   planned   the refused behaviour is coming ("not supported yet")
--   noeffect  a Java tuning key with no counterpart: refused whatever its
--             value, "key 'k' = v has no effect in rmq; remove it (noeffect)"
--   ignored   a RocketMQ key rmq does not use: no default is filled, it is
--             not among keys_for_role(), and run-time updates do not know
--             it; only a value `refuse` lets through is accepted
--   ours      not a RocketMQ key (doc only)
--   secret    never shown (GET_BROKER_CONFIG, the live console's conf())
--
-- A nil default leaves the key absent from the loaded conf.

local schema = {}
local function def(e)
    schema[#schema + 1] = e
end

-- refuse for a switch whose `off` value is what rmq does anyway: any
-- other value asks for a feature rmq does not have.
local function only(off, why)
    return function(v)
        if v ~= off then
            return why, ("remove it or set %s"):format(literal(off))
        end
    end
end

-- Handlers in a processor table: a function (Lua or C), a table with a
-- `run` function (and optional declared facts such as `need`), or false
-- to remove a built-in handler so the code is answered
-- REQUEST_CODE_NOT_SUPPORTED.
local function valid_handler(h)
    return type(h) == "function" or h == false
        or (type(h) == "table" and type(h.run) == "function")
end

local request_names
local function all_request_names()
    if request_names == nil then
        request_names = sorted_keys(codes.request)
    end
    return request_names
end

local SECTIONS = {
    namesrv = { "namesrv" },
    broker = { "broker" },
    standalone = { "namesrv", "broker" },
    controller = { "controller" },
}

local function normalize_section(section, where)
    if type(section) ~= "table" then
        return nil, ("%s must be a table of request code -> handler, got %s"):format(where, show(section))
    end
    local out = {}
    for _, k in ipairs(sorted_keys(section)) do
        local code = k
        if type(k) == "string" then
            code = codes.request[k]
            if code == nil then
                return nil, ("%s: unknown request code name '%s'%s")
                    :format(where, k, did_you_mean(k, all_request_names()))
            end
        elseif math.type(k) ~= "integer" then
            return nil, ("%s: key %s is not a request code (use a number or a name such as SEND_MESSAGE)")
                :format(where, show(k))
        end
        local h = section[k]
        if not valid_handler(h) then
            return nil, ("%s[%s] must be a function, a table with a run function, or false, got %s")
                :format(where, tostring(k), show(h))
        end
        if out[code] ~= nil then
            return nil, ("%s: request code %d is given twice"):format(where, code)
        end
        out[code] = h
    end
    return out
end

-- processors: either a flat table for a namesrv or broker conf
-- ({ [codes.GET_ROUTEINFO_BY_TOPIC] = fn, SEND_MESSAGE = fn }), or
-- sections ({ namesrv = {...}, broker = {...} }), which standalone must
-- use since a code means different things to its two halves. The result
-- is always sectioned: { namesrv = { [code] = handler }, broker = {...} }
-- with one (possibly empty) table per section of the role, codes as
-- numbers.
local function normalize_processors(v, role)
    local wanted = SECTIONS[role]
    local sectioned = v.namesrv ~= nil or v.broker ~= nil
    local out, notes = {}, {}
    if sectioned then
        for _, k in ipairs(sorted_keys(v)) do
            if k ~= "namesrv" and k ~= "broker" then
                return nil, ("processors: key %s next to sections;"
                    .. " put every handler under processors.namesrv or processors.broker")
                    :format(type(k) == "string" and ("'" .. k .. "'") or tostring(k))
            end
        end
        for _, s in ipairs({ "namesrv", "broker" }) do
            if v[s] ~= nil and not (s == role or role == "standalone") then
                notes[#notes + 1] = ("processors.%s has no effect for role %s"):format(s, role)
            elseif v[s] ~= nil then
                local t, err = normalize_section(v[s], "processors." .. s)
                if not t then
                    return nil, err
                end
                out[s] = t
            end
        end
    elseif next(v) ~= nil then
        if role == "standalone" then
            return nil, "processors: a standalone conf must use sections:"
                .. " processors = { namesrv = {...}, broker = {...} }"
        end
        local t, err = normalize_section(v, "processors")
        if not t then
            return nil, err
        end
        out[role] = t
    end
    for _, s in ipairs(wanted) do
        out[s] = out[s] or {}
    end
    return out, nil, notes
end

-- Common: both servers --------------------------------------------------

def { name = "role", type = "string", roles = ALL, required = true, ours = true,
      enum = { "namesrv", "broker", "standalone", "controller", "proxy" },
      doc = "what this process is: namesrv, broker, standalone (both in one process), controller (RocketMQ 5's, on etcd: docs/controller.md), or proxy (RocketMQ 5's gRPC proxy in cluster mode: docs/grpc.md)" }
def { name = "listenPort", type = "integer", roles = BOTH, min = 0, max = 65535,
      default_by_role = { namesrv = 9876, broker = 10911, standalone = 10911, controller = 19876 },
      doc = "remoting port (a broker also listens on listenPort-2, the VIP port); 0 = any free port" }
def { name = "namesrvListenPort", type = "integer", roles = STANDALONE, min = 0, max = 65535,
      default = 9876, ours = true,
      doc = "standalone only: port of the embedded NameServer (listenPort is the broker's)" }
def { name = "bindAddress", type = "string", roles = BOTH, default = "0.0.0.0",
      doc = "address the listeners bind to" }
def { name = "workers", type = "integer", roles = BOTH, min = 0, default = 0, ours = true,
      doc = "worker threads, each with its own event loop and Lua state; 0 = CPU cores - 1 (at least 1): one core stays with the store's threads (dispatch, flush, warm), which measured best on 2 cores (docs/performance.md)" }
def { name = "nativeProcessors", type = "boolean", roles = BOTH, default = true, ours = true,
      doc = "answer the common requests (send, pull, route, heartbeat, offsets) in C; false: every request runs its Lua handler" }
def { name = "serverChannelMaxIdleTimeSeconds", type = "integer", roles = BOTH, min = 0, default = 120,
      doc = "close a connection idle (no read, no write) this long; 0 = never" }
def { name = "frameMaxLength", type = "integer", roles = BOTH, min = 1, max = 2147483647,
      default = 16777216,
      doc = "largest accepted frame in bytes (RocketMQ's com.rocketmq.remoting.frameMaxLength)" }
def { name = "logLevel", type = "string", roles = BOTH, default = "info", ours = true,
      enum = { "debug", "info", "warn", "error" },
      doc = "least severe log level written" }
def { name = "logFile", type = "string", roles = BOTH, path = true, ours = true,
      doc = "log to this file; unset = stderr" }
def { name = "logBufferBytes", type = "integer", roles = BOTH, min = 0, max = 1073741824,
      default = 1048576, ours = true,
      check = function(v)
          return v > 0 and v < 4096 and "must be 0 (synchronous) or at least 4096 (a longest line and its note)" or nil
      end,
      doc = "log lines of every thread (the main one once READY) go through a ring of this many bytes that one "
         .. "thread writes out, so a slow log file never holds up a worker, an admin request or the console; "
         .. "when it is full, lines are dropped and counted (\"N messages suppressed\" once there is room; "
         .. "docs/operations.md); 0 = every thread "
         .. "writes its own lines (synchronously); at least 4096 otherwise" }
def { name = "shutdownAwaitMillis", type = "integer", roles = BOTH, min = 0, default = 3000, ours = true,
      doc = "on SIGTERM, how long to let in-flight requests finish before closing" }
def { name = "writeBufferHighWaterMark", type = "integer", roles = BOTH, min = 0, max = 2147483647,
      default = 65536,
      doc = "stop reading a connection's requests while more reply bytes than this wait to be sent; 0 = Netty's 64 KiB" }
def { name = "writeBufferLowWaterMark", type = "integer", roles = BOTH, min = 0, max = 2147483647,
      default = 32768,
      doc = "read a paused connection again once its unsent replies are at most this; 0 = Netty's 32 KiB" }
def { name = "serverChannelWriteTimeoutMillis", type = "integer", roles = BOTH, min = 0, default = 30000, ours = true,
      doc = "close a connection whose unsent replies stay above writeBufferHighWaterMark this long; 0 = never" }
def { name = "serverChannelCloseLingerMillis", type = "integer", roles = BOTH, min = 0, max = 60000,
      default = 2000, ours = true,
      doc = "after a last answer before a close (an HTTP/2 GOAWAY with its error code, the last reply of a "
         .. "session ending), how long a connection may take to send it and see the peer close; "
         .. "0 = close at once, dropping what is unsent" }
def { name = "serverChannelMaxInFlight", type = "integer", roles = BOTH, min = 0, max = 2147483647,
      default = 1024, ours = true,
      doc = "stop reading a connection's requests while this many (held pulls included) are unanswered; 0 = no limit" }
def { name = "serverChannelMaxFramesPerTurn", type = "integer", roles = BOTH, min = 0, max = 1048576,
      default = 16, ours = true,
      doc = "requests one connection has decoded per event-loop turn; the rest wait in its buffer for the next "
            .. "turn, after the worker's other connections (docs/memory.md); 0 = no limit" }
def { name = "serverPeerMaxFramesPerTurn", type = "integer", roles = BOTH, min = 0, max = 1048576,
      default = 64, ours = true,
      doc = "requests all the connections of one peer IP address have decoded per event-loop turn of a worker, so "
            .. "one address's hundreds of pipelining connections cannot hold up another client; 0 = no limit" }
def { name = "serverBatchWriteEnable", type = "boolean", roles = BOTH, default = true, ours = true,
      doc = "write one event-loop turn's replies to all its connections in one system call (io_uring sends, "
            .. "each taking what the socket takes now, as write(2) does) instead of one write(2) each: on one "
            .. "host, each write woke the client and was preempted by it (docs/performance.md, branch tps1k); "
            .. "used only where the kernel allows io_uring (Linux 5.18 or later, not filtered by seccomp); "
            .. "a ring the kernel refuses for want of descriptors or memory, at setup or at a send (all of it "
            .. "or part), is made again 10 s later (the replies go by write(2) meanwhile); any other refusal, "
            .. "or a ring that fails with sends left unknown, turns it off for that worker (logged); "
            .. "false: one write(2) per connection" }
def { name = "serverReservedDescriptors", type = "integer", roles = BOTH, min = 0, max = 65536,
      default = 32, ours = true,
      doc = "descriptors of RLIMIT_NOFILE accepted connections never take (at most a quarter of it): kept for "
            .. "persistence, the store and the log, so a connection flood cannot stop the broker saving state; 0 = none" }
-- The memory budget (docs/memory.md, src/core/membudget.h).
def { name = "memoryBudgetBytes", type = "integer", roles = BOTH, min = 0, default = 256 * 1024 * 1024, ours = true,
      doc = "memory held for peers and data in total (held requests, queued replies, console history, metrics "
          .. "label sets); a request past it is refused with SYSTEM_BUSY; 0 = no limit" }
def { name = "memoryBudgetPerPeerBytes", type = "integer", roles = BOTH, min = 0, default = 128 * 1024 * 1024,
      ours = true, doc = "memory held for the connections of one peer IP address; past it SYSTEM_BUSY; 0 = no limit" }
def { name = "memoryBudgetPerConnectionBytes", type = "integer", roles = BOTH, min = 0, default = 32 * 1024 * 1024,
      ours = true, doc = "memory held for one connection (its waiting requests and queued replies); past it "
          .. "SYSTEM_BUSY; 0 = no limit" }
-- TLS on the remoting ports (src/net/tls.h), with 4.9.8's names
-- (TlsSystemConfig: Java reads them as -D system properties or from
-- tls.config.file; here they are conf keys, ["tls.server.mode"] = ...).
-- A port offers TLS only with a certificate: without tls.server.certPath
-- the default permissive mode serves plaintext exactly as before (a TLS
-- hello is closed, as 4.9.8 does when it has no SslContext).
def { name = "tls.server.mode", type = "string", roles = BOTH, default = "permissive",
      enum = { "disabled", "permissive", "enforcing" },
      doc = "remoting ports: disabled = plaintext only; permissive = TLS (first byte 0x16) or plaintext; enforcing = TLS only (needs tls.server.certPath)" }
def { name = "tls.server.certPath", type = "string", roles = BOTH, path = true,
      doc = "PEM certificate chain the remoting ports present; unset = no TLS offered" }
def { name = "tls.server.keyPath", type = "string", roles = BOTH, path = true,
      doc = "PEM private key (PKCS#8 or traditional) of tls.server.certPath" }
def { name = "tls.server.keyPassword", type = "string", roles = BOTH, secret = true,
      doc = "password of an encrypted tls.server.keyPath" }
def { name = "tls.server.need.client.auth", type = "string", roles = BOTH, default = "none",
      enum = { "none", "optional", "require" },
      doc = "ask clients for a certificate: none, optional, or require (a client without one fails the handshake)" }
def { name = "tls.server.authClient", type = "boolean", roles = BOTH, default = false,
      doc = "verify client certificates against tls.server.trustCertPath (false: any certificate a client sends is accepted, as 4.9.8)" }
def { name = "tls.server.trustCertPath", type = "string", roles = BOTH, path = true,
      doc = "PEM CA certificates client certificates must chain to (tls.server.authClient); unset = the system's CAs" }
def { name = "tls.server.handshakeTimeoutMillis", type = "integer", roles = BOTH, min = 100, max = 600000,
      default = 10000, ours = true,
      doc = "with a certificate: close an accepted connection that has not sent its first bytes, or finished its TLS handshake, this long after connecting (Netty SslHandler's 10 s)" }
def { name = "tls.test.mode.enable", type = "boolean", roles = ALL, default = false,
      refuse = only(false, "rmq does not generate a self-signed certificate (4.9.8's test mode);"
          .. " make one with openssl and set tls.server.certPath and tls.server.keyPath"),
      doc = "4.9.8's self-signed test mode (its default there is true): refused; only false is accepted" }
-- The broker's own connections (to NameServers, to its master): 4.9.8's
-- tls.enable (NettyClientConfig.useTLS) and tls.client.*.
def { name = "tls.enable", type = "boolean", roles = BR, default = false,
      doc = "the broker's outgoing remoting connections (registration, slave sync) use TLS" }
def { name = "tls.client.authServer", type = "boolean", roles = BR, default = false,
      doc = "with tls.enable: verify the server's certificate against tls.client.trustCertPath (false: accept any, as 4.9.8)" }
def { name = "tls.client.trustCertPath", type = "string", roles = BR, path = true,
      doc = "PEM CA certificates for tls.client.authServer; unset = the system's CAs" }
def { name = "tls.client.certPath", type = "string", roles = BR, path = true,
      doc = "PEM certificate the broker presents to servers that ask for one" }
def { name = "tls.client.keyPath", type = "string", roles = BR, path = true,
      doc = "PEM private key of tls.client.certPath" }
def { name = "tls.client.keyPassword", type = "string", roles = BR, secret = true,
      doc = "password of an encrypted tls.client.keyPath" }
-- Metrics: RocketMQ 5's keys switch the Prometheus endpoint on and place it.
def { name = "metricsExporterType", type = "string", roles = BOTH, default = "DISABLE",
      enum = { "DISABLE", "PROM" },
      doc = "PROM: serve GET /metrics (Prometheus text format) on metricsPromExporterHost:metricsPromExporterPort; DISABLE: no metrics" }
def { name = "metricsPromExporterPort", type = "integer", roles = BOTH, min = 0, max = 65535,
      default = 5557,
      doc = "port of the Prometheus endpoint (with metricsExporterType = PROM); 0 = any free port (the READY line says which)" }
def { name = "metricsPromExporterHost", type = "string", roles = BOTH, default = "127.0.0.1",
      doc = "address the Prometheus endpoint binds to; 127.0.0.1 keeps it private to this host, 0.0.0.0 serves every address" }
def { name = "metricsMaxLabelSets", type = "integer", roles = BOTH, min = 1, max = 1000000,
      default = 1000, ours = true,
      doc = "label sets per metric family and worker (topics, topic+group pairs, request+response codes); past it new ones are counted in one 'overflow' series" }
local function check_addresses(v)
    if #v > 1000 then
        return "must be at most 1000 characters"
    end
    for a in v:gmatch("[^;]+") do
        a = a:match("^%s*(.-)%s*$")
        if not (a:match("^%d+%.%d+%.%d+%.%d+$") or (a:find(":", 1, true) and a:match("^[%x:%.]+$"))) then
            return ("must be ';'-separated IP addresses, got %s"):format(show(a))
        end
    end
end
def { name = "metricsHttpMaxConnections", type = "integer", roles = BOTH, min = 1, max = 10000,
      default = 16, ours = true,
      doc = "Prometheus endpoint: connections served at once from addresses not in metricsAllowedAddresses"
          .. " (those have as many again); more wait, or are closed at accept when metricsAllowedAddresses is set" }
def { name = "metricsHttpTimeoutSeconds", type = "integer", roles = BOTH, min = 1, max = 3600,
      default = 10, ours = true,
      doc = "Prometheus endpoint: close a connection idle (a partial request included) this long" }
-- Slowloris from many connections (issue 21): a scraper sends its request
-- in one packet; a peer trickling headers holds a slot this long at most.
def { name = "metricsHttpHeaderTimeoutMillis", type = "integer", roles = BOTH, min = 100, max = 3600000,
      default = 3000, ours = true,
      doc = "metrics endpoint: a request's line and headers must be in within this many ms (at most"
          .. " metricsHttpTimeoutSeconds); a slower one is closed" }
def { name = "metricsHttpMaxConnectionsPerAddress", type = "integer", roles = BOTH, min = 1, max = 10000,
      default = 8, ours = true,
      doc = "metrics endpoint: connections at once from one address (not metricsAllowedAddresses);"
          .. " more are closed at accept (a browser opens up to 6 to one host for the web console)" }
def { name = "metricsAllowedAddresses", type = "string", roles = BOTH, ours = true,
      check = function(v)
          local _, n = v:gsub("[^;%s]+", "")
          return check_addresses(v) or (n > 128 and ("must hold at most 128 addresses, got %d"):format(n)) or nil
      end,
      doc = "';'-separated IP addresses (Prometheus) with metricsHttpMaxConnections connections of their own"
          .. " and no per-address limit, so a flood from other addresses never keeps a scrape out; unset: none" }
def { name = "metricsHttpMaxHeaderBytes", type = "integer", roles = BOTH, min = 1024, max = 1048576,
      default = 8192, ours = true,
      doc = "Prometheus endpoint: largest request line and headers; a larger request is answered 431 and closed" }
def { name = "processors", type = "table", roles = BOTH, ours = true,
      default = function() return {} end, normalize = normalize_processors,
      doc = "request code -> handler overrides ({ [code] = fn } or { namesrv = {...}, broker = {...} })" }
def { name = "rocketmqHome", type = "string", roles = BOTH, path = true,
      default = function() return getenv_nonempty("ROCKETMQ_HOME") end,
      doc = "RocketMQ home (conf/plain_acl.yml lives under it); default $ROCKETMQ_HOME" }

-- The web console (/ and /api/* on the metrics endpoint of a broker).
def { name = "consoleWriteEnable", type = "boolean", roles = BOTH, default = false, ours = true,
      doc = "web console: allow POST /api/send (a test message); off by default, the console is read-only;"
          .. " on a non-loopback metricsPromExporterHost only with consolePassword (which it then needs)" }
def { name = "consoleHistorySize", type = "integer", roles = BOTH, min = 1, max = 10000,
      default = 120, ours = true,
      doc = "web console: points of each lag sparkline (a ring; consoleSampleSeconds apart)" }
def { name = "consoleHistoryMaxBytes", type = "integer", roles = BOTH, min = 1048576, default = 32 * 1024 * 1024,
      ours = true, doc = "web console: memory for its snapshots and sparkline series (opened groups first, then "
          .. "the most lag); counted in memoryBudgetBytes (docs/memory.md)" }
def { name = "consoleIdleStopSeconds", type = "integer", roles = BOTH, min = 1, max = 86400, default = 300,
      ours = true, doc = "web console: stop sampling and drop its history when no page asked for this long" }
def { name = "consoleSampleSeconds", type = "integer", roles = BOTH, min = 1, max = 3600,
      default = 5, ours = true,
      doc = "web console: seconds between the snapshots of topics and group offsets" }
def { name = "consoleApiTimeoutMillis", type = "integer", roles = BOTH, min = 100, max = 60000,
      default = 3000, ours = true,
      doc = "web console: timeout of each remoting request /api sends (to this broker over loopback, or the NameServer)" }
def { name = "consoleMaxQueues", type = "integer", roles = BOTH, min = 1, max = 1000000,
      default = 4096, ours = true,
      doc = "web console: queues read per snapshot at most (topics past it are listed without offsets)" }
-- The console reads with its own account, never the broker's (whose
-- accessKey must be an admin on an ACL NameServer): what it shows is
-- what the operator granted that account (README, web console).
def { name = "consoleAccessKey", type = "string", roles = BR, ours = true, check = function(v)
          if v == "" then return "must not be empty" end
      end,
      doc = "web console: the ACL AccessKey its requests are signed with (grant it only what the console may"
          .. " show, e.g. SUB on some topics, not admin); needs consoleSecretKey; unset: unsigned (an ACL broker"
          .. " refuses them unless 127.0.0.1 is white-listed); never the broker's accessKey" }
def { name = "consoleSecretKey", type = "string", roles = BR, ours = true, secret = true, check = function(v)
          if v == "" then return "must not be empty" end
      end,
      doc = "web console: the secret of consoleAccessKey (never shown)" }
def { name = "consoleAuthFailMaxPeers", type = "integer", roles = BR, min = 1, max = 1000000, default = 1024,
      ours = true,
      doc = "web console: peer addresses remembered after a wrong password (each refused for"
          .. " consoleAuthFailDelayMillis); past it the oldest is forgotten" }
def { name = "metricsHttpMaxBodyBytes", type = "integer", roles = BOTH, min = 0, max = 16777216,
      default = 65536, ours = true,
      doc = "metrics endpoint: largest request body (POST /api/send); larger is answered 413" }

-- The live console (rmq.console_live): a Lua prompt into the running
-- server (`rmq console ADDR`), not the web console above.
local function check_console(v)
    if v == "unix" or v:match("^unix:/.") or v:match("^/.") then
        return nil
    end
    local host, port = v:match("^%[?([^%]]*)%]?:(%d+)$")
    if host == nil or tonumber(port) > 65535 then
        return ("must be \"unix\" (a socket in the store directory), a socket path (\"/run/rmq/c.sock\")"
            .. " or HOST:PORT, got %s"):format(show(v))
    end
end
def { name = "console", type = "string", roles = BOTH, check = check_console, ours = true,
      doc = "live console endpoint: \"unix\" (STORE/console.sock, mode 0600, peers of the server's uid"
          .. " or root only), a socket path, or HOST:PORT (needs consolePassword, loopback too); unset: no console" }
def { name = "consolePassword", type = "string", roles = BOTH, ours = true, secret = true,
      doc = "live console: the password a session must send first (needed for a TCP console address);"
          .. " web console: when set, every /api/* request needs it (HTTP Basic, any user name)" }
def { name = "consoleAuthFailDelayMillis", type = "integer", roles = BOTH, min = 0, max = 60000, default = 1000,
      ours = true,
      doc = "live console: a wrong password is answered (and the session closed) after this long;"
          .. " web console: a peer address that gave a wrong password is refused (429) this long" }
def { name = "consoleMaxSessions", type = "integer", roles = BOTH, min = 1, max = 1024, default = 4, ours = true,
      doc = "live console: sessions open at once; more are refused" }
def { name = "consoleMaxLineBytes", type = "integer", roles = BOTH, min = 64, max = 16777216,
      default = 65536, ours = true,
      doc = "live console: longest input line; a longer one ends the session" }
def { name = "consoleMaxOutputBytes", type = "integer", roles = BOTH, min = 256, max = 67108864,
      default = 1048576, ours = true,
      doc = "live console: output of one snippet at most (the rest is cut, and said so)" }
def { name = "consoleMaxInstructions", type = "integer", roles = BOTH, min = 1000, max = 10000000000,
      default = 10000000, ours = true,
      doc = "live console: Lua instructions one snippet may run (a count hook; past it the snippet fails)" }
def { name = "consoleSwapTimeoutMillis", type = "integer", roles = BOTH, min = 10, max = 60000,
      default = 3000, ours = true,
      doc = "live console and SIGHUP: how long every worker has to prepare a policy or handler swap" }

-- NameServer (NamesrvConfig) --------------------------------------------

def { name = "kvConfigPath", type = "string", roles = NS, path = true,
      default = "~/namesrv/kvConfig.json",
      doc = "where the KV config (PUT_KV_CONFIG, ORDER_TOPIC_CONFIG, ...) is persisted" }
def { name = "configBlackList", type = "string", roles = NS,
      default = "configBlackList;configStorePath;kvConfigPath",
      doc = "';'-separated keys UPDATE_NAMESRV_CONFIG refuses to change" }
def { name = "orderMessageEnable", type = "boolean", roles = NS, default = false,
      doc = "attach ORDER_TOPIC_CONFIG KV entries to topic routes" }
def { name = "scanNotActiveBrokerInterval", type = "integer", roles = { namesrv = true, controller = true },
      min = 1, default = 5000,
      doc = "ms between scans for brokers that stopped registering (5.x key; 4.9.8 scans every 10 s);"
          .. " a controller's: for masters whose heartbeats stopped" }
def { name = "brokerChannelExpiredTime", type = "integer", roles = NS, min = 1, default = 120000, ours = true,
      doc = "ms without REGISTER_BROKER after which a broker is dropped (RocketMQ hard-codes 120000;"
          .. " conf file only: UPDATE_NAMESRV_CONFIG refuses it)" }
def { name = "supportActingMaster", type = "boolean", roles = NS, default = false,
      doc = "5.x: let a slave act as master in routes when its master is gone" }
def { name = "clusterTest", type = "boolean", roles = NS, default = false,
      doc = "route lookups fall back to the KV namespace of the cluster test (rarely used)" }
def { name = "enableAllTopicList", type = "boolean", roles = NS, default = true,
      doc = "answer GET_ALL_TOPIC_LIST_FROM_NAMESERVER" }
def { name = "enableTopicList", type = "boolean", roles = NS, default = true,
      doc = "answer the other topic-list requests (by cluster, system, unit)" }
def { name = "notifyMinBrokerIdChanged", type = "boolean", roles = NS, default = false,
      doc = "5.x: tell brokers when the smallest brokerId of their group changes" }
def { name = "enableControllerInNamesrv", type = "boolean", roles = NS, default = false,
      doc = "5.x: the NameServer process also runs the controller (its keys in this conf, etcdEndpoints"
          .. " required), on its own port controllerListenPort; the NameServer then runs one worker"
          .. " (docs/controller.md)" }
def { name = "controllerListenPort", type = "integer", roles = NS, min = 0, max = 65535, ours = true,
      default = function(c)
          if c.listenPort == 0 then
              return 0
          end
          return c.listenPort + 1
      end,
      doc = "with enableControllerInNamesrv: the embedded controller's port (brokers' controllerAddr);"
          .. " default listenPort+1, as 5.x's embedded example (NameServer 9876, controller 9877); 0 = any free port" }
def { name = "registerBodyMaxInflatedSize", type = "integer", roles = NS, min = 1024,
      default = 64 * 1024 * 1024, ours = true,
      doc = "largest size a compressed REGISTER_BROKER body may inflate to (bytes)" }

-- Controller (RocketMQ 5's ControllerConfig; state in etcd) -------------
-- docs/controller.md.  The etcd keys are ours: 5.x runs DLedger/JRaft.

local function check_etcd_endpoints(v)
    for ep in v:gmatch("[^;]+") do
        if not ep:match("^http://[%w%.%-:%[%]]+:%d+/?$") then
            return ("must be ';'-separated http://HOST:PORT etcd client URLs (IP literals), got %s"):format(show(ep))
        end
    end
    if not v:match("[^;]") then
        return "must name at least one etcd client URL"
    end
end

def { name = "etcdEndpoints", type = "string", roles = CTL, check = check_etcd_endpoints, ours = true,
      doc = "';'-separated etcd v3 client URLs (http://IP:PORT) holding the controller's state; required" }
def { name = "etcdKeyPrefix", type = "string", roles = CTL, default = "/rmq/controller", ours = true,
      check = function(v) if not v:match("^/[%w_%-/%.]*$") then return "must be a path such as /rmq/controller" end end,
      doc = "etcd key prefix of this controller group's state (controllers sharing it are one group)" }
def { name = "etcdLeaseTtlSeconds", type = "integer", roles = CTL, min = 1, max = 60, default = 3, ours = true,
      doc = "TTL of the active controller's etcd lease: a dead active controller is replaced after at most this" }
def { name = "etcdRequestTimeoutMillis", type = "integer", roles = CTL, min = 100, max = 60000, default = 1000,
      ours = true, doc = "timeout of one etcd request; an endpoint past it counts as unreachable" }
def { name = "etcdMaxResponseBytes", type = "integer", roles = CTL, min = 65536, max = 268435456,
      default = 16 * 1024 * 1024, ours = true,
      doc = "largest etcd answer read (the whole controller state comes in one range read)" }
def { name = "etcdMaxCallsInFlight", type = "integer", roles = CTL, min = 1, max = 4096, default = 64, ours = true,
      doc = "etcd calls requests may have in flight at once (each its own connection); past it a request is"
          .. " refused at once (the lease's own calls are never refused)" }
def { name = "controllerMaxBrokers", type = "integer", roles = CTL, min = 1, max = 1048576, default = 4096,
      ours = true, doc = "brokers the controller knows (registered ids and heartbeats); a new one past it is refused" }
def { name = "controllerMaxBrokerSets", type = "integer", roles = CTL, min = 1, max = 1048576, default = 1024,
      ours = true, doc = "broker sets (brokerNames) the controller keeps in etcd; a new one past it is refused" }
def { name = "controllerMaxBrokersPerSet", type = "integer", roles = CTL, min = 1, max = 1024, default = 64,
      ours = true, doc = "broker ids one broker set (brokerName) may be given" }
def { name = "enableElectUncleanMaster", type = "boolean", roles = CTL, default = false,
      doc = "elect a master outside the SyncStateSet when none of it is alive (may lose acknowledged messages)" }
def { name = "electPolicy", type = "policy", roles = CTL, check = check_module_name,
      default = "rmq.policy.elect", ours = true,
      doc = "module (function elect) choosing a broker set's new master (lua/rmq/policy/elect.lua)" }
def { name = "notifyBrokerRoleChanged", type = "boolean", roles = CTL, default = true,
      doc = "tell a broker set's members of an election at once (NOTIFY_BROKER_ROLE_CHANGED), as 5.x does" }

-- Broker identity and registration (BrokerConfig) -----------------------

def { name = "brokerClusterName", type = "string", roles = BR, default = "DefaultCluster",
      doc = "cluster this broker belongs to" }
def { name = "brokerName", type = "string", roles = BR, default = hostname,
      doc = "broker group name, shared by a master and its slaves; default: the host name" }
def { name = "brokerId", type = "integer", roles = BR, min = 0, default = 0,
      doc = "0 = master; a slave needs > 0" }
def { name = "brokerRole", type = "string", roles = BR, default = "ASYNC_MASTER",
      enum = { "ASYNC_MASTER", "SYNC_MASTER", "SLAVE" },
      doc = "ASYNC_MASTER, SYNC_MASTER (a send is answered once a slave has it) or SLAVE (follows its master over HA)" }
def { name = "brokerIP1", type = "string", roles = BR,
      doc = "address registered with the NameServer; unset = first non-loopback IPv4 address" }
def { name = "brokerIP2", type = "string", roles = BR,
      doc = "address a master advertises for HA; unset = same as brokerIP1" }
def { name = "namesrvAddr", type = "string", roles = BR, check = check_host_ports,
      default = function(c, role)
          if role == "standalone" then
              -- The embedded NameServer. With port 0 the real port is
              -- known only after binding: the server fills it in.
              if c.namesrvListenPort == 0 then
                  return nil
              end
              return "127.0.0.1:" .. c.namesrvListenPort
          end
          return getenv_nonempty("NAMESRV_ADDR")
      end,
      doc = "NameServers to register with, \"host:port;host:port\"; default $NAMESRV_ADDR" }
def { name = "fetchNamesrvAddrByAddressServer", type = "boolean", roles = BR, default = false,
      refuse = only(false, "rmq has no address server client (set namesrvAddr)"),
      doc = "RocketMQ: fetch namesrvAddr from the HTTP address server; rmq has no client for it: only false" }
def { name = "brokerPermission", type = "integer", roles = BR, min = 0, max = 15, default = 6,
      doc = "PermName bits for all topics of this broker: 6 = read+write, 4 = read-only" }
def { name = "registerNameServerPeriod", type = "integer", roles = BR, min = 1, default = 30000,
      doc = "ms between REGISTER_BROKER rounds (RocketMQ clamps it to 10000-60000)" }
def { name = "registerBrokerTimeoutMills", type = "integer", roles = BR, min = 1, default = 6000,
      doc = "timeout of one REGISTER_BROKER call, ms" }
def { name = "compressedRegister", type = "boolean", roles = BR, default = false,
      doc = "zlib-compress the REGISTER_BROKER body" }
def { name = "forceRegister", type = "boolean", roles = BR, default = true,
      doc = "register every period even when QUERY_DATA_VERSION says nothing changed" }
-- The broker's own credentials (ACL 1.0, as a client's AclClientRPCHook):
-- 4.9.8's broker signs nothing it sends (BrokerOuterAPI has no RPCHook).
def { name = "accessKey", type = "string", roles = BR, ours = true, check = function(v)
          if v == "" then return "must not be empty" end
      end,
      doc = "ACL: the AccessKey the broker signs its own requests with (REGISTER_BROKER, UNREGISTER_BROKER and"
          .. " QUERY_DATA_VERSION to the NameServers, a slave's sync from its master; not the web console's:"
          .. " consoleAccessKey);"
          .. " needs secretKey; unset: unsigned, as 4.9.8" }
def { name = "secretKey", type = "string", roles = BR, ours = true, secret = true, check = function(v)
          if v == "" then return "must not be empty" end
      end,
      doc = "ACL: the secret of accessKey (never shown)" }
def { name = "enableSplitRegistration", type = "boolean", roles = BR, default = false,
      doc = "5.x: register a large topic table in parts of splitRegistrationSize topics" }
def { name = "splitRegistrationSize", type = "integer", roles = BR, min = 1, max = 1000000, default = 800,
      doc = "5.x: topics per REGISTER_BROKER part when enableSplitRegistration is on" }
def { name = "topicQueueNumsMax", type = "integer", roles = BR, min = 1, max = 65535, default = 1024,
      ours = true,
      doc = "most read/write queues UPDATE_AND_CREATE_TOPIC (and a group's retryQueueNums) may ask for" }

-- Broker store (MessageStoreConfig) -------------------------------------

def { name = "storePathRootDir", type = "string", roles = BR, path = true, default = "~/store",
      doc = "root of the store: commitlog/, consumequeue/, index/, config/, checkpoint" }
def { name = "storePathCommitLog", type = "string", roles = BR, path = true,
      default = function(c) return c.storePathRootDir .. "/commitlog" end,
      doc = "commit log directory; default storePathRootDir/commitlog" }
def { name = "mappedFileSizeCommitLog", type = "integer", roles = BR, min = 4096, default = 1073741824,
      doc = "size of one commit log file, bytes" }
def { name = "mappedFileSizeConsumeQueue", type = "integer", roles = BR, min = 20, default = 6000000,
      doc = "size of one consume queue file, bytes (rounded up to 20-byte entries)" }
def { name = "maxMappedConsumeQueueFiles", type = "integer", roles = BR, min = 0, max = 1 << 30, default = 0,
      ours = true,
      doc = "consume queue files mapped at once; colder ones are unmapped and mapped again when read "
         .. "(each mapping counts against vm.max_map_count). 0: half of vm.max_map_count" }
def { name = "flushDiskType", type = "string", roles = BR, default = "ASYNC_FLUSH",
      enum = { "ASYNC_FLUSH", "SYNC_FLUSH" },
      doc = "ASYNC_FLUSH (fsync in the background) or SYNC_FLUSH (a send waits for fsync)" }
def { name = "flushIntervalCommitLog", type = "integer", roles = BR, min = 1, default = 500,
      doc = "async flush: ms between commit log flushes" }
def { name = "flushCommitLogLeastPages", type = "integer", roles = BR, min = 0, default = 4,
      doc = "async flush: flush only when this many 4 KiB pages are dirty" }
def { name = "flushCommitLogThoroughInterval", type = "integer", roles = BR, min = 0, default = 10000,
      doc = "async flush: flush regardless of dirty pages after this many ms" }
def { name = "flushIntervalConsumeQueue", type = "integer", roles = BR, min = 1, default = 1000,
      doc = "ms between consume queue flushes" }
def { name = "flushConsumeQueueLeastPages", type = "integer", roles = BR, min = 0, default = 2,
      doc = "flush a consume queue only when this many pages are dirty" }
def { name = "flushConsumeQueueThoroughInterval", type = "integer", roles = BR, min = 0, default = 60000,
      doc = "flush consume queues regardless of dirty pages after this many ms" }
def { name = "syncFlushTimeout", type = "integer", roles = BR, min = 1, default = 5000,
      doc = "SYNC_FLUSH: ms a send waits for fsync before FLUSH_DISK_TIMEOUT" }
def { name = "slaveTimeout", type = "integer", roles = BR, min = 1, default = 3000,
      doc = "SYNC_MASTER: ms a send waits for a slave's acknowledgement before FLUSH_SLAVE_TIMEOUT (4.9.8)" }
def { name = "fileReservedTime", type = "integer", roles = BR, min = 0, default = 72,
      doc = "hours to keep commit log files" }
def { name = "cleanUnusedTopicIdleTime", type = "integer", roles = BR, min = 0, default = 72,
      doc = "CLEAN_UNUSED_TOPIC empties a queue of a topic missing from the topic table only when "
          .. "its last message is older than this many hours (0: whatever its age); a slave refuses "
          .. "CLEAN_UNUSED_TOPIC" }
def { name = "deleteWhen", type = "string", roles = BR, default = "04", check = check_hours,
      doc = "hours of day when expired files are deleted, e.g. \"04\" or \"04;16\"" }
def { name = "diskMaxUsedSpaceRatio", type = "integer", roles = BR, min = 0, max = 100, default = 75,
      doc = "delete expired files at once when the disk is fuller than this % (RocketMQ clamps to 10-95)" }
def { name = "cleanFileForciblyEnable", type = "boolean", roles = BR, default = true,
      doc = "when the disk is nearly full, delete the oldest files even if not yet expired" }
def { name = "maxMessageSize", type = "integer", roles = BR, min = 1, default = 4194304,
      doc = "largest accepted message, bytes: its whole stored record (a batch: all its records)" }
-- gRPC (RocketMQ 5's MessagingService in local mode, src/grpc/, docs/grpc.md).
def { name = "grpcServerPort", type = "integer", roles = BR, min = -1, max = 65535, default = -1,
      default_by_role = { proxy = 8081 },
      doc = "serve RocketMQ 5's gRPC API (the 5.x Proxy's key; its default is 8081) on this port; -1 = off; 0 = any free port" }
def { name = "grpcMaxInboundMessageSize", type = "integer", roles = BR, min = 1024, max = 1073741824,
      default = 136314880,
      doc = "largest gRPC request message in bytes, after gzip (the 5.x Proxy's key and default, 130 MiB)" }
def { name = "grpcMaxConnectionBufferBytes", type = "integer", roles = BR, min = 1029, max = 2147483647,
      default = 268435456, ours = true,
      doc = "request bytes one gRPC connection's calls may hold at once; the call that would pass it ends RESOURCE_EXHAUSTED" }
def { name = "grpcMaxInboundMetadataSize", type = "integer", roles = BR, min = 1024, max = 1048576,
      default = 16384, ours = true,
      doc = "header bytes (names + values) one gRPC call may send; past it the call is reset (SETTINGS_MAX_HEADER_LIST_SIZE)" }
def { name = "grpcMaxConcurrentStreams", type = "integer", roles = BR, min = 1, max = 100000, default = 128,
      ours = true, doc = "calls one gRPC connection may have open (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)" }
def { name = "grpcMaxStreamsPerSecond", type = "integer", roles = BR, min = 0, default = 200000, ours = true,
      doc = "streams one gRPC connection may open per second before GOAWAY ENHANCE_YOUR_CALM; 0 = no limit. "
          .. "Every 5.x call is a stream, and an SDK sends over one connection: the default is about what "
          .. "one worker answers at full speed, so a client is never cut for its throughput "
          .. "(20,000 cut rmq's own bench at 4 connections)" }
def { name = "grpcMaxResetsPerSecond", type = "integer", roles = BR, min = 0, default = 200, ours = true,
      doc = "stream resets one gRPC connection may cause per second, its RST_STREAMs and the server's answers to its stream errors (rapid reset, CVE-2023-44487; MadeYouReset, CVE-2025-8671), before GOAWAY; 0 = no limit" }
def { name = "grpcMaxSettingsEntries", type = "integer", roles = BR, min = 7, max = 2730, default = 32, ours = true,
      doc = "settings one HTTP/2 SETTINGS frame of a gRPC client may carry (nghttp2's max_settings; a client sends at most 7 kinds); more: GOAWAY ENHANCE_YOUR_CALM" }
def { name = "grpcMaxSettingsPerSecond", type = "integer", roles = BR, min = 0, default = 100, ours = true,
      doc = "SETTINGS frames one gRPC connection may send per second (each is acknowledged, and one changing INITIAL_WINDOW_SIZE moves every open stream's window) before GOAWAY ENHANCE_YOUR_CALM; 0 = no limit" }
def { name = "grpcRequestTimeoutMillis", type = "integer", roles = BR, min = 0, default = 30000, ours = true,
      doc = "a unary or server-streaming call whose request has not arrived whole this long after it opened is reset, and any call whose answer waits this long for a window the client does not open; 0 = never" }
def { name = "grpcKeepAliveTimeMillis", type = "integer", roles = BR, min = 0, default = 60000, ours = true,
      doc = "PING a gRPC connection nothing was read from this long; 0 = never" }
def { name = "grpcKeepAliveTimeoutMillis", type = "integer", roles = BR, min = 100, default = 20000, ours = true,
      doc = "close a gRPC connection whose PING is not answered this long" }
def { name = "grpcAuthDateTimeWindowMillis", type = "integer", roles = BR, min = 1000, default = 900000,
      ours = true, doc = "with aclEnable, a gRPC call whose signed x-mq-date-time is further than this from"
          .. " the server's clock is refused UNAUTHENTICATED (a captured signature cannot be replayed later)" }
def { name = "grpcClientConsumerMinLongPollingTimeoutMillis", type = "integer", roles = BR, min = 0, max = 3600000,
      default = 5000, doc = "(5.x ProxyConfig) a ReceiveMessage long-polls at least this long; a call whose"
          .. " grpc-timeout leaves less is answered at once ILLEGAL_POLLING_TIME (40018), not held past its deadline" }
def { name = "grpcClientConsumerMaxLongPollingTimeoutMillis", type = "integer", roles = BR, min = 0, max = 3600000,
      default = 20000, doc = "(5.x ProxyConfig) a ReceiveMessage long-polls at most this long (and never past"
          .. " its grpc-timeout), whatever long_polling_timeout it asks" }
def { name = "grpcMaxProducerTopics", type = "integer", roles = BR, min = 1, max = 10000,
      default = 64, ours = true,
      doc = "most topics one gRPC producer connection registers as producer of (its Settings' publishing list and"
          .. " the topics of its transactional sends, 5.x's groups for transaction checks); the checks of a topic"
          .. " past them go to another producer of it" }
def { name = "minInvisibleTimeMillsForRecv", type = "integer", roles = BR, min = 0, max = 43200000,
      default = 10000, doc = "(5.x ProxyConfig) a gRPC ReceiveMessage asking a shorter invisible duration is"
          .. " answered ILLEGAL_INVISIBLE_TIME (40011), unless it asks auto_renew (the lease is then the server's)" }
def { name = "maxInvisibleTimeMills", type = "integer", roles = BR, min = 1000, max = 43200000,
      default = 43200000, doc = "(5.x ProxyConfig) a gRPC ReceiveMessage (without auto_renew) or"
          .. " ChangeInvisibleDuration asking a longer invisible duration is answered ILLEGAL_INVISIBLE_TIME (40011)" }
-- ReceiveMessageRequest.auto_renew (src/grpc/renew.h, docs/grpc.md): 5.x ProxyConfig's names and defaults.
def { name = "enableProxyAutoRenew", type = "boolean", roles = BR, default = true,
      doc = "renew the invisible time of messages a gRPC client received with auto_renew while it is connected" }
def { name = "defaultInvisibleTimeMills", type = "integer", roles = BR, min = 1000, max = 43200000, default = 60000,
      doc = "the invisible time of a gRPC receive with auto_renew (in place of the request's)" }
def { name = "renewAheadTimeMillis", type = "integer", roles = BR, min = 0, max = 43200000, default = 10000,
      doc = "auto_renew: a message is renewed once it would become visible within this long" }
def { name = "renewMaxTimeMillis", type = "integer", roles = BR, min = 1000, default = 10800000,
      doc = "auto_renew: a message received this long ago is renewed no more (it comes back when its time runs out)" }
def { name = "renewSchedulePeriodMillis", type = "integer", roles = BR, min = 10, max = 3600000, default = 5000,
      doc = "auto_renew: how often a connection's received messages are looked at for renewal" }
def { name = "maxRenewRetryTimes", type = "integer", roles = BR, min = 1, max = 1000, default = 3,
      doc = "auto_renew: renewals of a message that may fail in a row before it is renewed no more" }
def { name = "invisibleTimeMillisWhenClear", type = "integer", roles = BR, min = 1000, max = 43200000, default = 1000,
      doc = "auto_renew: when a gRPC client's connection closes, its unacknowledged messages are visible again this soon" }
-- The cluster-mode proxy (role = "proxy", src/grpc/upstream.c): 5.x ProxyConfig's names.
def { name = "topicRouteServiceCacheRefreshSeconds", type = "integer", roles = PROXY, min = 1, max = 86400,
      default = 20, doc = "a topic's route is fetched from the NameServers again once it is this old (the one held serves meanwhile)" }
def { name = "topicRouteServiceCacheExpiredSeconds", type = "integer", roles = PROXY, min = 1, max = 86400,
      default = 20, doc = "a topic's route not used for this long is dropped from the proxy's cache" }
def { name = "topicRouteServiceCacheMaxNum", type = "integer", roles = PROXY, min = 1, max = 10000000,
      default = 20000, doc = "topics whose routes a proxy worker keeps (the one unused longest goes first when full)" }
def { name = "proxyMaxBrokerConnections", type = "integer", roles = PROXY, min = 1, max = 65536, default = 256,
      ours = true, doc = "remoting connections one proxy worker keeps to brokers and NameServers (one per address)" }
def { name = "proxyMaxWaitingRequests", type = "integer", roles = PROXY, min = 1, max = 10000000, default = 65536,
      ours = true, doc = "requests one proxy worker holds while their topic's route is being fetched; past it SYSTEM_BUSY" }
def { name = "topicConfigCacheRefreshSeconds", type = "integer", roles = PROXY, min = 1, max = 86400,
      default = 20, doc = "a topic's config (its message.type, which QueryRoute lists and SendMessage is checked"
          .. " against) is asked from one of its brokers again once it is this old; kept and dropped with the topic's route" }
def { name = "subscriptionGroupConfigCacheRefreshSeconds", type = "integer", roles = PROXY, min = 1, max = 86400,
      default = 20, doc = "a consumer group's config (its consumeMessageOrderly: orderly POPs, the Settings' fifo) is"
          .. " asked from a broker again once it is this old (the one held serves meanwhile)" }
def { name = "subscriptionGroupConfigCacheExpiredSeconds", type = "integer", roles = PROXY, min = 1, max = 86400,
      default = 300, doc = "a consumer group's config not used for this long is dropped from the proxy's cache" }
def { name = "subscriptionGroupConfigCacheMaxNum", type = "integer", roles = PROXY, min = 1, max = 10000000,
      default = 20000, doc = "consumer groups whose configs a proxy worker keeps (the one unused longest goes first when full)" }
def { name = "transactionDataExpireMillis", type = "integer", roles = PROXY, min = 1000, max = 86400000,
      default = 30000, doc = "a transaction the proxy sent (or relayed a broker's check of) may be ended through it"
          .. " for this long, once; after, or a second time, EndTransaction is refused INVALID_TRANSACTION_ID"
          .. " (the broker's check asks the producer again)" }
def { name = "transactionDataMaxNum", type = "integer", roles = PROXY, min = 1, max = 1000, default = 15,
      doc = "ends one transaction id may have pending in the proxy (one per send or relayed check; the oldest goes past it)" }
def { name = "proxyMaxTransactionData", type = "integer", roles = PROXY, min = 1, max = 10000000, default = 65536,
      ours = true, doc = "transactions the proxy keeps for EndTransaction, all workers together (the oldest goes past it;"
          .. " its end is then refused and the broker's check asks the producer)" }
def { name = "proxyBrokerCallTimeoutMillis", type = "integer", roles = PROXY, min = 100, max = 600000, default = 10000,
      ours = true, doc = "how long the proxy waits for a broker's or NameServer's answer (a POP: its long polling time more)" }
def { name = "checkCRCOnRecover", type = "boolean", roles = BR, default = true,
      doc = "verify record CRCs when recovering the commit log" }
def { name = "recoverProgressIntervalMillis", type = "integer", roles = BR, min = 0, max = 3600000,
      default = 5000, ours = true,
      doc = "crash recovery of a commit log longer than three files logs its progress (percent "
          .. "scanned, MB/s) at every 10 % and at least this often, ms; 0: no progress lines" }
def { name = "warmMapedFileEnable", type = "boolean", roles = BR, default = false,
      doc = "reserve each new commit log file whole on disk when it is created, as RocketMQ "
          .. "writes a warm file whole (sic: RocketMQ's spelling and default); off, files stay "
          .. "sparse and blocks are reserved 4 MiB at a time ahead of the writer" }
def { name = "commitLogWarmWindowBytes", type = "integer", roles = BR, min = 0, max = 1 << 32,
      default = 64 * 1024 * 1024,
      doc = "bytes of the commit log pre-faulted ahead of the writer by a thread of its own, "
          .. "off the put path (a first write to a page costs several times the put itself); "
          .. "0: none.  Only without transientStorePoolEnable: staged appends fault nothing in" }
def { name = "transientStorePoolEnable", type = "boolean", roles = BR, default = true,
      doc = "stage appends in a buffer and write them to the commit log file in one pwrite per "
          .. "batch (a send loop pass, a group commit) instead of copying each into the mapping: "
          .. "no page fault, no zeroing of pages about to be overwritten (docs/performance.md). "
          .. "Unlike RocketMQ's pool, a send is answered only after its bytes are written (in the "
          .. "page cache), so a killed broker loses no acknowledged message; hence on by default. "
          .. "Off, the sending thread copies into pages store-warm prepared ahead of it "
          .. "(commitLogWarmWindowBytes): about the same CPU at 1 KiB with 10-20 % more sends a second "
          .. "when the broker shares 2 cores with its clients, twice the CPU at 16 KiB" }
def { name = "commitLogStagingBytes", type = "integer", roles = BR, min = 65536, max = 1 << 30,
      default = 4 * 1024 * 1024, ours = true,
      doc = "size of the commit log's staging buffer (transientStorePoolEnable), at least "
          .. "maxMessageSize (raised to it): a batch of appends larger than this is written in "
          .. "parts" }
def { name = "commitLogDropCacheBehindBytes", type = "integer", roles = BR, min = -1,
      default = 64 * 1024 * 1024, ours = true,
      doc = "the flush thread drops the page cache of the commit log more than this many bytes "
          .. "below its flushed end, so the writer gets its pages back hot (a third to a half less CPU "
          .. "per 16 KiB send on a VM), but not what a consumer or a slave still has ahead of it "
          .. "(commitLogDropCacheReaderSeconds). -1: the span accessMessageInMemoryMaxRatio counts "
          .. "as in memory (that share of physical memory); 0: never (docs/performance.md)" }
def { name = "commitLogDropCacheReaderSeconds", type = "integer", roles = BR, min = 0, max = 86400,
      default = 60, ours = true,
      doc = "a consumer group's pull or POP of a queue, and a slave's HA transfer, keep the commit "
          .. "log's page cache from where they read up for this many seconds to twice that, so "
          .. "commitLogDropCacheBehindBytes never drops what an active reader has still to read; "
          .. "a reader holds at most the span accessMessageInMemoryMaxRatio counts as in memory "
          .. "(one further behind reads from the disk anyway). The index dispatch always holds "
          .. "it back to where it has read; the broker's other services (delayed delivery, "
          .. "transaction checks, queries) do not count. 0: consumers and slaves do not hold it" }
def { name = "duplicationEnable", type = "boolean", roles = BR, default = false,
      doc = "RocketMQ: let dispatch re-apply records already in the consume queues" }
def { name = "messageIndexEnable", type = "boolean", roles = BR, default = true,
      doc = "build the key / unique-id index used by QUERY_MESSAGE" }
def { name = "indexMetaBufferBytes", type = "integer", roles = BR, min = 0, max = 1 << 30,
      default = 4 * 1024 * 1024, ours = true,
      doc = "each append (with transientStorePoolEnable, each commit of the staged log) copies its records less "
          .. "their bodies into a buffer of this size (and the index dispatch swaps in a second "
          .. "one), so the index need not read the records back from the page cache. A record's "
          .. "head, topic and properties are ~200 bytes, so 4 MiB holds ~50 ms of 400 K sends/s "
          .. "(the dispatch runs every 10 ms while behind, and is woken when half of it is used); a "
          .. "dispatch further behind reads the log. 0: always read the log" }
def { name = "maxHashSlotNum", type = "integer", roles = BR, min = 1, default = 5000000,
      doc = "hash slots per index file" }
def { name = "maxIndexNum", type = "integer", roles = BR, min = 1, default = 20000000,
      doc = "entries per index file" }
def { name = "maxMsgsNumBatch", type = "integer", roles = BR, min = 1, default = 64,
      doc = "most messages one QUERY_MESSAGE returns" }
def { name = "defaultQueryMaxNum", type = "integer", roles = BR, min = 1, default = 32,
      doc = "default maxNum of QUERY_MESSAGE" }
def { name = "messageDelayLevel", type = "string", roles = BR, check = check_delay_levels,
      default = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
      doc = "delay of each level (1-based), used by delayed messages and retries" }
def { name = "flushDelayOffsetInterval", type = "integer", roles = BR, min = 1, default = 10000,
      doc = "ms between writes of config/delayOffset.json" }
-- Timer messages (RIP-43; MessageStoreConfig's names, 5.x's defaults;
-- docs/timer.md).
def { name = "timerWheelEnable", type = "boolean", roles = BR, default = true,
      doc = "hold messages with TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS until their time (false: refused)" }
def { name = "timerMaxDelaySec", type = "integer", roles = BR, min = 1, max = 2147483647, default = 259200,
      doc = "longest delay a timer message may ask for, seconds (5.x: 3 days)" }
def { name = "timerPrecisionMs", type = "integer", roles = BR, min = 1, default = 1000,
      doc = "timer wheel bucket, ms; snapped down to 100, 200, 500 or 1000 as 5.x does" }
def { name = "timerFlushIntervalMs", type = "integer", roles = BR, min = 1, default = 1000,
      doc = "ms between fdatasyncs of the timer log and its checkpoint" }
def { name = "recallMessageEnable", type = "boolean", roles = BR, default = false,
      doc = "serve RECALL_MESSAGE (5.5): a producer cancels a timer message not yet delivered (5.x: off)" }
def { name = "mappedFileSizeTimerLog", type = "integer", roles = BR, min = 4096, default = 104857600,
      doc = "bytes per timer log file (STORE/timer/log; 32 bytes per pending timer)" }

-- Broker in controller mode (RocketMQ 5 BrokerConfig; docs/controller.md) -
-- The controller assigns the id and elects the master: brokerId and
-- brokerRole of the conf are ignored.  allAckInSyncStateSet and
-- haMaxTimeSlaveNotCatchup sit with the HA keys (docs/replication.md);
-- the keys below refused with a reason are not served yet.
def { name = "enableControllerMode", type = "boolean", roles = BR, default = false,
      doc = "the broker set's ids and master come from the controllers (controllerAddr)" }
def { name = "controllerAddr", type = "string", roles = BR, check = check_host_ports,
      doc = "';'-separated controller addresses (every one gets the heartbeats; the active one the requests)" }
def { name = "syncBrokerMetadataPeriod", type = "integer", roles = BR, min = 100, default = 5000,
      doc = "ms between asking the controller for the set's master (GET_REPLICA_INFO)" }
def { name = "controllerHeartBeatTimeoutMills", type = "integer", roles = BR, min = 500, default = 10000,
      doc = "how long the controllers wait for this broker's next heartbeat before it counts as dead" }
def { name = "masterLeaseTimeoutMills", type = "integer", roles = BR, min = 100, ours = true,
      default = function(c)
          return (c.controllerHeartBeatTimeoutMills or 10000) // 2
      end,
      doc = "a master in controller mode the active controller has not confirmed for this many ms (cut from the"
         .. " controllers or etcd) fences itself: refuses writes and leaves the NameServers until confirmed again;"
         .. " must be below controllerHeartBeatTimeoutMills (default: half of it; docs/controller.md)" }
def { name = "brokerElectionPriority", type = "integer", roles = BR, min = 0, max = 2147483647,
      default = 2147483647, doc = "election priority among equally up-to-date brokers: smaller wins (5.x)" }
def { name = "checkSyncStateSetPeriod", type = "integer", roles = BR, min = 100, default = 5000,
      refuse = only(5000, "the SyncStateSet is not shrunk or grown by rmq's HA yet (docs/controller.md)"),
      planned = true, doc = "ms between the master's SyncStateSet checks (5.x)" }
def { name = "enableAutoInSyncReplicas", type = "boolean", roles = BR, default = false,
      refuse = only(false, "rmq's HA does not adjust inSyncReplicas yet (docs/controller.md)"),
      planned = true, doc = "lower inSyncReplicas to the SyncStateSet's size, not below minInSyncReplicas (5.x)" }
def { name = "inSyncReplicas", type = "integer", roles = BR, min = 1, default = 1,
      refuse = only(1, "rmq's HA does not count in-sync replicas yet (docs/controller.md)"),
      planned = true, doc = "replicas (master included) a send waits for in controller mode (5.x)" }
def { name = "minInSyncReplicas", type = "integer", roles = BR, min = 1, default = 1,
      refuse = only(1, "rmq's HA does not count in-sync replicas yet (docs/controller.md)"),
      planned = true, doc = "floor of inSyncReplicas with enableAutoInSyncReplicas (5.x)" }

-- Broker HA (MessageStoreConfig) ----------------------------------------

def { name = "haListenPort", type = "integer", roles = BR, min = 0, max = 65535,
      default = function(c)
          if c.listenPort == 0 then
              return 0
          end
          return c.listenPort + 1
      end,
      doc = "HA port (a master's slaves connect to it; a slave listens too, as 4.x); default listenPort+1 (RocketMQ 4.x always uses listenPort+1)" }
def { name = "haMasterAddress", type = "string", roles = BR, check = check_host_port,
      doc = "slave: master's HA host:port; unset = learned from the NameServer registration" }
def { name = "haSendHeartbeatInterval", type = "integer", roles = BR, min = 1, default = 5000,
      doc = "ms between a slave's offset reports, and a master's heartbeat frames, when idle" }
def { name = "haHousekeepingInterval", type = "integer", roles = BR, min = 1, default = 20000,
      doc = "close an HA connection silent for this many ms" }
def { name = "haTransferBatchSize", type = "integer", roles = BR, min = 1, max = 4194292, default = 32768,
      doc = "largest HA data frame body, bytes (at most 4 MiB - 12: a slave's read buffer, rmq's and Java's)" }
def { name = "haSlaveFallbehindMax", type = "integer", roles = BR, min = 0, default = 268435456,
      doc = "SYNC_MASTER: a slave further behind than this many bytes is not available" }
def { name = "haMaxSlaves", type = "integer", roles = BR, min = 1, default = 16, ours = true,
      doc = "HA connections a master accepts at once (more are refused with a log line)" }
def { name = "haAllowedAddresses", type = "string", roles = BR, check = check_addresses, ours = true,
      doc = "';'-separated IP addresses the HA port accepts slaves from (RocketMQ's HA has no authentication),"
          .. " besides the brokers registered for this brokerName at the NameServers and haMasterAddress" }
def { name = "haAllowAnyAddress", type = "boolean", roles = BR, default = false, ours = true,
      doc = "the HA port serves the commit log to any peer, as 4.9.8 does (default: only haAllowedAddresses,"
          .. " the brokers registered for this brokerName at the NameServers, and haMasterAddress)" }
def { name = "haUnknownPeerHoldMillis", type = "integer", roles = BR, min = 0, max = 60000, default = 5000,
      ours = true,
      doc = "a peer of the HA port on none of those lists is held, unread, this long while the NameServers"
          .. " are asked again (a new slave may connect before the master has seen it), then closed" }
def { name = "haUnknownPeersMax", type = "integer", roles = BR, min = 0, max = 1024, default = 8, ours = true,
      doc = "unknown HA peers held at once; more are closed at once" }
def { name = "haMaxTimeSlaveNotCatchup", type = "integer", roles = BR, min = 100, max = 3600000, default = 15000,
      doc = "a master under rmq.broker.replica_role drops a slave from its SyncStateSet after this many ms without"
         .. " catching up (or at once when its connection goes), and adds a slave back once it has caught up" }
def { name = "allAckInSyncStateSet", type = "boolean", roles = BR, default = false,
      doc = "with brokerRole SYNC_MASTER and a SyncStateSet from rmq.broker.replica_role: a send is acknowledged only"
         .. " when every slave of the SyncStateSet has it (counted as that many connected slaves; docs/replication.md)" }
def { name = "haTransferFromMinOffset", type = "boolean", roles = BR, default = false, ours = true,
      doc = "a slave on an empty store copies the master's whole log (4.9.8: only its last commit log file)" }

-- Broker pull, slave read (BrokerConfig, MessageStoreConfig) ------------

def { name = "longPollingEnable", type = "boolean", roles = BR, default = true,
      doc = "hold a PULL with no new message until one arrives or the consumer's timeout" }
def { name = "shortPollingTimeMills", type = "integer", roles = BR, min = 0, default = 1000,
      doc = "without long polling: ms to hold a PULL with no new message" }
def { name = "rebalanceLockMaxLiveTime", type = "integer", roles = BR, min = 1, default = 60000,
      doc = "ms a queue lock of an orderly consumer lives without renewal (LOCK_BATCH_MQ)" }
def { name = "brokerSuspendMaxTimeMillis", type = "integer", roles = BR, min = 0, default = 25000,
      doc = "longest a PULL is held whatever the consumer asks (the Java client gives up after 30 s)" }
def { name = "pullHoldRecheckMillis", type = "integer", roles = BR, min = 1, default = 500,
      doc = "a held PULL re-reads its queue at least this often (closes the read/wait race; lets shutdown answer)" }
-- Broker POP (RocketMQ 5; docs/pop.md) --------------------------------
def { name = "popInvisibleTimeMinMillis", type = "integer", roles = BR, min = 1, default = 1000, ours = true,
      doc = "shortest invisibleTime a POP or CHANGE_MESSAGE_INVISIBLETIME may ask (else INVALID_PARAMETER naming the field)" }
def { name = "popInvisibleTimeMaxMillis", type = "integer", roles = BR, min = 1, default = 43200000, ours = true,
      doc = "longest invisibleTime (5.x proxy's maxInvisibleTimeMills: 12 h)" }
def { name = "popMaxInflightPerGroup", type = "integer", roles = BR, min = 1, default = 200000, ours = true,
      doc = "leases one group may hold; a POP past it finds nothing until some are acknowledged or revived (bounds memory per group)" }
def { name = "popMaxInflightTotal", type = "integer", roles = BR, min = 1, default = 2000000, ours = true,
      doc = "leases all groups together may hold (about 40 bytes each in memory)" }
def { name = "popLeaseLogCompactBytes", type = "integer", roles = BR, min = 65536, default = 67108864, ours = true,
      doc = "the lease log (STORE/pop/lease.log) is rewritten with only the live leases past this size" }
def { name = "popReviveIntervalMillis", type = "integer", roles = BR, min = 10, default = 200, ours = true,
      doc = "how often the revive service looks for leases past their invisible time" }
def { name = "popFromRetryProbability", type = "integer", roles = BR, min = 0, max = 100, default = 20,
      doc = "% of POPs that read the group's retry topic first (5.x BrokerConfig)" }
def { name = "initPopOffsetByCheckMsgInMem", type = "boolean", roles = BR, default = true,
      doc = "a POP group without an offset (initMode MAX) starts at 0 while the queue's first message is in memory (within accessMessageInMemoryMaxRatio), else at its last message (5.x BrokerConfig)" }
-- Broker server-side assignment (RocketMQ 5: QUERY_ASSIGNMENT) ------------
def { name = "assignmentPolicy", type = "policy", roles = BR, check = check_module_name,
      default = "rmq.policy.assignment", ours = true,
      doc = "module name or function giving a consumer its queues on QUERY_ASSIGNMENT (server-side rebalance)" }
def { name = "defaultMessageRequestMode", type = "string", roles = BR, default = "PULL",
      enum = { "PULL", "POP" },
      doc = "mode QUERY_ASSIGNMENT gives a topic and group no SET_MESSAGE_REQUEST_MODE named (5.x BrokerConfig)" }
def { name = "defaultPopShareQueueNum", type = "integer", roles = BR, default = -1,
      doc = "POP mode: queues of the next N consumers each also pops; <= 0 every consumer pops every queue (5.x)" }
def { name = "accessMessageInMemoryMaxRatio", type = "integer", roles = BR, min = 0, max = 100, default = 40,
      doc = "% of RAM treated as page cache: older data is \"on disk\" (smaller batches, slave read)" }
def { name = "maxTransferBytesOnMessageInMemory", type = "integer", roles = BR, min = 1, default = 262144,
      doc = "PULL batch byte limit for data in memory" }
def { name = "maxTransferCountOnMessageInMemory", type = "integer", roles = BR, min = 1, default = 32,
      doc = "PULL batch message limit for data in memory" }
def { name = "maxTransferBytesOnMessageInDisk", type = "integer", roles = BR, min = 1, default = 65536,
      doc = "PULL batch byte limit for data on disk" }
def { name = "maxTransferCountOnMessageInDisk", type = "integer", roles = BR, min = 1, default = 8,
      doc = "PULL batch message limit for data on disk" }
def { name = "pullReadGapBytes", type = "integer", roles = BR, min = -1, max = 16384, default = 8192,
      doc = "how a PULL reply's records are copied: -1 through the commit log's mapping (a first "
          .. "read of each page faults it into the process); 0 or more by preadv from the file, one "
          .. "call for each run of records whose gaps are at most this many bytes (the gaps are read "
          .. "and dropped: fewer calls for more copying; docs/performance.md)" }
def { name = "pullReadWindowBytes", type = "integer", roles = BR, min = 0, max = 268435456, default = 8388608,
      ours = true,
      doc = "each worker keeps up to this many bytes (64 KiB blocks) of what its PULL reads of spread "
          .. "runs (records with gaps between them, pullReadGapBytes) took from the commit log, so the "
          .. "pulls of the queues whose records sit in those gaps copy theirs from it: the page cache "
          .. "is read once rather than once per queue, and with no call. It must span how far apart "
          .. "a topic's queues' consumers are in the log (a few MiB in a drain; docs/performance.md). "
          .. "Less than 256 KiB: no window, every run is read from the file" }
def { name = "pullZeroCopyMinBytes", type = "integer", roles = BR, min = 0, max = 1073741824, default = 32768,
      ours = true,
      doc = "a PULL reply's run of adjacent records (one commit log file, no other queue's records "
          .. "between them) of at least this many bytes goes from the file to the socket with "
          .. "sendfile, with no copy in the broker; shorter runs, and TLS connections, are copied "
          .. "(pullReadGapBytes). Measured on loopback: a sendfile per 16 KiB record costs more than "
          .. "the copy, runs of 35 KiB and more cost less (docs/performance.md). 0: always copied "
          .. "(RocketMQ's transferMsgByHeap = true)" }
def { name = "slaveReadEnable", type = "boolean", roles = BR, default = false,
      doc = "let consumers that fall behind read from a slave" }
def { name = "whichBrokerWhenConsumeSlowly", type = "integer", roles = BR, min = 0, default = 1,
      doc = "brokerId suggested to slow consumers (RocketMQ: per subscription group; this is the default)" }
def { name = "slaveReadPolicy", type = "policy", roles = BR, check = check_module_name,
      default = "rmq.policy.slave_read", ours = true,
      doc = "module name or function choosing the brokerId a consumer should pull from next" }
def { name = "slaveSynchronizePeriodMillis", type = "integer", roles = BR, min = 100, default = 10000, ours = true,
      doc = "slave: ms between fetches of the master's topics, offsets, delay offsets and groups (4.9.8: 10 s)" }
def { name = "slaveSynchronizeTimeoutMillis", type = "integer", roles = BR, min = 1, default = 3000, ours = true,
      doc = "slave: ms each of those requests to the master may take" }
def { name = "enableSlaveActingMaster", type = "boolean", roles = BR, default = false,
      doc = "5.x: register so that a NameServer with supportActingMaster routes reads and offset commits"
          .. " to this slave while its master is gone" }
def { name = "brokerNotActiveTimeoutMillis", type = "integer", roles = BR, min = 1000, default = 10000,
      doc = "5.x: with enableSlaveActingMaster, the heartbeatTimeoutMillis a registration asks the NameServers"
          .. " to expire this broker after" }
def { name = "brokerHeartbeatInterval", type = "integer", roles = BR, min = 100, default = 1000,
      doc = "5.x: ms between BROKER_HEARTBEATs: to the controllers in controller mode (enableControllerMode), and"
          .. " to every NameServer with enableSlaveActingMaster" }

-- Broker flow control (BrokerConfig, MessageStoreConfig; README "Flow
-- control") -------------------------------------------------------------

def { name = "osPageCacheBusyTimeOutMills", type = "integer", roles = BR, min = 0, default = 1000,
      doc = "a send is answered SYSTEM_BUSY while the store's current put has held the commit log lock"
          .. " longer than this, ms ([REJECTREQUEST]); live" }
def { name = "brokerFastFailureEnable", type = "boolean", roles = BR, default = true,
      doc = "answer SYSTEM_BUSY to a request that waited unread waitTimeMillsIn*Queue or longer"
          .. " ([TIMEOUT_CLEAN_QUEUE]); live" }
def { name = "waitTimeMillsInSendQueue", type = "integer", roles = BR, min = 0, default = 200,
      doc = "the wait, ms, past which a send (SEND_MESSAGE*, CONSUMER_SEND_MSG_BACK) is busy; live" }
def { name = "waitTimeMillsInPullQueue", type = "integer", roles = BR, min = 0, default = 5000,
      doc = "the wait, ms, past which a PULL_MESSAGE is busy; live" }
def { name = "waitTimeMillsInHeartbeatQueue", type = "integer", roles = BR, min = 0, default = 31000,
      doc = "the wait, ms, past which a HEART_BEAT is busy; live" }
def { name = "waitTimeMillsInTransactionQueue", type = "integer", roles = BR, min = 0, default = 3000,
      doc = "the wait, ms, past which an END_TRANSACTION is busy; live" }
def { name = "admissionPolicy", type = "policy", roles = BR, check = check_module_name,
      default = "rmq.policy.admission", ours = true,
      doc = "module name or function deciding admit or SYSTEM_BUSY for a request past a flow control limit" }

-- Broker topics, groups, clients (BrokerConfig) -------------------------

def { name = "autoCreateTopicEnable", type = "boolean", roles = BR, default = true,
      doc = "create a topic on first send, from the TBW102 template" }
def { name = "enableMixedMessageType", type = "boolean", roles = BR, default = false,
      doc = "5.x: a topic may be created with the attribute message.type=MIXED" }
def { name = "autoCreateSubscriptionGroup", type = "boolean", roles = BR, default = true,
      doc = "create a subscription group the first time a consumer uses it" }
def { name = "defaultTopicQueueNums", type = "integer", roles = BR, min = 1, default = 8,
      doc = "queues of the TBW102 auto-create template" }
def { name = "clusterTopicEnable", type = "boolean", roles = BR, default = true,
      doc = "create a topic named after the cluster" }
def { name = "brokerTopicEnable", type = "boolean", roles = BR, default = true,
      doc = "create a topic named after the broker" }
def { name = "traceTopicEnable", type = "boolean", roles = BR, default = false,
      doc = "create the message trace topic" }
def { name = "msgTraceTopicName", type = "string", roles = BR, default = "RMQ_SYS_TRACE_TOPIC",
      doc = "name of the message trace topic" }
def { name = "storeReplyMessageEnable", type = "boolean", roles = BR, default = true,
      doc = "store request-reply replies (SEND_REPLY_MESSAGE) in their topic as well as pushing them "
          .. "to the requester" }
def { name = "notifyConsumerIdsChangedEnable", type = "boolean", roles = BR, default = true,
      doc = "send NOTIFY_CONSUMER_IDS_CHANGED when a group's members change" }
def { name = "channelExpiredTimeout", type = "integer", roles = BR, min = 1, default = 120000,
      doc = "ms without HEART_BEAT after which a client is dropped (5.x key; 4.9.8 hard-codes 120000)" }
def { name = "clientMaxConsumerGroups", type = "integer", roles = BR, min = 1, max = 4294967295,
      default = 100000, ours = true,
      doc = "most consumer groups the client registry holds; a HEART_BEAT past it is refused" }
def { name = "clientMaxProducerGroups", type = "integer", roles = BR, min = 1, max = 4294967295,
      default = 100000, ours = true,
      doc = "most producer groups the client registry holds; a HEART_BEAT past it is refused" }
def { name = "clientMaxSubscriptionsPerGroup", type = "integer", roles = BR, min = 1, max = 4294967295,
      default = 10000, ours = true,
      doc = "most subscriptions (topics) one consumer group may list in a HEART_BEAT" }
def { name = "clientMaxChannelsPerGroup", type = "integer", roles = BR, min = 1, max = 4294967295,
      default = 10000, ours = true,
      doc = "most client connections one group may have; a new one past it is refused" }
def { name = "adminClientCallTimeoutMillis", type = "integer", roles = BR, min = 1, max = 600000,
      default = 10000, ours = true,
      doc = "how long GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY relayed to a client wait for its "
         .. "answer (4.9.8's Broker2Client.callClient: 10 s)" }
def { name = "brokerStatsSampleMillis", type = "integer", roles = BR, min = 10, max = 3600000,
      default = 10000, ours = true,
      doc = "ms between samples of the broker's statistics (VIEW_BROKER_STATS_DATA; 4.9.8 samples every 10 s, "
         .. "fixed); the hour and day windows are counted in samples (60 and 360 of them)" }
def { name = "brokerConsumeStatsMaxQueues", type = "integer", roles = BR, min = 1, max = 10000000,
      default = 50000, ours = true,
      doc = "GET_BROKER_CONSUME_STATS (mqadmin brokerConsumeStats): once a reply holds this many queues, "
          .. "the groups not reached yet are left out (logged, and counted in the reply's remark)" }
def { name = "adminClientCallMaxPending", type = "integer", roles = BR, min = 1, max = 100000,
      default = 256, ours = true,
      doc = "most such relayed calls waiting for a client at once (in the whole broker); past it a call "
         .. "is answered SYSTEM_ERROR at once" }
def { name = "adminClientCallMaxPendingPerClient", type = "integer", roles = BR, min = 1, max = 100000,
      default = 4, ours = true,
      doc = "most relayed calls waiting for one client connection at once (a client that never answers holds "
         .. "no more); freed when that connection closes" }
def { name = "consumeStatsTpsSampleMillis", type = "integer", roles = BR, min = 100, max = 3600000,
      default = 10000, ours = true,
      doc = "how often the committed offsets are sampled for GET_CONSUME_STATS' consumeTps (the rate over the "
         .. "last 6 samples: a minute by default, as 4.9.8's per-minute statistic)" }
def { name = "enablePropertyFilter", type = "boolean", roles = BR, default = false,
      doc = "accept SQL92 (property) subscriptions (CHECK_CLIENT_CONFIG, PULL_MESSAGE), as RocketMQ" }
def { name = "filterSupportRetry", type = "boolean", roles = BR, default = false,
      doc = "apply a group's SQL92 filter to its retry topic too (by each message's RETRY_TOPIC), as RocketMQ" }
def { name = "filterExpressionMaxLength", type = "integer", roles = BR, min = 1, max = 1048576,
      default = 16384, ours = true,
      doc = "longest SQL92 expression a subscription may carry (bytes); longer is refused as a bad expression" }
def { name = "filterExpressionMaxDepth", type = "integer", roles = BR, min = 1, max = 1000,
      default = 128, ours = true,
      doc = "deepest SQL92 expression tree (nesting and AND/OR chains) compiled; deeper is refused" }
def { name = "filterExpressionMaxNodes", type = "integer", roles = BR, min = 1, max = 1048576,
      default = 4096, ours = true,
      doc = "most terms (operators, operands, IN items) one SQL92 expression may compile to" }
def { name = "filterCompiledCacheSize", type = "integer", roles = BR, min = 1, max = 1048576,
      default = 1024, ours = true,
      doc = "compiled SQL92 expressions each worker's Lua keeps (cleared when full); its C pull keeps up to 256" }
def { name = "pullFilters", type = "table", roles = BR, ours = true, check = check_pull_filters,
      default = function() return {} end,
      doc = "Lua pull filters: { [\"Topic\"|\"Topic@Group\"] = fn | \"module.fn\" | { fn = .., body = true } },"
          .. " fn(properties, tags, bodySize[, body]) -> keep" }
def { name = "pullFilterReportMillis", type = "integer", roles = BR, min = 0, default = 60000, ours = true,
      doc = "ms between log lines of each Lua pull filter's calls, drops and time (0: never)" }
def { name = "flushConsumerOffsetInterval", type = "integer", roles = BR, min = 1, default = 5000,
      doc = "ms between writes of config/consumerOffset.json" }
def { name = "rejectTransactionMessage", type = "boolean", roles = BR, default = false,
      doc = "refuse transactional (half) messages" }
def { name = "transactionTimeOut", type = "integer", roles = BR, min = 0, default = 6000,
      doc = "ms a half message waits before the first CHECK_TRANSACTION_STATE" }
def { name = "transactionCheckMax", type = "integer", roles = BR, min = 0, default = 15,
      doc = "checks of one half message before it is discarded" }
def { name = "transactionCheckInterval", type = "integer", roles = BR, min = 1, default = 60000,
      doc = "ms between transaction check rounds" }
def { name = "transactionDecidedMax", type = "integer", roles = BR, min = 0, max = 100000000,
      default = 200000, ours = true,
      doc = "decisions (commit/rollback) remembered until the check round passes them, so a second "
            .. "END_TRANSACTION for one half message is refused; past it, as in RocketMQ, it is not" }
def { name = "aclEnable", type = "boolean", roles = BOTH, default = false,
      doc = "RocketMQ ACL 1.0: check every request's signature and permissions against aclFile (plain_acl.yml); on a NameServer too (rmq extension)" }
def { name = "aclFile", type = "string", roles = BOTH, path = true, ours = true,
      doc = "the plain_acl.yml file; default ${rocketmqHome}/conf/plain_acl.yml, or plain_acl.yml beside the conf file without rocketmqHome; created empty when missing (as 4.9.8)" }
def { name = "aclReloadIntervalMillis", type = "integer", roles = BOTH, min = 100, max = 3600000,
      default = 5000, ours = true,
      doc = "how often aclFile is checked for changes (a stat; 4.9.8's FileWatchService polls every 5 s); a change is loaded once it has held for one check" }
def { name = "aclMaxFileBytes", type = "integer", roles = BOTH, min = 1024, max = 1073741824,
      default = 16777216, ours = true,
      doc = "largest aclFile accepted; a larger one is refused (the old table stays)" }
def { name = "aclMaxAccounts", type = "integer", roles = BOTH, min = 1, max = 10000000,
      default = 100000, ours = true,
      doc = "most accounts aclFile may define" }
def { name = "aclMaxResourcePerms", type = "integer", roles = BOTH, min = 1, max = 100000000,
      default = 1000000, ours = true,
      doc = "most topicPerms + groupPerms entries, all accounts together" }
def { name = "regionId", type = "string", roles = BR, default = "DefaultRegion",
      doc = "region named in SEND_MESSAGE replies (MSG_REGION)" }
def { name = "traceOn", type = "boolean", roles = BR, default = true,
      doc = "tells producers in SEND_MESSAGE replies (TRACE_ON) whether to send message traces" }

-- RocketMQ keys rmq does not use -----------------------------------------
--
-- Keys RocketMQ users commonly carry in their broker.conf / namesrv
-- properties. None is silently ignored: a switch is accepted at the value
-- that means what rmq does anyway and refused at any other (feature()),
-- a Java tuning knob is refused with what to use instead (tuning()).

-- Switches whose `off` value is rmq's behaviour.
local function feature(roles, type_, off, names, why)
    for name in names:gmatch("%S+") do
        def { name = name, type = type_, roles = roles, ignored = true,
              refuse = only(off, why), doc = why .. ": only " .. literal(off) }
    end
end

-- Knobs of Java's threads, buffers and files: no value means anything.
local function tuning(roles, type_, names, instead)
    for name in names:gmatch("%S+") do
        def { name = name, type = type_, roles = roles, ignored = true,
              noeffect = instead, doc = "no effect in rmq (" .. instead .. "): refused" }
    end
end

tuning(BOTH, "integer", [[
    serverWorkerThreads serverCallbackExecutorThreads serverSelectorThreads
]], "rmq sizes its loops with `workers`")
tuning(BOTH, "integer", [[
    serverOnewaySemaphoreValue serverAsyncSemaphoreValue
]], "rmq does not cap a connection's requests in flight; its loops are sized with `workers`")
tuning(BOTH, "integer", [[
    serverSocketSndBufSize serverSocketRcvBufSize
]], "rmq leaves socket buffers to the kernel: net.ipv4.tcp_wmem, tcp_rmem")
tuning(BOTH, "boolean", [[
    serverPooledByteBufAllocatorEnable useEpollNativeSelector
]], "Netty tuning; rmq runs libuv (epoll) loops sized with `workers`")
tuning(NS, "integer", [[
    clientRequestThreadPoolNums defaultThreadPoolNums
    clientRequestThreadPoolQueueCapacity defaultThreadPoolQueueCapacity
    unRegisterBrokerQueueCapacity
]], "rmq serves requests on its `workers` loops, with no thread pools or queues")
tuning(NS, "string", [[
    productEnvName
]], "it names the address server's environment; rmq has no address server client")
tuning(NS, "string", [[
    configStorePath
]], "rmq does not write UPDATE_NAMESRV_CONFIG changes to a file; put them in the conf")
tuning(BR, "integer", [[
    sendMessageThreadPoolNums putMessageFutureThreadPoolNums
    pullMessageThreadPoolNums processReplyMessageThreadPoolNums
    queryMessageThreadPoolNums adminBrokerThreadPoolNums
    clientManageThreadPoolNums consumerManageThreadPoolNums
    heartbeatThreadPoolNums endTransactionThreadPoolNums
    sendThreadPoolQueueCapacity putThreadPoolQueueCapacity
    pullThreadPoolQueueCapacity replyThreadPoolQueueCapacity
    queryThreadPoolQueueCapacity clientManagerThreadPoolQueueCapacity
    consumerManagerThreadPoolQueueCapacity heartbeatThreadPoolQueueCapacity
    endTransactionPoolQueueCapacity
]], "rmq serves requests on its `workers` loops, with no thread pools or queues")
tuning(BR, "integer", [[
    putMsgIndexHightWater
]], "Java store back-pressure; rmq's store has no counterpart")
tuning(BR, "integer", [[
    transientStorePoolSize commitIntervalCommitLog commitCommitLogLeastPages
    commitCommitLogThoroughInterval
]], "rmq stages appends in one buffer (commitLogStagingBytes) and writes it at the end of every "
    .. "send loop pass, before the replies (see transientStorePoolEnable)")
tuning(BR, "integer", [[
    flushLeastPagesWhenWarmMapedFile
]], "rmq pre-faults the commit log off the put path: see commitLogWarmWindowBytes")
tuning(BR, "integer", [[
    mappedFileSizeConsumeQueueExt bitMapLengthConsumeQueueExt expectConsumerNumUseFilter
    maxErrorRateOfBloomFilter filterDataCleanTimeSpan
]], "rmq has no consume queue extension or bloom filter")
tuning(BR, "integer", [[
    maxDelayTime
]], "rmq delays by the levels of messageDelayLevel")
-- 5.x's timer-wheel knobs (MessageStoreConfig; docs/timer.md).
tuning(BR, "integer", [[
    timerRollWindowSlot timerCongestNumEachSlot timerGetMessageThreadNum
    timerPutMessageThreadNum timerMetricSmallThreshold timerProgressLogIntervalMs
]], "rmq's timer wheel covers 2 x timerMaxDelaySec without rolling, delivers on one thread, "
    .. "never refuses for congestion")
tuning(BR, "boolean", [[
    timerEnableCheckMetrics
]], "rmq's timer counts are exact (rocketmq_timer_*), nothing to re-check")
feature(BR, "boolean", false, [[
    timerEnableDisruptor timerStopEnqueue timerStopDequeue timerWarmEnable
    timerInterceptDelayLevel timerSkipUnknownError
]], "rmq's timer service has no such mode (it retries a failed delivery until it is stored)")
tuning(BR, "integer", [[
    consumerFallbehindThreshold
]], "rmq does not throttle slow consumers")
tuning(BR, "integer", [[
    flushConsumerOffsetHistoryInterval
]], "rmq writes consumer offsets every flushConsumerOffsetInterval")
tuning(BR, "integer", [[
    cleanResourceInterval deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval
    destroyMapedFileIntervalForcibly redeleteHangedFileInterval
]], "rmq's retention runs on deleteWhen, fileReservedTime and diskMaxUsedSpaceRatio")
tuning(BR, "boolean", [[
    flushCommitLogTimed
]], "rmq's flusher runs every flushIntervalCommitLog ms")
tuning(BR, "boolean", [[
    transferMsgByHeap
]], "rmq sends long runs of pulled records from the file with sendfile and copies the rest: pullZeroCopyMinBytes")
tuning(BR, "boolean", [[
    useReentrantLockWhenPutMessage
]], "rmq's store orders puts its own way")
tuning(BR, "string", [[
    dLegerGroup dLegerPeers dLegerSelfId
]], "rmq has no DLedger commit log; enableDLegerCommitLog can only be false")
tuning(BR, "string", [[
    brokerConfigPath
]], "rmq does not write UPDATE_BROKER_CONFIG changes to a file; put them in the conf")

feature(BR, "integer", 0, [[ filterServerNums ]], "rmq has no filter servers")
feature(BR, "string", "", [[ messageStorePlugIn ]], "rmq's store takes no plug-ins")
feature(BR, "boolean", false, [[ enableDLegerCommitLog ]], "rmq has no DLedger commit log")
feature(BR, "boolean", false, [[ fastFailIfNoBufferInStorePool ]],
    "rmq's staging buffer is always there (commitLogStagingBytes)")
feature(BR, "boolean", false, [[ enableConsumeQueueExt enableCalcFilterBitMap ]],
    "rmq has no consume queue extension or filter bitmap")
feature(BR, "boolean", false, [[ highSpeedMode ]], "rmq has no high speed mode")
feature(BR, "boolean", false, [[ diskFallRecorded ]], "rmq keeps no disk fall-behind statistics")
feature(BR, "boolean", false, [[ enableScheduleMessageStats ]], "rmq keeps no per-delay-level statistics")
feature(BR, "boolean", false, [[ debugLockEnable ]], "rmq has no lock debugging")
feature(BR, "boolean", false, [[ offsetCheckInSlave ]], "a slave does not check offsets against its master")
feature(BR, "boolean", false, [[ messageIndexSafe ]], "rmq's index recovery has no safe mode")
feature(BR, "boolean", false, [[ disableConsumeIfConsumerReadSlowly ]], "rmq does not throttle slow consumers")

-- }}}

--- The declared keys, in declaration order (help output lists them so).
--- Treat as read-only.
M.schema = schema

local by_name = {}
local all_names = {}
for _, e in ipairs(schema) do
    assert(by_name[e.name] == nil, "rmq.conf: key declared twice: " .. e.name)
    by_name[e.name] = e
    all_names[#all_names + 1] = e.name
end
table.sort(all_names)

local function applies(e, role)
    if e.roles[role] then
        return true
    end
    if role == "proxy" then
        return PROXY_SHARED[e.name] == true
    end
    if role == "controller" then
        return (e.roles.namesrv and e.roles.broker) or false
    end
    return role == "standalone" and (e.roles.namesrv or e.roles.broker) or false
end

--- The schema entry of `key` (a copy), or nil if no such key.
function M.describe(key)
    local e = by_name[key]
    if e == nil then
        return nil
    end
    local copy = {}
    for k, v in pairs(e) do
        copy[k] = v
    end
    return copy
end

-- TLS: the tls.* keys of 4.9.8's TlsSystemConfig are declared above.
-- Any other key starting with "tls" (tlsEnable, tls.config.file) is
-- refused with the list of those rmq takes.
local function is_tls_key(key)
    return type(key) == "string" and key:lower():sub(1, 3) == "tls"
end

-- The refusal of `value` (already type-checked) for entry e, or nil.
local function refusal_of(e, value)
    if e.noeffect then
        return ("key '%s' = %s has no effect in rmq; remove it (%s)")
            :format(e.name, literal(value), e.noeffect)
    end
    if e.refuse then
        local why, fix = e.refuse(value)
        if why then
            return ("key '%s' = %s is not supported%s: %s; %s")
                :format(e.name, literal(value), e.planned and " yet" or "", why, fix)
        end
    end
end

local function tls_refusal(key, value)
    local names = {}
    for _, e in ipairs(schema) do
        if e.name:sub(1, 4) == "tls." then
            names[#names + 1] = e.name
        end
    end
    local hint = did_you_mean(key, names)
    if key == "tls.config.file" then
        hint = " (rmq reads no tls.properties: put its keys in the conf)"
    end
    return ("key '%s' = %s is not supported: rmq's TLS keys are %s%s; remove it")
        :format(key, literal(value), table.concat(names, ", "), hint)
end

--- Why `value` cannot be given to `key` (one line), or nil when it can
--- or when the key is unknown (callers report that themselves). For
--- run-time updates (UPDATE_BROKER_CONFIG) as much as for load: a
--- refused behaviour must not be switched on later either. `value` is
--- typed (see coerce); a value of the wrong type is not judged here.
function M.refusal(key, value)
    if is_tls_key(key) and by_name[key] == nil then
        return tls_refusal(key, value)
    end
    local e = by_name[key]
    if e == nil then
        return nil
    end
    return refusal_of(e, value)
end

--- Whether `key` is one of the controller's own keys (CTL), which a
--- NameServer's conf uses only with enableControllerInNamesrv.
function M.controller_key(key)
    local e = by_name[key]
    return e ~= nil and e.roles.controller == true and e.roles.namesrv == true and not e.roles.broker
        and key ~= "scanNotActiveBrokerInterval"   -- the NameServer's own too
end

--- Sorted names of the keys a conf of `role` uses (ignored keys left out).
function M.keys_for_role(role)
    if not ROLE_SET[role] then
        error(("rmq.conf.keys_for_role: unknown role %s"):format(show(role)), 2)
    end
    local names = {}
    for _, e in ipairs(schema) do
        if not e.ignored and applies(e, role) then
            names[#names + 1] = e.name
        end
    end
    table.sort(names)
    return names
end

local TYPE_WORD = {
    integer = "an integer",
    number = "a number",
    boolean = "a boolean",
    string = "a string",
    table = "a table",
    policy = "a module name (string) or a function",
}

-- Check one value against its entry; returns the value (an integral
-- float becomes an integer) or nil, "key 'x' must ...".
local function validate(e, v)
    local t = e.type
    local ok
    if t == "integer" then
        if math.type(v) == "float" and math.tointeger(v) then
            v = math.tointeger(v)
        end
        ok = math.type(v) == "integer"
    elseif t == "policy" then
        ok = type(v) == "string" or type(v) == "function"
    else
        ok = type(v) == t
    end
    if not ok then
        return nil, ("key '%s' must be %s, got %s"):format(e.name, TYPE_WORD[t], show(v))
    end
    if e.enum then
        local found = false
        for _, allowed in ipairs(e.enum) do
            if v == allowed then
                found = true
                break
            end
        end
        if not found then
            return nil, ("key '%s' must be one of %s, got %s%s"):format(
                e.name, table.concat(e.enum, ", "), show(v), did_you_mean(v, e.enum))
        end
    end
    if (e.min and v < e.min) or (e.max and v > e.max) then
        if e.min and e.max then
            return nil, ("key '%s' must be between %d and %d, got %d"):format(e.name, e.min, e.max, v)
        elseif e.min then
            return nil, ("key '%s' must be >= %d, got %d"):format(e.name, e.min, v)
        end
        return nil, ("key '%s' must be <= %d, got %d"):format(e.name, e.max, v)
    end
    if e.check and (type(v) == "string" or e.type == "table") then
        local why = e.check(v)
        if why then
            return nil, ("key '%s' %s"):format(e.name, why)
        end
    end
    return v
end

--- Turn the text form of a value (a --KEY=VALUE override, a line of
--- UPDATE_BROKER_CONFIG's properties body) into the key's type.
--- Returns value or nil, err. Integers are parsed strictly (decimal, no
--- fraction, no overflow); booleans are "true" / "false", any case.
--- The result is not yet range- or enum-checked: load() does that.
function M.coerce(key, text)
    if type(key) ~= "string" or type(text) ~= "string" then
        error("rmq.conf.coerce: expected (key, text) strings", 2)
    end
    local e = by_name[key]
    if e == nil then
        return nil, ("unknown key '%s'%s"):format(key, did_you_mean(key, all_names))
    end
    local t = e.type
    local trimmed = strings.trim(text)
    if t == "integer" then
        local v = trimmed:match("^[+-]?%d+$") and math.tointeger(tonumber(trimmed))
        if v then
            return v
        end
    elseif t == "number" then
        local v = tonumber(trimmed)
        if v and v == v and v ~= math.huge and v ~= -math.huge then
            return v
        end
    elseif t == "boolean" then
        local l = trimmed:lower()
        if l == "true" then
            return true
        elseif l == "false" then
            return false
        end
    elseif t == "string" then
        return text
    elseif t == "policy" then
        return trimmed
    else
        return nil, ("key '%s' is a %s and cannot be set from text"):format(key, t)
    end
    return nil, ("key '%s' must be %s, got %s"):format(key, TYPE_WORD[t], show(text))
end

-- {{{ Loading

local SAFE_GLOBALS = {
    "pairs", "ipairs", "next", "tostring", "tonumber", "type", "select",
    "error", "assert", "pcall", "xpcall", "require",
}

local function shallow_copy(t)
    local c = {}
    for k, v in pairs(t) do
        c[k] = v
    end
    return c
end

-- A fresh environment per load. Library tables are copies, so a conf that
-- assigns string.format = nil breaks only itself.
local function new_env()
    local env = {}
    for _, name in ipairs(SAFE_GLOBALS) do
        env[name] = _G[name]
    end
    env.string = shallow_copy(string)
    env.table = shallow_copy(table)
    env.math = shallow_copy(math)
    env.utf8 = shallow_copy(utf8)
    env.os = { getenv = os.getenv, time = os.time, date = os.date, clock = os.clock }
    -- stdout belongs to the READY line; a conf's prints go to stderr.
    env.print = function(...)
        local n = select("#", ...)
        local parts = {}
        for i = 1, n do
            parts[i] = tostring((select(i, ...)))
        end
        io.stderr:write(table.concat(parts, "\t"), "\n")
    end
    return env
end

-- Run the conf file; returns its table or nil, "path: ..." (one line).
local function run_file(path)
    local f, open_err = io.open(path, "r")
    if not f then
        return nil, first_line(open_err)            -- "path: No such file or directory"
    end
    f:close()
    local env = new_env()
    local before = {}
    for k in pairs(env) do
        before[k] = true
    end
    local chunk, load_err = loadfile(path, "t", env)
    if not chunk then
        -- Already "path:line: message"; keep the first line.
        local msg = first_line(load_err)
        if msg:sub(1, #path) ~= path then
            msg = path .. ": " .. msg
        end
        return nil, msg
    end
    local ok, result = pcall(chunk)
    if not ok then
        local msg = first_line(result)
        if msg:sub(1, #path) ~= path then
            msg = path .. ": " .. msg
        end
        return nil, msg
    end
    if type(result) ~= "table" then
        -- The usual cause: a RocketMQ properties habit, `listenPort = 10911`
        -- at top level, which Lua reads as global assignments.
        local set = {}
        for _, k in ipairs(sorted_keys(env)) do
            if not before[k] and type(k) == "string" then
                set[#set + 1] = k
            end
        end
        local hint = ""
        if #set > 0 then
            if #set > 4 then
                set = { set[1], set[2], set[3], set[4], "..." }
            end
            hint = (" (it sets globals %s: put them in `return { ... }`)"):format(table.concat(set, ", "))
        end
        return nil, ("%s: must return a table, got %s%s"):format(path, show(result), hint)
    end
    return result
end

--- Load a conf file.
--- @param path string the conf file
--- @param overrides table|nil list of "KEY=VALUE" strings (a leading "--"
---   is tolerated); they win over the file
--- @return table conf, table warnings  on success: every key of the role
---   with its default filled in, conf.role, conf._path; warnings is a list
---   of one-line strings (possibly empty)
--- @return nil, string  on a bad conf: one line naming the file
function M.load(path, overrides)
    if type(path) ~= "string" then
        error(("rmq.conf.load: path must be a string, got %s"):format(show(path)), 2)
    end
    if overrides ~= nil and type(overrides) ~= "table" then
        error(("rmq.conf.load: overrides must be a list of strings, got %s"):format(show(overrides)), 2)
    end
    for i, o in ipairs(overrides or {}) do
        if type(o) ~= "string" then
            error(("rmq.conf.load: override #%d must be a string, got %s"):format(i, show(o)), 2)
        end
    end

    local function fail(msg)
        return nil, path .. ": " .. msg
    end

    local file_table, err = run_file(path)
    if not file_table then
        return nil, err
    end

    -- Keys first: a typo is the likeliest mistake and the most useful to
    -- report, before any type error it may have caused downstream.
    local raw = {}
    for _, k in ipairs(sorted_keys(file_table)) do
        if type(k) ~= "string" then
            return fail(("key %s is not a name: write `name = value`"):format(show(k)))
        end
        if by_name[k] == nil then
            if is_tls_key(k) then
                return fail(tls_refusal(k, file_table[k]))
            end
            return fail(("unknown key '%s'%s"):format(k, did_you_mean(k, all_names)))
        end
        raw[k] = file_table[k]
    end

    for _, o in ipairs(overrides or {}) do
        local body = o:gsub("^%-%-", "")
        local k, text = body:match("^([^=]+)=(.*)$")
        if k == nil then
            return fail(("override '%s': expected KEY=VALUE"):format(o))
        end
        if is_tls_key(k) and by_name[k] == nil then
            -- Undeclared, so untyped: show true / 8 as a conf writes them.
            local l = text:lower()
            local shown = (l == "true" or l == "false") and (l == "true")
                or (text:match("^%-?%d+$") and math.tointeger(tonumber(text))) or text
            return fail(("override '%s': %s"):format(o, tls_refusal(k, shown)))
        end
        local v, cerr = M.coerce(k, text)
        if v == nil then
            return fail(("override '%s': %s"):format(o, cerr))
        end
        raw[k] = v
    end

    local role = raw.role
    if role == nil then
        return fail("missing key 'role' (one of namesrv, broker, standalone, controller)")
    end
    local _, rerr = validate(by_name.role, role)
    if rerr then
        return fail(rerr)
    end

    local warnings = {}
    local function warn(msg)
        warnings[#warnings + 1] = path .. ": " .. msg
    end

    local conf = {}
    for _, k in ipairs(sorted_keys(raw)) do
        local e = by_name[k]
        if not applies(e, role) and role == "proxy" then
            -- A proxy keeps no broker or NameServer state: such a key
            -- there is a mistake (a broker's conf given to a proxy).
            return fail(("key '%s' is not a proxy's (role proxy takes the gRPC, socket and process keys:"
                .. " docs/grpc.md, \"Cluster mode\")"):format(k))
        elseif not applies(e, role) then
            warn(("key '%s' has no effect for role %s"):format(k, role))
        elseif e.ignored then
            local v, verr = validate(e, raw[k])
            if v == nil then
                return fail(verr)
            end
            local refused = refusal_of(e, v)
            if refused then
                return fail(refused)
            end
            conf[k] = v  -- the value that means what rmq does anyway
        end
    end

    -- Values and defaults in declaration order, so a derived default sees
    -- the settled values it derives from.
    for _, e in ipairs(schema) do
        if not e.ignored and applies(e, role) then
            local v = raw[e.name]
            local defaulted = v == nil
            if v == nil then
                if e.default_by_role and e.default_by_role[role] ~= nil then
                    v = e.default_by_role[role]
                elseif type(e.default) == "function" then
                    local derr
                    v, derr = e.default(conf, role)
                    if v == nil and derr then
                        return fail(("key '%s': %s"):format(e.name, derr))
                    end
                else
                    v = e.default
                end
            end
            if v ~= nil then
                local verr
                v, verr = validate(e, v)
                if v == nil then
                    if defaulted then
                        -- A derived default gone wrong (listenPort 65535
                        -- makes haListenPort 65536): say where it came from.
                        verr = verr .. " (its default, derived from other keys: set it explicitly)"
                    end
                    return fail(verr)
                end
                -- Defaults are rmq's own behaviour; only a given value
                -- can ask for one rmq lacks.
                local refused = not defaulted and refusal_of(e, v)
                if refused then
                    return fail(refused)
                end
                if e.path then
                    local perr
                    v, perr = expand(v)
                    if v == nil then
                        return fail(("key '%s': %s"):format(e.name, perr))
                    end
                end
                if e.normalize then
                    local nerr, notes
                    v, nerr, notes = e.normalize(v, role)
                    if v == nil then
                        return fail(nerr)
                    end
                    for _, note in ipairs(notes or {}) do
                        warn(note)
                    end
                end
            end
            conf[e.name] = v
        end
    end

    -- The live console: a root prompt into the server.  On TCP any local
    -- user reaches a loopback address too, so every TCP console needs a
    -- password; a unix socket checks its peer's uid (l_console.c).
    if conf.console ~= nil then
        if conf.console == "unix" and role == "namesrv" then
            return fail("key 'console' = \"unix\" needs a store directory (a broker's):"
                .. " give a socket path or a HOST:PORT with consolePassword")
        end
        local host = conf.console:match("^%[?([^%]]*)%]?:%d+$")
        if host ~= nil and not conf.console:match("^unix:") and conf.consolePassword == nil then
            return fail(("key 'console' = %q is a TCP address: set consolePassword too (any user of a host"
                .. " that reaches it, this one included, would run Lua in the server), or use \"unix\""):format(
                conf.console))
        end
    end
    if conf.consolePassword == "" then
        return fail("key 'consolePassword' is empty: give a password, or remove the key")
    end
    -- The web console's writes, by the same rule: POST /api/send on an
    -- endpoint other hosts reach needs consolePassword.
    local mhost = conf.metricsPromExporterHost
    local broker_side = role == "broker" or role == "standalone"
    if broker_side and conf.consoleWriteEnable and conf.metricsExporterType == "PROM"
        and conf.consolePassword == nil
        and not (mhost:match("^127%.%d+%.%d+%.%d+$") or mhost == "::1" or mhost == "localhost") then
        return fail(("key 'consoleWriteEnable' = true with metricsPromExporterHost %q (not a loopback address):"
            .. " set consolePassword too (POST /api/send then needs it), or bind it to 127.0.0.1"):format(mhost))
    end
    if role == "proxy" then
        if conf.namesrvAddr == nil then
            return fail("a proxy needs namesrvAddr (or $NAMESRV_ADDR): the NameServers it finds brokers from")
        end
        if conf.grpcServerPort < 0 then
            return fail("a proxy serves gRPC: grpcServerPort must be 0 (any free port) or a port")
        end
        if conf.grpcMaxConnectionBufferBytes < conf.grpcMaxInboundMessageSize + 5 then
            return fail("key 'grpcMaxConnectionBufferBytes' must be at least grpcMaxInboundMessageSize + 5"
                .. " (one whole message with its gRPC prefix)")
        end
    end
    -- TLS: a mode that needs a certificate has one; half a setting fails.
    local cert, key = conf["tls.server.certPath"], conf["tls.server.keyPath"]
    if (cert == nil) ~= (key == nil) then
        return fail("keys 'tls.server.certPath' and 'tls.server.keyPath' go together: set both or neither")
    end
    if conf["tls.server.mode"] == "enforcing" and cert == nil then
        return fail("key 'tls.server.mode' = \"enforcing\" needs tls.server.certPath and tls.server.keyPath"
            .. " (rmq has no self-signed test mode)")
    end
    if conf["tls.server.authClient"] and conf["tls.server.need.client.auth"] == "none" then
        return fail("key 'tls.server.authClient' = true checks client certificates, but"
            .. " tls.server.need.client.auth = \"none\" never asks for one: set it to \"optional\" or \"require\"")
    end
    if (conf["tls.client.certPath"] == nil) ~= (conf["tls.client.keyPath"] == nil) then
        return fail("keys 'tls.client.certPath' and 'tls.client.keyPath' go together: set both or neither")
    end
    if role == "standalone" and conf["tls.server.mode"] == "enforcing" and not conf["tls.enable"] then
        warn("tls.server.mode enforcing without tls.enable: the broker cannot register with its own"
            .. " NameServer over plaintext; set [\"tls.enable\"] = true")
    end
    -- A standalone's own NameServer checks ACL too: unsigned, the broker's
    -- registrations are refused ("No accessKey is configured").
    if role == "standalone" and conf.aclEnable and conf.accessKey == nil and conf.namesrvListenPort ~= 0 then
        warn("aclEnable without accessKey/secretKey: the broker cannot register with its own NameServer"
            .. " (refused: \"No accessKey is configured\") unless 127.0.0.1 is in globalWhiteRemoteAddresses;"
            .. " set accessKey and secretKey to an admin account of plain_acl.yml")
    end
    if broker_side and conf.grpcServerPort >= 0 then
        if conf.grpcMaxConnectionBufferBytes < conf.grpcMaxInboundMessageSize + 5 then
            return fail("key 'grpcMaxConnectionBufferBytes' must be at least grpcMaxInboundMessageSize + 5"
                .. " (one whole message with its gRPC prefix)")
        end
    end
    -- Rules across keys, as BrokerStartup applies them.
    if broker_side then
        if (conf.accessKey == nil) ~= (conf.secretKey == nil) then
            return fail(conf.accessKey and "key 'accessKey' needs secretKey too (the broker signs with both)"
                or "key 'secretKey' needs accessKey too (the broker signs with both)")
        end
        if (conf.consoleAccessKey == nil) ~= (conf.consoleSecretKey == nil) then
            return fail(conf.consoleAccessKey
                and "key 'consoleAccessKey' needs consoleSecretKey too (the web console signs with both)"
                or "key 'consoleSecretKey' needs consoleAccessKey too (the web console signs with both)")
        end
        if conf.brokerRole == "SLAVE" then
            if conf.brokerId == 0 then
                return fail("brokerRole SLAVE needs brokerId > 0 (0 is the master's id)")
            end
        elseif conf.brokerId ~= 0 then
            warn(("brokerId %d ignored: a master (brokerRole %s) always has brokerId 0")
                :format(conf.brokerId, conf.brokerRole))
            conf.brokerId = 0
        end
        if role == "broker" and conf.namesrvAddr == nil and not conf.fetchNamesrvAddrByAddressServer then
            warn("namesrvAddr is not set (nor $NAMESRV_ADDR): this broker will register with no NameServer")
        end
        -- Ports the broker takes: listenPort, listenPort-2 (VIP), haListenPort.
        local lp, hp = conf.listenPort, conf.haListenPort
        if lp ~= 0 and lp < 3 then
            return fail(("key 'listenPort' must be 0 or >= 3 for a broker"
                .. " (it also listens on listenPort-2), got %d")
                :format(lp))
        end
        if hp ~= 0 and lp ~= 0 and (hp == lp or hp == lp - 2) then
            return fail(("key 'haListenPort' %d collides with listenPort %d or its VIP port %d")
                :format(hp, lp, lp - 2))
        end
        local np = conf.namesrvListenPort
        if role == "standalone" and np ~= 0 and (np == lp or np == lp - 2 or np == hp) then
            return fail(("key 'namesrvListenPort' %d collides with the broker's ports"
                .. " (listenPort %d, VIP %d, HA %d)")
                :format(np, lp, lp - 2, hp))
        end
    end

    if broker_side and conf.enableControllerMode and conf.controllerAddr == nil then
        return fail("enableControllerMode needs key 'controllerAddr' (the controllers' addresses)")
    end
    if role == "controller" and conf.etcdEndpoints == nil then
        return fail("role controller needs key 'etcdEndpoints' (its state lives in etcd: docs/controller.md)")
    end
    if conf.enableControllerInNamesrv then
        if role ~= "namesrv" then
            return fail("key 'enableControllerInNamesrv' = true needs role namesrv (a standalone's NameServer"
                .. " does not embed the controller: run role = \"namesrv\" or \"controller\" beside it)")
        end
        if conf.etcdEndpoints == nil then
            return fail("enableControllerInNamesrv needs key 'etcdEndpoints' (the controller's state lives in etcd:"
                .. " docs/controller.md)")
        end
        if conf.controllerListenPort ~= 0 and conf.controllerListenPort == conf.listenPort then
            return fail(("key 'controllerListenPort' %d is the NameServer's listenPort: give the controller"
                .. " a port of its own"):format(conf.controllerListenPort))
        end
    elseif role == "namesrv" or role == "standalone" then
        -- 5.x reads ControllerConfig only with the switch on.
        for _, k in ipairs(sorted_keys(raw)) do
            if M.controller_key(k) or k == "controllerListenPort" then
                warn(("key '%s' has no effect without enableControllerInNamesrv = true"):format(k))
            end
        end
    end
    if role == "controller" or conf.enableControllerInNamesrv then
        -- Its heartbeat table lives in one Lua state (docs/controller.md).
        if conf.workers ~= 0 and conf.workers ~= 1 then
            warn(("workers %d ignored: a controller runs one worker (an embedding NameServer too)")
                :format(conf.workers))
        end
        conf.workers = 1
    end

    conf.role = role
    conf._path = path
    return conf, warnings
end

-- }}}

return M
