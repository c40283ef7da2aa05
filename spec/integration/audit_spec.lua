-- `rmq audit`: the books of the proof scripts.  A real producer and
-- consumer against a real broker account for every message; and the
-- check does find what is missing or doubled (a copy of the books with
-- deliveries removed or repeated), so a chaos run's lost=0 means
-- something.
local server = require("support.server")
local admin = require("support.admin")
local tmp = require("support.tmp")

local read = server.read_file

local function write(path, s)
    assert(io.open(path, "w")):write(s):close()
end

local function summary(out)
    local t = {}
    for k, v in out:gmatch("([%w_]+)=(%d+)") do
        t[k] = tonumber(v)
    end
    return t
end

describe("rmq audit", function()
    local ns, broker, dir
    before_each(function()
        dir = tmp.dir()
        ns = server.start({ role = "namesrv" })
        broker = server.start({ role = "broker", brokerName = "audit-a", namesrvAddr = ns.addr,
                                storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1048576 })
        admin.create_topic(broker.addr, "AuditTopic", 4)
        assert(server.eventually(function()
            return server.rmq("topic-route -n " .. ns.addr .. " AuditTopic") == 0
        end, 10000))
    end)
    after_each(function()
        broker:stop()
        ns:stop()
        os.execute("rm -rf '" .. dir .. "'")
    end)

    it("counts every acknowledged message delivered; finds lost and duplicated ones", function()
        local acked, got = dir .. "/acked.log", dir .. "/received.log"
        local code, out = server.rmq(("audit produce -n %s -t AuditTopic -o %s -c 2 -r 200 -d 1 --id P")
            :format(ns.addr, acked))
        assert.equal(0, code, out)
        local sent = tonumber((out:match("produced sent=%d+ ok=(%d+)")))
        assert.is_true(sent > 50, out)
        code, out = server.rmq(("audit consume -n %s -t AuditTopic -g AuditGroup -o %s -d 4")
            :format(ns.addr, got))
        assert.equal(0, code, out)

        code, out = server.rmq(("audit check %s %s"):format(acked, got))
        assert.equal(0, code, out)
        local t = summary(out)
        assert.equal(sent, t.acknowledged, out)
        assert.equal(sent, t.received)
        assert.equal(0, t.lost)
        assert.equal(0, t.unacked_delivered)
        -- Every acknowledgement names its message by the producer's id and number.
        local first = read(acked):match("^A (P%-%d+) ")
        assert.is_not_nil(first)

        -- Two deliveries gone, one delivered twice: the check says so, names
        -- the lost ones, and fails.
        local lines = {}
        for l in read(got):gmatch("[^\n]+") do
            lines[#lines + 1] = l
        end
        local gone1, gone2 = lines[3]:match("^R (%S+)"), lines[7]:match("^R (%S+)")
        table.remove(lines, 7)
        table.remove(lines, 3)
        lines[#lines + 1] = lines[1]
        local bad = dir .. "/bad.log"
        write(bad, table.concat(lines, "\n") .. "\n" .. "R P-999")   -- and a torn last line
        code, out = server.rmq(("audit check %s %s"):format(acked, bad))
        assert.equal(1, code, out)
        t = summary(out)
        assert.equal(2, t.lost, out)
        assert.equal(1, t.duplicates, out)
        assert.equal(sent - 2, t.received)
        assert.matches("lost: " .. gone1:gsub("%-", "%%-") .. " ", out)
        assert.matches("lost: " .. gone2:gsub("%-", "%%-") .. " ", out)

        -- A delivery whose send was never acknowledged is counted apart.
        write(bad, read(got) .. "R P-100000 X audit-a 0 0\n")
        code, out = server.rmq(("audit check --json %s %s"):format(acked, bad))
        assert.equal(0, code, out)
        local j = require("cjson").decode(out:match("{.*}"))
        assert.equal(1, j.unacked_delivered, out)
        assert.equal(0, j.lost, out)
        assert.equal(sent, j.acknowledged, out)
    end)
end)
