-- `rmq repl`'s pure parts: how values are shown (rmq.repl.pretty) and
-- what Tab offers (rmq.repl.complete), given names already fetched (the
-- integration spec types into a real REPL against a real server).
local pretty = require("rmq.repl.pretty")
local complete = require("rmq.repl.complete")

describe("rmq repl values", function()
    it("shows a list of records as an aligned table, columns in the list's order", function()
        local rows = setmetatable({ { broker = "broker-a", id = 0, addr = "127.0.0.1:10911" },
                                    { broker = "b", id = 1, addr = "127.0.0.1:10921" } },
                                  { __columns = { "broker", "id", "addr" } })
        assert.equal("#broker   #id  #addr\n"
                  .. "broker-a  0    127.0.0.1:10911\n"
                  .. "b         1    127.0.0.1:10921", pretty.format(rows))
    end)

    it("shows JSON's whole floats as integers, flat maps in one cell, nested tables indented", function()
        local route = { queueDatas = { { brokerName = "a", readQueueNums = 4.0 } },
                        brokerDatas = { { brokerName = "a", brokerAddrs = { ["0"] = "h:1" } } },
                        filterServerTable = {} }
        assert.equal("brokerDatas:\n"
                  .. "  #brokerAddrs  #brokerName\n"
                  .. "  0=h:1         a\n"
                  .. "filterServerTable  {}\n"
                  .. "queueDatas:\n"
                  .. "  #brokerName  #readQueueNums\n"
                  .. "  a            4", pretty.format(route))
        assert.equal("1.5", pretty.format(1.5))
    end)

    it("bounds what it shows: rows, depth, cell width, cycles", function()
        local list = {}
        for i = 1, 5 do
            list[i] = "t" .. i
        end
        assert.equal("t1\nt2\n... 3 more", pretty.format(list, { maxRows = 2 }))
        local deep = { a = { b = { c = { d = 1 } } } }
        assert.matches("{%.%.%.}", pretty.format(deep, { maxDepth = 2 }))
        assert.equal("x  aaaaaaa...", pretty.format({ x = ("a"):rep(50) }, { maxCell = 10 }))
        local cyc = { name = "c" }
        cyc.self = cyc
        assert.matches("%(cycle%)", pretty.format(cyc))
        -- a control character never reaches the terminal as it is
        assert.equal("x  a\\27[2Jb", pretty.format({ x = "a\27[2Jb" }))
    end)
end)

describe("rmq repl completion", function()
    local names = {
        topics = function() return { "OrderTopic", "OrderTopicRetry", "PayTopic" } end,
        groups = function() return { "OrderGroup", "PayGroup" } end,
    }
    -- as the REPL's: its functions, and Lua's globals behind them
    local env = setmetatable({ update_topic = function() end, consume = function() end,
                               cluster_list = function() end, route = { queueDatas = {} } }, { __index = _G })
    local docs = { update_topic = { options = { { long = "topic" }, { long = "clusterName" },
                                                { long = "writeQueueNums" } } } }
    local function cands(word, before)
        return complete.candidates(word, before, env, names, docs)
    end

    it("offers functions with their parenthesis, and fields after a dot", function()
        assert.same({ "update_topic(" }, cands("upd", ""))
        assert.same({ "route.queueDatas" }, cands("route.q", "x = "))
        assert.same({ "string.format(" }, cands("string.form", ""))
        assert.same({ "while" }, cands("whil", ""))
    end)

    it("offers topic names in a string, closed by its quote; groups where groups are meant", function()
        assert.same({ 'OrderTopic"', 'OrderTopicRetry"' }, cands("Ord", 'topic_route("'))
        assert.same({ "OrderGroup'" }, cands("Ord", "consume('OrderTopic', '"))
        assert.same({ 'PayTopic"' }, cands("Pay", 'consume("'))
        assert.same({ 'PayGroup"' }, cands("P", 'update_sub_group{g = "'))
        assert.same({ 'PayGroup"' }, cands("P", 'consume("T", "G", {group = "'))
        assert.same({ 'PayTopic"' }, cands("P", 'update_topic{clusterName = "C", topic = "'))
    end)

    it("offers an admin command's option names in its option table", function()
        assert.same({ "writeQueueNums = " }, cands("wr", "update_topic{"))
        assert.same({ "writeQueueNums = " }, cands("wr", 'update_topic("T", {clusterName = "C", '))
        -- a value, not a key: functions and variables again
        assert.same({ "cluster_list(" }, cands("cl", "update_topic{topic = "))
    end)

    it("offers nothing when the names cannot be fetched", function()
        local down = { topics = function() error("unreachable") end, groups = function() error("x") end }
        assert.same({}, complete.candidates("O", 'topic_route("', env, down, docs))
    end)
end)
