-- rmq.configfile: the one loader of rmq's versioned JSON files: the
-- broker's STORE/config/*.json (topics.json, subscriptionGroup.json,
-- consumerOffset.json, delayOffset.json, messageRequestMode.json), the
-- NameServer's kvConfig.json, the controller broker id and the replica
-- role file; read and written the way RocketMQ's
-- ConfigManager does, so a store moves between rmq and a Java broker
-- with its configuration.
--
--   local configfile = require "rmq.configfile"
--   local t, err = configfile.read(store_dir .. "/config/consumerOffset.json")
--   local ok, err = configfile.write(path, json_text)
--   local file = configfile.table{ path=, reset=, decode=, table=, apply= }
--   file.load(conf); file.persist(conf, force)
--
-- table() is the sequence every table file follows (read with the .bak
-- fallback, seed, decode, DataVersion, journal replay; atomic save):
-- a table module gives only its decode and encode.
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
-- batch was never acknowledged; it is cut off the journal before any
-- append).  The writing is src/broker/config_journal.c's, one writer
-- for every thread: the main thread's persister, and a worker that
-- auto-created a topic or group whose answer a client relies on
-- (file.append(): the journal line is in the file, in the page cache,
-- before that answer leaves, as RocketMQ 4.9.8 writes topics.json
-- inside createTopicInSendMessageMethod).  fsync: the main thread's next
-- persist (asked at once, and every second) fdatasyncs what workers
-- appended; its own appends and rewrites are synced before it reports
-- them persisted.
local store = require "rmq.store"
local fastjson = require "rmq.fastjson"
local log = require "rmq.log"

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

-- The file's table; nil, err when it cannot be decoded; nil, nil, true
-- when it is missing or blank.
local function decode(path)
    local text = slurp(path)
    if text == nil or not text:find("%S") then
        return nil, path .. ": missing or empty", true
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
--- PATH.bak holds anything (missing or blank: a new store has no config
--- yet, and ConfigManager loads an empty file as nothing), or nil, err
--- when what exists cannot be decoded.
function M.read(path)
    local t, err, empty = decode(path)
    if t then
        return t
    end
    local bt, berr, bempty = decode(path .. ".bak")
    if bt then
        return bt
    end
    if empty and bempty then
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
-- path(conf) .. ".journal"; see the header.  The writing is C's
-- (src/broker/config_journal.h: one writer for every thread, under the
-- journal's lock): save.persist(conf, force) returns true, nil, the
-- version saved, or nil, err; save.append() (any thread, after an
-- auto-create whose answer a client relies on) writes what changed to
-- the journal now, no fsync: true, version or nil, err; save.mark()
-- records the table as saved; save.replay(conf, file_dv, apply) applies
-- the journal's newer complete batches: apply(config) for each config,
-- apply(nil, dv) for the last DataVersion; returns the number of configs
-- applied and the length of the journal's whole lines (what follows is a
-- torn batch, cut off by save.open).  save.open(conf, valid) sets the
-- file for appends after a load.
function M.journaled(path, t)
    local save = {}
    function save.persist(conf, force)
        local ok, v = t:journal_save(path(conf), force)
        if not ok then
            return nil, v
        end
        return true, nil, v
    end
    function save.append()
        return t:journal_append()
    end
    function save.mark()
        t:journal_mark()
    end
    function save.open(conf, valid)
        return t:journal_open(path(conf), valid)
    end
    function save.replay(conf, file_counter, apply)
        local text = slurp(path(conf) .. ".journal")
        if text == nil then
            return 0, nil
        end
        local n, batch, broken, valid = 0, {}, false, 0
        for line, after in text:gmatch("([^\n]*)\n()") do
            local doc = fastjson.decode(line)
            if type(doc) ~= "table" then
                -- A line that does not decode: its batch is dropped,
                -- the batches after it still count (an append is one
                -- write, cut back when it fails: only a SIGKILL inside
                -- it leaves such a line, at the end).
                broken = true
            elseif type(doc.dataVersion) == "table" then
                local dv = doc.dataVersion
                local counter = fastjson.int(dv.counter) or 0
                if broken then
                    log.warn("%s.journal: a batch with a line that does not decode skipped (DataVersion %d)",
                             path(conf), counter)
                elseif counter > file_counter then
                    for _, cfg in ipairs(batch) do
                        apply(cfg)
                        n = n + 1
                    end
                    apply(nil, { counter = counter, timestamp = fastjson.int(dv.timestamp) or 0 })
                    file_counter = counter
                end
                batch, broken, valid = {}, false, after - 1
            else
                batch[#batch + 1] = doc
            end
        end
        -- What follows the last whole batch (valid bytes) was never
        -- acknowledged: a batch torn by a SIGKILL inside its write.
        return n, valid
    end
    return save
end

--- One table's file, loaded and saved by one sequence; the table gives
-- only how its document becomes entries and back.  spec:
--   path(conf)        the file, or
--   store_file        its name under STORE/config/ (the broker's files)
-- a typed table (rmq.config_table: a DataVersion, a journal, the
-- wrapper encoded in C), where the loader does the rest:
--   table = t
--   entries           the wrapper's map key ("topicConfigTable")
--   name_field        a config's name property ("topicName")
--   entry(name, raw)  a config from the file or journal, or nil, why
--   seed(conf)        the configs in the table before the file (the
--                     system topics: the file wins), optional
-- or a plain table, rewritten whole:
--   reset(conf)       empty it
--   decode(doc, path) apply the file's document; the number of entries,
--                     or nil, err
--   encode()          the file's text; version() a number that moves on
--                     each change
-- Returns {load = function(conf) -> true, n, replayed | nil, err,
--          persist = save.persist, mark = save.mark, path = path}.
-- load() reads PATH (PATH.bak when PATH is missing or torn), applies it,
-- sets the DataVersion it has, replays the journal's newer batches (a
-- journal config that does not decode is logged and skipped: the file's
-- entries refuse the start instead), and marks a plain table as on
-- disk; a journaled table is rewritten whole by its first persist, which
-- folds what was replayed into the file.  Seeding and replay do not
-- move the DataVersion (as Java: a new broker registers counter 0).
function M.table(spec)
    local t = spec.table
    local name = spec.store_file
    local path = spec.path or function(conf)
        return conf.storePathRootDir .. "/config/" .. name
    end
    local save, reset, apply_doc
    if t then
        save = M.journaled(path, t)
        reset = function(conf)
            t:clear()
            for _, cfg in ipairs(spec.seed and spec.seed(conf) or {}) do
                t:put(cfg, false, true)
            end
        end
        apply_doc = function(doc, p)
            local n = 0
            local map = doc[spec.entries]
            for key, raw in pairs(type(map) == "table" and map or {}) do
                local cfg, err = spec.entry(key, raw)
                if cfg == nil then
                    return nil, p .. ": " .. err
                end
                cfg[spec.name_field] = key
                t:put(cfg, false, true)
                n = n + 1
            end
            return n
        end
    else
        save = M.saver(path, spec.encode, spec.version)
        reset, apply_doc = spec.reset, spec.decode
    end
    local f = { persist = save.persist, mark = save.mark, append = save.append, path = path }
    function f.load(conf)
        local p = path(conf)
        local doc, err = M.read(p)
        if err then
            return nil, err
        end
        reset(conf)
        local n = 0
        if doc then
            n, err = apply_doc(doc, p)
            if n == nil then
                return nil, err
            end
            if t and type(doc.dataVersion) == "table" then
                local dv = doc.dataVersion
                t:set_data_version({ counter = fastjson.int(dv.counter) or 0,
                                     timestamp = fastjson.int(dv.timestamp) or 0 })
            end
        end
        if not t then
            save.mark()
            return true, n, 0
        end
        local replayed, valid = save.replay(conf, t:data_version().counter, function(raw, dv)
            if raw == nil then
                t:set_data_version(dv)
                return
            end
            local cfg, why = spec.entry(raw[spec.name_field], raw)
            if cfg then
                t:put(cfg, false, true)
            else
                log.warn("%s.journal: a config skipped: %s", p, tostring(why))
            end
        end)
        local ok
        ok, err = save.open(conf, valid)
        if not ok then
            return nil, err
        end
        return true, n, replayed
    end
    return f
end

return M
