-- The broker's typed shared tables through rmq.so: topic and
-- subscription-group configs (rmq.config_table) and consumer offsets
-- (rmq.offset_table).  Private tables here; the broker specs exercise the
-- process-wide ones across worker threads.
local ct = require("rmq.config_table")
local ot = require("rmq.offset_table")
local cjson = require("cjson")
local message = require("rmq.message")

local function topic(name, n, perm)
    return { topicName = name, readQueueNums = n or 4, writeQueueNums = n or 4, perm = perm or 6,
             topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false }
end

describe("config tables", function()
    it("stores typed records and moves version and DataVersion on change only", function()
        local t = ct.new_topics()
        local v0, dv0 = t:version(), t:data_version()
        assert.is_true(t:put(topic("A")))
        assert.same(topic("A"), t:get("A"))
        local v1, dv1 = t:version(), t:data_version()
        assert.is_true(v1 > v0)
        assert.equal(dv0.counter + 1, dv1.counter)
        assert.is_false(t:put(topic("A")))             -- same record: nothing moves
        assert.equal(v1, t:version())
        assert.is_false(t:put(topic("A", 8), true))    -- if absent: kept
        assert.equal(4, t:get("A").writeQueueNums)
        assert.is_true(t:put(topic("B"), false, true)) -- quiet: no DataVersion move
        assert.equal(dv1.counter, t:data_version().counter)
        assert.is_true(t:del("A"))
        assert.is_false(t:del("A"))
        assert.is_nil(t:get("A"))
        assert.equal(1, t:count())
        assert.has_error(function() t:put({ topicName = "C", readQueueNums = 1.5 }) end)
        assert.has_error(function() t:put({ topicName = "C", perm = 99 }) end)
        assert.has_error(function() t:put({ readQueueNums = 1 }) end)
    end)

    it("lists the names changed after a version (incremental registration)", function()
        local t = ct.new_topics()
        t:put(topic("A"))
        t:put(topic("B"))
        local all, v = t:names()
        table.sort(all)
        assert.same({ "A", "B" }, all)
        t:put(topic("C"))
        t:put(topic("A", 8))
        local changed = t:names(v)
        table.sort(changed)
        assert.same({ "A", "C" }, changed)
        local body, n = t:register_body(false, -1, v)
        assert.equal(2, n)
        local w = cjson.decode(body).topicConfigSerializeWrapper
        assert.equal(8, w.topicConfigTable.A.writeQueueNums)
        assert.is_nil(w.topicConfigTable.B)
    end)

    it("lists what changed after any version, from its change log or the table", function()
        local t = ct.new_topics()
        local marks, model, last = {}, {}, {}   -- model: name -> queues; last: name -> put of its last change
        local function put(i, name, n)
            if model[name] ~= n then
                model[name], last[name] = n, i
            end
            t:put(topic(name, n))
        end
        for i = 1, 70000 do   -- past the log's 65,536 records: its oldest half goes
            put(i, "C" .. (i % 40000), 4 + (i // 40000))
            if i == 35000 then
                put(i, "C1", 9)   -- changed twice: listed once
            end
            if i % 10000 == 0 then
                local _, v = t:names(t:version())
                marks[#marks + 1] = { i = i, v = v }
            end
        end
        for _, m in ipairs(marks) do
            local changed = t:names(m.v)
            local seen, dup = {}, false
            for _, name in ipairs(changed) do
                dup = dup or seen[name] == true
                seen[name] = true
            end
            assert.is_false(dup, "a name listed twice after " .. m.i)
            local want = 0
            for name, at in pairs(last) do
                if at > m.i then
                    want = want + 1
                    assert.is_true(seen[name], name .. " missing after " .. m.i)
                end
            end
            assert.equal(want, #changed, "after put " .. m.i)
        end
    end)

    it("writes wrappers in a ConcurrentHashMap's order, parts of it on request", function()
        local t = ct.new_topics()
        for i = 1, 50 do t:put(topic("T" .. i)) end
        t:set_data_version({ counter = 7, timestamp = 1000 })
        local text = t:encode_wrapper()
        local w = cjson.decode(text)
        assert.same({ counter = 7, timestamp = 1000 }, w.dataVersion)
        local n = 0
        for _ in pairs(w.topicConfigTable) do n = n + 1 end
        assert.equal(50, n)
        -- Java's order: by bucket of the spread String hash in a
        -- 2048-bucket table (new ConcurrentHashMap<>(1024)).
        local function bucket(s)
            local h = message.java_hash(s) & 0xFFFFFFFF
            return (h ~ (h >> 16)) & 2047
        end
        local last = -1
        for name in text:gmatch('"topicName":"([^"]+)"') do
            assert.is_true(bucket(name) >= last, name)
            last = bucket(name)
        end
        -- Parts: 50 topics in parts of 16 are the whole table, once each.
        local seen = {}
        for off = 0, 48, 16 do
            local body, k = t:register_body(false, -1, 0, off, 16)
            assert.is_true(k <= 16)
            for name in pairs(cjson.decode(body).topicConfigSerializeWrapper.topicConfigTable) do
                assert.is_nil(seen[name])
                seen[name] = true
            end
        end
        n = 0
        for _ in pairs(seen) do n = n + 1 end
        assert.equal(50, n)
    end)

    it("orders non-ASCII names as Java does: by the hash of their UTF-16 units", function()
        local t = ct.new_topics()
        local names = { "Topicé", "Topicü", "主题", "Tópico", "Topic😀", "Ωmega", "TopicA", "TopicB",
                        "T1", "T2", "T3" }
        for _, name in ipairs(names) do
            assert.is_true(t:put(topic(name)))
        end
        local got = {}
        for name in t:encode_wrapper():gmatch('"topicName":"([^"]+)"') do
            got[#got + 1] = name
        end
        -- The keySet() order of a Java ConcurrentHashMap<>(1024) after
        -- these puts (JDK 17).
        assert.same({ "Topicé", "Ωmega", "Topicü", "TopicB", "TopicA", "主题", "T1", "T2", "T3",
                      "Topic😀", "Tópico" }, got)
        -- A hash of the UTF-8 bytes would order them otherwise.
        local function byte_bucket(s)
            local h = 0
            for i = 1, #s do h = (31 * h + s:byte(i)) & 0xFFFFFFFF end
            return (h ~ (h >> 16)) & 2047
        end
        local by_bytes = { table.unpack(names) }
        table.sort(by_bytes, function(a, b) return byte_bucket(a) < byte_bucket(b) end)
        assert.are_not.same(got, by_bytes)
        assert.equal(-1784166982, message.java_hash("Topicé"))   -- "Topicé".hashCode()
    end)

    it("holds subscription groups with SubscriptionGroupConfig's defaults", function()
        local g = ct.new_groups()
        assert.is_true(g:put({ groupName = "G" }))
        assert.same({ groupName = "G", brokerId = 0, retryMaxTimes = 16, retryQueueNums = 1,
                      whichBrokerWhenConsumeSlowly = 1, consumeBroadcastEnable = true,
                      consumeEnable = true, consumeFromMinEnable = true,
                      notifyConsumerIdsChangedEnable = true }, g:get("G"))
        assert.equal('{"dataVersion":{"counter":1,"timestamp":' .. g:data_version().timestamp
            .. '},"subscriptionGroupTable":{"G":{"brokerId":0,"consumeBroadcastEnable":true,'
            .. '"consumeEnable":true,"consumeFromMinEnable":true,"groupName":"G",'
            .. '"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,'
            .. '"whichBrokerWhenConsumeSlowly":1}}}', g:encode_wrapper())
    end)

    it("scales to 20,000 topics", function()
        local t = ct.new_topics()
        for i = 1, 20000 do t:put(topic(("Topic%05d"):format(i))) end
        assert.equal(20000, t:count())
        assert.equal(20000, select(2, t:register_body(true, -1, 0)))
        local w = cjson.decode(t:encode_wrapper())
        assert.equal(4, w.topicConfigTable.Topic12345.writeQueueNums)
    end)
end)

describe("the consumer offset table", function()
    it("commits, queries and removes by group or topic", function()
        local t = ot.new()
        assert.is_true(t:commit("T", "g", 0, 5))
        assert.is_true(t:commit("T", "g", 3, 7))
        assert.is_true(t:commit("U", "g", 0, 1))
        assert.is_true(t:commit("T", "h", 0, 2))
        assert.equal(5, t:query("T", "g", 0))
        assert.equal(7, t:query("T", "g", 3))
        assert.is_nil(t:query("T", "g", 1))
        assert.is_nil(t:query("T", "x", 0))
        local v = t:version()
        t:commit("T", "g", 0, 5)          -- the same value: no change
        assert.equal(v, t:version())
        assert.is_nil((t:commit("T", "g", 0, -1)))
        assert.has_error(function() t:commit("T", "g", 65536, 1) end)
        assert.has_error(function() t:commit("T", "g", -1, 1) end)
        assert.same({ ["T@g"] = { [0] = 5, [3] = 7 }, ["U@g"] = { [0] = 1 }, ["T@h"] = { [0] = 2 } }, t:all())
        assert.equal('{"offsetTable":{"T@g":{0:5,3:7},"T@h":{0:2},"U@g":{0:1}}}', t:encode(false))
        assert.equal(2, t:remove_group("g"))
        assert.equal(1, t:remove_topic("T"))
        assert.equal(0, t:count())
        assert.equal('{\n\t"offsetTable":{}\n}', t:encode(true))
    end)

    it("holds 100,000 queue offsets", function()
        local t = ot.new()
        for g = 1, 5000 do
            for q = 0, 19 do
                t:commit("Topic", "group" .. g, q, g * 100 + q)
            end
        end
        assert.equal(5000, t:count())
        assert.equal(4219, t:query("Topic", "group42", 19))
        local doc = require("rmq.fastjson").decode(t:encode(true))
        assert.equal(4219, doc.offsetTable["Topic@group42"]["19"])
    end)
end)

describe("config journals (rmq.configfile.journaled)", function()
    local configfile = require("rmq.configfile")
    local util = require("support.store")
    local dir, path, conf

    before_each(function()
        dir = util.tmpdir()
        path = function() return dir .. "/topics.json" end
        conf = {}
    end)

    after_each(function()
        util.rmrf(dir)
    end)

    it("appends what changed, rewrites after a removal or when forced", function()
        local t = ct.new_topics()
        local save = configfile.journaled(path, t)
        t:put(topic("A"))
        assert.is_true(save.persist(conf))                     -- the first save is whole
        assert.truthy(util.read_file(dir .. "/topics.json"):find('"A"', 1, true))
        t:put(topic("B"))
        assert.is_true(save.persist(conf))
        local j = util.read_file(dir .. "/topics.json.journal")
        assert.truthy(j:find('"topicName":"B"', 1, true))
        assert.falsy(j:find('"topicName":"A"', 1, true))
        assert.matches('{"dataVersion":{"counter":2,', j, 1, true)
        t:del("A")
        assert.is_true(save.persist(conf))                     -- a removal: whole again
        assert.is_false(util.exists(dir .. "/topics.json.journal"))
        local doc = cjson.decode(util.read_file(dir .. "/topics.json"))
        assert.truthy(doc.topicConfigTable.B)
        assert.is_nil(doc.topicConfigTable.A)
    end)

    it("replays complete batches newer than the file, and no torn one", function()
        local t = ct.new_topics()
        local save = configfile.journaled(path, t)
        local f = assert(io.open(dir .. "/topics.json.journal", "w"))
        f:write(cjson.encode(topic("Old")), "\n", '{"dataVersion":{"counter":40,"timestamp":1}}\n')
        f:write(cjson.encode(topic("C")), "\n", '{"dataVersion":{"counter":100,"timestamp":2}}\n')
        f:write(cjson.encode(topic("D")), "\n", '{"dataVe')   -- torn: never acknowledged
        f:close()
        local got, last = {}, nil
        local n = save.replay(conf, 50, function(cfg, dv)
            if cfg then got[#got + 1] = cfg.topicName else last = dv end
        end)
        assert.equal(1, n)
        assert.same({ "C" }, got)
        assert.same({ counter = 100, timestamp = 2 }, last)
        assert.equal(0, save.replay(conf, 100, function() error("nothing is newer") end))
    end)

    it("skips a batch with a broken line, cuts a torn end off, and appends after it", function()
        local t = ct.new_topics()
        local save = configfile.journaled(path, t)
        local whole = cjson.encode(topic("C")) .. "\n" .. '{"dataVersion":{"counter":100,"timestamp":2}}\n'
            .. '{"topicName":"Bad",\n' .. cjson.encode(topic("D")) .. "\n"
            .. '{"dataVersion":{"counter":101,"timestamp":3}}\n'
            .. cjson.encode(topic("E")) .. "\n" .. '{"dataVersion":{"counter":102,"timestamp":4}}\n'
        local f = assert(io.open(dir .. "/topics.json.journal", "w"))
        f:write(whole, cjson.encode(topic("F")), "\n", '{"dataVe')   -- torn by a kill inside its write
        f:close()
        local got = {}
        local n, valid = save.replay(conf, 50, function(cfg)
            if cfg then got[#got + 1] = cfg.topicName end
        end)
        assert.equal(2, n)
        assert.same({ "C", "E" }, got)
        assert.equal(#whole, valid)
        for _, name in ipairs({ "C", "E" }) do t:put(topic(name), false, true) end
        t:set_data_version({ counter = 102, timestamp = 4 })   -- as a load sets it
        assert.is_true(save.open(conf, valid))
        assert.equal(whole, util.read_file(dir .. "/topics.json.journal"))
        t:put(topic("G"))
        assert.is_true((save.append()))
        got = {}
        save.replay(conf, 50, function(cfg)
            if cfg then got[#got + 1] = cfg.topicName end
        end)
        assert.same({ "C", "E", "G" }, got)
    end)
end)

describe("one table file (rmq.configfile.table)", function()
    local configfile = require("rmq.configfile")
    local util = require("support.store")
    local dir, conf

    before_each(function()
        dir = util.tmpdir()
        conf = { dir = dir }
    end)

    after_each(function()
        util.rmrf(dir)
    end)

    local function write(path, text)
        local f = assert(io.open(path, "w"))
        f:write(text)
        f:close()
    end

    -- A typed table with a DataVersion and journal, as topics.lua gives it.
    local function journaled(t, seen)
        return configfile.table({
            path = function(c) return c.dir .. "/topics.json" end,
            table = t,
            entries = "topicConfigTable",
            name_field = "topicName",
            entry = function(name, raw)
                seen[#seen + 1] = name
                if raw.perm == "bad" then
                    return nil, "topic " .. name .. ": perm is not an integer"
                end
                return raw
            end,
            seed = function() return { topic("SYS") } end,
        })
    end

    it("loads the file, its DataVersion and the newer journal batches, and saves them whole", function()
        local t, seen = ct.new_topics(), {}
        local file = journaled(t, seen)
        write(dir .. "/topics.json", '{"dataVersion":{"counter":7,"timestamp":3},"topicConfigTable":{"A":'
            .. cjson.encode(topic("A")) .. '}}')
        write(dir .. "/topics.json.journal", cjson.encode(topic("Old")) .. "\n"
            .. '{"dataVersion":{"counter":5,"timestamp":1}}\n'
            .. cjson.encode(topic("B")) .. "\n" .. '{"dataVersion":{"counter":9,"timestamp":4}}\n')
        local ok, n, replayed = file.load(conf)
        assert.is_true(ok)
        assert.equal(1, n)
        assert.equal(1, replayed)
        assert.same({ "A", "B" }, seen)                -- "Old" is already in the file (5 <= 7)
        assert.same({ counter = 9, timestamp = 4 }, t:data_version())
        assert.truthy(t:get("SYS") and t:get("A") and t:get("B"))
        assert.is_nil(t:get("Old"))
        -- The first save folds the journal into the file.
        assert.is_true(file.persist(conf))
        assert.is_false(util.exists(dir .. "/topics.json.journal"))
        local doc = cjson.decode(util.read_file(dir .. "/topics.json"))
        assert.truthy(doc.topicConfigTable.B)
        assert.equal(9, doc.dataVersion.counter)
    end)

    it("falls back to PATH.bak, treats blank as new, and refuses what cannot be decoded", function()
        local t = ct.new_topics()
        local file = journaled(t, {})
        assert.is_true(file.load(conf))                            -- nothing on disk: a new store
        assert.truthy(t:get("SYS"))
        write(dir .. "/topics.json", "   \n")
        assert.is_true(file.load(conf))                            -- blank, as ConfigManager
        write(dir .. "/topics.json.bak", '{"topicConfigTable":{"K":' .. cjson.encode(topic("K")) .. '}}')
        assert.is_true(file.load(conf))
        assert.truthy(t:get("K"))                                  -- from the .bak
        write(dir .. "/topics.json", "{torn")
        write(dir .. "/topics.json.bak", "{torn too")
        local ok, err = file.load(conf)
        assert.is_nil(ok)
        assert.matches("topics.json", err, 1, true)
        -- An entry the table refuses: the start is refused, with the file and why.
        write(dir .. "/topics.json", '{"topicConfigTable":{"X":{"perm":"bad"}}}')
        ok, err = file.load(conf)
        assert.is_nil(ok)
        assert.matches("topics.json: topic X: perm is not an integer", err, 1, true)
    end)

    it("a plain table is rewritten whole, only when its version moved", function()
        local data, version = { x = 1 }, 1
        local file = configfile.table({
            path = function(c) return c.dir .. "/delayOffset.json" end,
            reset = function() data = {} end,
            decode = function(doc)
                data = doc.offsetTable
                return 1
            end,
            encode = function() return cjson.encode({ offsetTable = data }) end,
            version = function() return version end,
        })
        write(dir .. "/delayOffset.json", '{"offsetTable":{"x":2}}')
        assert.same({ true, 1, 0 }, { file.load(conf) })
        assert.equal(2, data.x)
        os.remove(dir .. "/delayOffset.json")
        assert.is_true(file.persist(conf))                         -- loaded = on disk: no write
        assert.is_false(util.exists(dir .. "/delayOffset.json"))
        version = 2
        assert.is_true(file.persist(conf))
        assert.equal(2, cjson.decode(util.read_file(dir .. "/delayOffset.json")).offsetTable.x)
        data.x = 3
        version = 3
        assert.is_true(file.persist(conf))
        assert.equal(2, cjson.decode(util.read_file(dir .. "/delayOffset.json.bak")).offsetTable.x)
    end)
end)
