-- rmq.acl.plain: plain_acl.yml (RocketMQ ACL 1.0's PlainPermissionManager
-- @4.9.8): read it, check it, build the account table the C check uses
-- (rmq.acl, src/acl/acl.h), publish it to every worker, reload it when
-- the file changes, and write it back for the ACL admin requests.
--
--   plain.set_conf_path(path)   the conf file this process runs (aclFile's
--                            default is beside it without rocketmqHome)
--   plain.path(conf) -> path    aclFile, or its default
--   plain.read(conf) -> data | nil, err    the file as YAML data
--   plain.build(conf, data) -> table | nil, err
--   plain.reload(conf) -> true | nil, err  read + build + publish
--   plain.write(conf, data) -> true | nil, err   bump dataVersion, write
--                                          atomically (temp + rename), reload
--   plain.main_init(conf)    main thread, before the workers: the first
--                            load (an unreadable or broken file refuses
--                            the start; a missing one is created empty)
--   plain.main_start(conf) / main_stop()   the file watch (a stat every
--                            aclReloadIntervalMillis; a change is loaded
--                            once it has held for a whole interval since
--                            first seen)
--   plain.worker_install(conf, listeners)  every listener of this worker
--                            checks its requests (listeners: the plan's)
--
-- data: { globalWhiteRemoteAddresses = {pattern...},
--         accounts = { {accessKey=, secretKey=, whiteRemoteAddress=,
--                       admin=, defaultTopicPerm=, defaultGroupPerm=,
--                       topicPerms={...}, groupPerms={...}}, ... },
--         dataVersion = { {counter=, timestamp=} } }
-- A file that fails to parse or check keeps the table in force and is
-- logged with what is wrong (YAML errors with line and column).
local cacl = require("rmq.acl")
local store = require("rmq.store")
local core = require("rmq.core")
local log = require("rmq.log")

local M = {}

local NULL = cacl.NULL

local conf_path

function M.set_conf_path(path)
    conf_path = path
end

--- aclFile, or its default: 4.9.8's ${ROCKETMQ_HOME}/conf/plain_acl.yml,
--- or plain_acl.yml beside the conf file when there is no rocketmqHome.
function M.path(conf)
    if conf.aclFile then
        return conf.aclFile
    end
    if conf.rocketmqHome then
        return conf.rocketmqHome .. "/conf/plain_acl.yml"
    end
    local dir = (conf_path or ""):match("^(.*)/[^/]*$") or "."
    return dir .. "/plain_acl.yml"
end

local function slurp(path, max)
    local f, err = io.open(path, "rb")
    if not f then
        return nil, err
    end
    local size = f:seek("end")
    if size and size > max then
        f:close()
        return nil, ("%s is %d bytes, over aclMaxFileBytes (%d)"):format(path, size, max)
    end
    f:seek("set")
    local text = f:read("a")
    f:close()
    if text == nil then
        return nil, "cannot read " .. path
    end
    if #text > max then
        return nil, ("%s is over aclMaxFileBytes (%d)"):format(path, max)
    end
    return text
end

--- The file's YAML data ({} for an empty file).
function M.read(conf)
    local path = M.path(conf)
    local text, err = slurp(path, conf.aclMaxFileBytes)
    if not text then
        return nil, err
    end
    -- Bounded: a node per byte at most.
    local data, yerr = cacl.yaml_decode(text, #text + 16)
    if data == nil then
        return nil, path .. ": " .. yerr
    end
    if data == NULL then
        return {}
    end
    if type(data) ~= "table" then
        return nil, path .. ": the file must be a mapping (globalWhiteRemoteAddresses, accounts)"
    end
    return data
end

-- A YAML scalar as text (YAML 1.1 resolves 12345678 to a number, fastjson
-- hands it to PlainAccessConfig as its text), nil for absent / null.
local function text(v)
    if v == nil or v == NULL then
        return nil
    end
    if type(v) == "boolean" then
        return tostring(v)
    end
    return v
end

local function list(v, what)
    if v == nil or v == NULL then
        return {}
    end
    if type(v) ~= "table" then
        return nil, what .. " must be a list"
    end
    for i, e in ipairs(v) do
        if type(e) ~= "string" then
            return nil, ("%s[%d] must be a string"):format(what, i)
        end
    end
    return v
end

--- Builds the account table of data.
function M.build(conf, data)
    local t = cacl.table()
    local whites, err = list(data.globalWhiteRemoteAddresses, "globalWhiteRemoteAddresses")
    if not whites then
        return nil, err
    end
    for i, p in ipairs(whites) do
        local ok, werr = t:white(p)
        if not ok then
            return nil, ("globalWhiteRemoteAddresses[%d]: %s"):format(i, werr)
        end
    end
    local accounts = data.accounts
    if accounts == nil or accounts == NULL then
        accounts = {}
    end
    if type(accounts) ~= "table" then
        return nil, "accounts must be a list"
    end
    if #accounts > conf.aclMaxAccounts then
        return nil, ("%d accounts, over aclMaxAccounts (%d)"):format(#accounts, conf.aclMaxAccounts)
    end
    local perms = 0
    for i, a in ipairs(accounts) do
        local where = ("accounts[%d]"):format(i)
        if type(a) ~= "table" then
            return nil, where .. " must be a mapping"
        end
        local tp, terr = list(a.topicPerms, where .. ".topicPerms")
        if not tp then
            return nil, terr
        end
        local gp, gerr = list(a.groupPerms, where .. ".groupPerms")
        if not gp then
            return nil, gerr
        end
        perms = perms + #tp + #gp
        if perms > conf.aclMaxResourcePerms then
            return nil, ("over aclMaxResourcePerms (%d) topicPerms + groupPerms entries"):format(
                conf.aclMaxResourcePerms)
        end
        local admin = a.admin
        if type(admin) == "string" then
            admin = admin:lower() == "true"
        end
        local spec = {
            accessKey = text(a.accessKey), secretKey = text(a.secretKey),
            whiteRemoteAddress = text(a.whiteRemoteAddress), admin = admin == true,
            defaultTopicPerm = text(a.defaultTopicPerm), defaultGroupPerm = text(a.defaultGroupPerm),
            topicPerms = tp, groupPerms = gp,
        }
        for _, k in ipairs({ "accessKey", "secretKey", "whiteRemoteAddress", "defaultTopicPerm",
                             "defaultGroupPerm" }) do
            if spec[k] ~= nil and type(spec[k]) ~= "string" then
                return nil, ("%s.%s must be a string"):format(where, k)
            end
        end
        local ok, aerr = t:account(spec)
        if not ok then
            return nil, ("%s: %s"):format(where, aerr)
        end
    end
    return t
end

-- stamp: the file's stamp (l_acl.c: inode, size, mtime) when it was last
-- read; pending: a stamp the watch saw that differs from it, loaded once
-- the next tick sees it again (see main_start).
-- pending: a new stamp seen by the watch, pending_ms: when first seen.
-- again: a one-off look once a pending stamp has held for an interval.
local state = { stamp = nil, pending = nil, pending_ms = nil, timer = nil, again = nil }

-- A file that cannot be stat'ed (gone) has a stamp too: it is a change
-- like another, seen twice before it is acted on.
local function stamp_of(path)
    return cacl.file_stamp(path) or "(none)"
end

-- Reads, builds and publishes the file (the old table stays on failure),
-- unless it changed while it was read (a writer at work), or is not the
-- stamp want (when given: the one the watch saw hold): then nothing is
-- done and the third value is true.
local function load(conf, want)
    local path = M.path(conf)
    local stamp = stamp_of(path)
    if want ~= nil and stamp ~= want then
        return nil, "changed since checked", true
    end
    local data, err = M.read(conf)
    local t
    if data then
        t, err = M.build(conf, data)
    end
    if stamp_of(path) ~= stamp then
        return nil, "changed while read", true
    end
    state.stamp = stamp
    state.pending, state.pending_ms = nil, nil
    if not t then
        return nil, err
    end
    cacl.publish(t)
    log.info("ACL: %s loaded: %d accounts", path, t:count())
    return true
end

-- reload's pause between reads that raced a writer, and how long it
-- tries: at least RELOAD_MIN_MS, else aclReloadIntervalMillis (a writer
-- slower than that is slower than the watch would wait for, too).
local RELOAD_PAUSE_MS, RELOAD_MIN_MS = 50, 2000

--- Reads, builds and publishes the file; the old table stays on failure.
-- A file that changed while read is read again after a pause, for as long
-- as RELOAD_MIN_MS / aclReloadIntervalMillis: a slow writer (a large file,
-- an editor writing in place) gets time to finish rather than a fixed
-- count of back-to-back reads.
function M.reload(conf)
    local net = require("rmq.net")
    local t0 = core.mono_ms()
    local budget = math.max(RELOAD_MIN_MS, conf.aclReloadIntervalMillis or 0)
    while true do
        local ok, err, moving = load(conf)
        if not moving then
            return ok, err
        end
        if core.mono_ms() - t0 >= budget then
            break
        end
        -- Outside a task inside the loop (a C callback) it cannot wait:
        -- it then reads again at once, still bounded by the time.
        pcall(net.sleep, RELOAD_PAUSE_MS)
    end
    return nil, ("%s changed at every read for %d ms"):format(M.path(conf), budget)
end

-- {{{ Writing (SnakeYAML's dumpAsMap shape: block style)

-- Double-quoted, every byte outside printable ASCII escaped (\xXX for
-- controls, \uXXXX / \UXXXXXXXX for the rest): YAML folds some raw
-- characters (NEL, LS, PS are line breaks to it), escapes survive a read.
-- s must be valid UTF-8 (check_utf8).
local function quote(s)
    local out = {}
    for _, cp in utf8.codes(s) do
        if cp == 34 then
            out[#out + 1] = '\\"'
        elseif cp == 92 then
            out[#out + 1] = "\\\\"
        elseif cp < 32 or cp == 127 then
            out[#out + 1] = ("\\x%02x"):format(cp)
        elseif cp < 127 then
            out[#out + 1] = string.char(cp)
        elseif cp <= 0xFFFF then
            out[#out + 1] = ("\\u%04x"):format(cp)
        else
            out[#out + 1] = ("\\U%08x"):format(cp)
        end
    end
    return '"' .. table.concat(out) .. '"'
end

local function scalar(v)
    if type(v) == "boolean" then
        return tostring(v)
    elseif math.type(v) == "integer" then
        return tostring(v)
    end
    return quote(tostring(v))
end

local ACCOUNT_KEYS = { "accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
                       "defaultGroupPerm", "topicPerms", "groupPerms" }

-- scalar_of: how a value is written (scalar; canonical() for comparing).
local function emit(data, scalar_of)
    local sc = scalar_of or scalar
    local out = {}
    local function add(s) out[#out + 1] = s end
    local whites = data.globalWhiteRemoteAddresses
    if type(whites) == "table" then
        add("globalWhiteRemoteAddresses:\n")
        for _, w in ipairs(whites) do
            add("- " .. sc(w) .. "\n")
        end
    end
    if type(data.accounts) == "table" then
        add("accounts:\n")
        for _, a in ipairs(data.accounts) do
            local first = true
            for _, k in ipairs(ACCOUNT_KEYS) do
                local v = a[k]
                if v ~= nil and v ~= NULL then
                    add((first and "- " or "  ") .. k .. ":")
                    first = false
                    if type(v) == "table" then
                        add("\n")
                        for _, e in ipairs(v) do
                            add("  - " .. sc(e) .. "\n")
                        end
                    else
                        add(" " .. sc(v) .. "\n")
                    end
                end
            end
            if first then
                add("- {}\n")
            end
        end
    end
    if type(data.dataVersion) == "table" then
        add("dataVersion:\n")
        for _, dv in ipairs(data.dataVersion) do
            add("- counter: " .. sc(dv.counter) .. "\n")
            add("  timestamp: " .. sc(dv.timestamp) .. "\n")
        end
    end
    return table.concat(out)
end

M.emit = emit

-- updateAclConfigFileVersion: counter + 1, timestamp now.
local function next_version(data)
    local dv = type(data.dataVersion) == "table" and data.dataVersion[1] or nil
    local counter = dv and math.tointeger(tonumber(dv.counter)) or 0
    data.dataVersion = { { counter = counter + 1, timestamp = core.now_ms() } }
end

-- Every string of data is valid UTF-8 (YAML reads nothing else): nil or
-- what is not.
local function check_utf8(data)
    local function bad(v, where)
        if type(v) == "string" and not utf8.len(v) then
            return where .. " is not valid UTF-8"
        end
    end
    for i, w in ipairs(type(data.globalWhiteRemoteAddresses) == "table" and data.globalWhiteRemoteAddresses or {}) do
        local e = bad(w, ("globalWhiteRemoteAddresses[%d]"):format(i))
        if e then return e end
    end
    for i, a in ipairs(type(data.accounts) == "table" and data.accounts or {}) do
        for _, k in ipairs(ACCOUNT_KEYS) do
            local v = a[k]
            local where = ("accounts[%d].%s"):format(i, k)
            if type(v) == "table" then
                for j, e in ipairs(v) do
                    local err = bad(e, ("%s[%d]"):format(where, j))
                    if err then return err end
                end
            else
                local err = bad(v, where)
                if err then return err end
            end
        end
    end
end

-- Values as the check reads them (YAML gives 12345678 and true as the
-- text fastjson hands on), for comparing what is meant with what is read.
local function canonical(v)
    return ("%q"):format(tostring(v))
end

-- The lock acl_admin's changes hold (one change at a time across the
-- workers); the main thread's reload takes it too, so a reload that read
-- the previous file never publishes after a change's table.
local LOCK = require("rmq.shared").map("acl.admin")
M.LOCK = LOCK

--- Writes data (checked first: a change that would not load, or that
--- would not read back as it is, is refused and the file is left alone)
--- and loads what was written.  Callers hold LOCK.
function M.write(conf, data)
    local t, err = M.build(conf, data)
    if not t then
        return nil, err
    end
    err = check_utf8(data)
    if err then
        return nil, err
    end
    next_version(data)
    local out = emit(data)
    -- What the next start reads is what is published.
    local back, berr = cacl.yaml_decode(out, #out + 16)
    if back == nil or back == NULL or emit(back, canonical) ~= emit(data, canonical) then
        return nil, "the change does not read back as written" .. (berr and (": " .. berr) or "")
    end
    t, err = M.build(conf, back)
    if not t then
        return nil, err
    end
    -- 0600 for a new file; an existing one keeps its mode (4.9.8 writes
    -- in place).
    local ok, werr = store.atomic_write(M.path(conf), out, 384)
    if not ok then
        return nil, werr
    end
    state.stamp = stamp_of(M.path(conf))
    state.pending, state.pending_ms = nil, nil
    cacl.publish(t)
    log.info("ACL: %s written: %d accounts", M.path(conf), t:count())
    return true
end

-- }}}

function M.main_init(conf)
    if not conf.aclEnable then
        return
    end
    local path = M.path(conf)
    if not cacl.file_stamp(path) then
        -- assureAclConfigFilesExist: an empty file, so an operator sees
        -- where the accounts go.
        -- 0600: it will hold secrets.
        local ok, err = store.atomic_write(path, "", 384)
        if not ok then
            error(("aclEnable: cannot create %s: %s"):format(path, err), 0)
        end
        log.warn("ACL: %s did not exist: created empty; every request is refused until it has accounts", path)
    end
    local ok, err = M.reload(conf)
    if not ok then
        error("aclEnable: " .. err, 0)
    end
end

function M.main_start(conf)
    if not conf.aclEnable then
        return
    end
    local net = require("rmq.net")
    local every = conf.aclReloadIntervalMillis
    local function check()
        -- Before the stat: with the time taken after the stat that first
        -- saw the stamp, the two stats are at least `now - pending_ms`
        -- apart however late either ran.
        local now = core.mono_ms()
        local stamp = stamp_of(M.path(conf))
        if stamp == state.stamp then
            state.pending, state.pending_ms = nil, nil
            return
        end
        -- A changed file is loaded once its stamp has held for a whole
        -- interval since first seen: an editor writing in place
        -- (truncate, then write) may be half-way, and a prefix that
        -- parses (the accounts before the one being added) was loaded
        -- once, for a tick, without it.  Measured in time, not counted
        -- in ticks: a tick that ran late (a loaded machine) is followed
        -- by one less than an interval after it.
        -- 4.9.8 and 5.x load at the first tick that sees a new MD5.
        if stamp ~= state.pending then
            state.pending, state.pending_ms = stamp, core.mono_ms()
            return
        end
        local left = every - (now - state.pending_ms)
        if left > 0 then
            -- A tick a little early (the one before ran late): looked at
            -- again once the interval is up, not a whole tick later.
            if state.again == nil then
                state.again = net.timer(math.ceil(left), 0, function()
                    if state.again ~= nil then
                        state.again:stop()
                        state.again = nil
                        check()
                    end
                end)
            end
            return
        end
        -- A change is being written: its table is published with it;
        -- look again next tick.
        if not LOCK:set("lock", "main", true) then
            return
        end
        local pok, ok, err, moving = pcall(load, conf, stamp)
        LOCK:del("lock")
        if not pok then
            ok, err = nil, ok
        end
        if moving then
            -- written since or while read: it must hold for an interval again
            state.pending, state.pending_ms = nil, nil
        elseif not ok then
            log.error("ACL: %s not reloaded, the previous accounts stay: %s", M.path(conf), err)
        end
    end
    state.timer = net.timer(every, every, check)
end

function M.main_stop()
    if state.again then
        state.again:stop()
        state.again = nil
    end
    if state.timer then
        state.timer:stop()
        state.timer = nil
    end
end

function M.worker_install(conf, listeners)
    if not conf.aclEnable then
        return
    end
    for i, l in ipairs(listeners) do
        -- the gRPC listener's calls are checked by src/grpc (their
        -- authorization header) before their requests reach the broker
        cacl.install(i - 1, l.protocol == "grpc" and "none" or l.role)
    end
end

return M
