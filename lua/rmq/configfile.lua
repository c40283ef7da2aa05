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

return M
