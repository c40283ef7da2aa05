-- rmq.configfile: the broker's STORE/config/*.json files (topics.json,
-- subscriptionGroup.json, consumerOffset.json, delayOffset.json), read
-- and written the way RocketMQ's ConfigManager does, so a store moves
-- between rmq and a Java broker with its configuration.
--
--   local configfile = require "rmq.configfile"
--   local t, err = configfile.read(store_dir .. "/config/consumerOffset.json")
--   local ok, err = configfile.write(path, json_text)
--
-- read() accepts fastjson's output, bare numeric map keys included
-- ({0:25,1:25} in consumerOffset.json): it decodes with rmq.fastjson.
-- Like ConfigManager.load it falls back to PATH.bak when PATH is missing,
-- empty or unreadable, and returns nil (no error) when neither exists: a
-- new store has no config yet.
--
-- write() is atomic (rmq.store.atomic_write: a temp file, fsync, the
-- previous version kept as PATH.bak, rename, fsync of the directory): a
-- crash leaves the old file or the new one, never a torn one.  The JSON
-- text itself is the caller's (the broker produces it).
--
-- The large tables (topics, subscription groups) are saved through a
-- journal (journaled()): a change appends its configs to PATH.journal,
-- each batch closed by the table's DataVersion, instead of rewriting a
-- file of 20,000 topics; PATH is rewritten (and the journal dropped)
-- after a removal, once the journal holds more than an eighth of the
-- table, and at shutdown, so a cleanly stopped store is exactly what a
-- Java broker writes.  At load, a batch is applied only when its
-- DataVersion is newer than PATH's (PATH may already hold it: a crash
-- between the rewrite and dropping the journal) and complete (a torn
-- batch was never acknowledged).
local store = require "rmq.store"
local fastjson = require "rmq.fastjson"

local M = {}

local function slurp(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("a")
    f:close()
    return s
end

local function decode(path)
    local text = slurp(path)
    if text == nil or not text:find("%S") then
        return nil, path .. ": missing or empty"
    end
    local t, err = fastjson.decode(text)
    if t == nil then
        return nil, path .. ": " .. err
    end
    if type(t) ~= "table" then
        return nil, path .. ": not a JSON object"
    end
    return t
end

--- Reads a config file: the table, or nil when neither PATH nor
--- PATH.bak exists, or nil, err when what exists cannot be decoded.
function M.read(path)
    local t, err = decode(path)
    if t then
        return t
    end
    local bt, berr = decode(path .. ".bak")
    if bt then
        return bt
    end
    if slurp(path) == nil and slurp(path .. ".bak") == nil then
        return nil
    end
    return nil, err .. "; " .. berr
end

--- Writes a config file atomically. Returns true, or nil and a message.
function M.write(path, text)
    if type(text) ~= "string" then
        error("configfile.write: text must be a string", 2)
    end
    return store.atomic_write(path, text)
end

--- A saver for one table: save.persist(conf, force) writes path(conf)
-- with encode() when version() moved since the last write (or force)
-- and returns true, nil, the version on disk, or nil, err;
-- save.mark() records the current version as on disk (after a load).
function M.saver(path, encode, version)
    local written = -1
    local save = {}
    function save.persist(conf, force)
        local v = version()
        if v == written and not force then
            return true, nil, v
        end
        local ok, err = M.write(path(conf), encode())
        if ok then
            written = v
            return true, nil, v
        end
        return ok, err
    end
    function save.mark()
        written = version()
    end
    return save
end

--- A saver for a typed table (rmq.config_table handle t) through
-- path(conf) .. ".journal"; see the header.  save.persist(conf, force)
-- returns true, nil, the version saved, or nil, err; save.mark() records
-- the table as saved (after a load); save.replay(conf, file_dv, apply)
-- applies the journal's newer complete batches: apply(config) for each
-- config, apply(nil, dv) for the last DataVersion; returns the number
-- of configs applied.
function M.journaled(path, t)
    local written, removals, journaled = -1, -1, 0
    local save = {}
    function save.persist(conf, force)
        local v = t:version()
        if v == written and not force then
            return true, nil, v
        end
        local p = path(conf)
        local r = t:removals()
        if force or written < 0 or r ~= removals or journaled > math.max(256, t:count() // 8) then
            local ok, err = M.write(p, t:encode_wrapper())
            if not ok then
                return nil, err
            end
            os.remove(p .. ".journal")
            written, removals, journaled = v, r, 0
            return true, nil, v
        end
        local text, n, gen = t:journal(written)
        local ok, err = store.append_durable(p .. ".journal", text)
        if not ok then
            return nil, err
        end
        written, journaled = gen, journaled + n + 1   -- + its DataVersion line
        return true, nil, gen
    end
    function save.mark()
        written, removals = t:version(), t:removals()
    end
    function save.replay(conf, file_counter, apply)
        local text = slurp(path(conf) .. ".journal")
        if text == nil then
            return 0
        end
        local n, batch = 0, {}
        for line in text:gmatch("([^\n]*)\n") do
            local doc = fastjson.decode(line)
            if type(doc) ~= "table" then
                break   -- a torn line: the batch it ends was never acknowledged
            end
            local dv = doc.dataVersion
            if type(dv) == "table" then
                local counter = fastjson.int(dv.counter) or 0
                if counter > file_counter then
                    for _, cfg in ipairs(batch) do
                        apply(cfg)
                        n = n + 1
                    end
                    apply(nil, { counter = counter, timestamp = fastjson.int(dv.timestamp) or 0 })
                    file_counter = counter
                end
                batch = {}
            else
                batch[#batch + 1] = doc
            end
        end
        return n
    end
    return save
end

return M
