-- The web console in a real browser: Debian's chromium, headless, driven
-- by playwright-core (spec/interop/chromium, npm, installed by
-- scripts/test.sh).  After N sends and M consumed by a group, the page
-- loads with no console errors and shows the broker, the topic with N
-- messages and the group with lag N-M, and its forms send a test message
-- and find it by key; a screenshot is written to
-- $RMQ_BUILD/console.png (its path is printed).  Without chromium the
-- spec is skipped with a message, except under CI=true, where it fails.
local cjson = require("cjson")
local server = require("support.server")
local env = require("support.console_env")

local DIR = "spec/interop/chromium"
local CHROMIUM = os.getenv("CHROMIUM") or "/usr/bin/chromium"

local function exists(path)
    local f = io.open(path, "r")
    return f ~= nil and (f:close() or true)
end

local function have_node()
    local p = io.popen("command -v node 2>/dev/null")
    local path = p:read("l")
    p:close()
    return path ~= nil
end

describe("web console in headless chromium", function()
    local missing
    if not exists(CHROMIUM) then
        missing = CHROMIUM .. " is not installed (scripts/setup.sh installs Debian's chromium)"
    elseif not have_node() or not exists(DIR .. "/node_modules/playwright-core/package.json") then
        missing = "node and " .. DIR .. "/node_modules (npm ci, as scripts/test.sh runs) are needed"
    end

    if missing and os.getenv("CI") ~= "true" then
        pending("skipped: " .. missing)
        return
    end

    it("shows the broker, the topic's N messages and the group's lag N-M, with no console errors", function()
        assert(missing == nil, missing)
        local N, M = 5, 2
        local s = server.start({
            role = "standalone", workers = 1, brokerName = "broker-web", brokerClusterName = "WebCluster",
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            metricsExporterType = "PROM", metricsPromExporterPort = 0, consoleSampleSeconds = 1,
            consoleWriteEnable = true,
        }, { "namesrvListenPort=0" })
        local ok, err = pcall(function()
            env.one_queue_topic(s, "WebTopic")
            env.send(s, "WebTopic", N)
            env.consume(s, "WebGroup", "WebTopic", M)

            local shot = (os.getenv("RMQ_BUILD") or "build") .. "/console.png"
            if shot:sub(1, 1) ~= "/" then
                shot = os.getenv("PWD") .. "/" .. shot
            end
            os.remove(shot)
            -- Not under the sanitizers' preload (scripts/test.sh --asan).
            local cmd = ("cd %s && env -u LD_PRELOAD -u ASAN_OPTIONS CHROMIUM=%q node console_page.js %q %q WebTopic WebGroup %d 2>&1"):format(
                DIR, CHROMIUM, "http://" .. s.metrics_addr .. "/", shot, N - M)
            local p = io.popen(cmd)
            local out = p:read("a")
            p:close()
            local line = out:match("(%b{})%s*$")
            assert(line, "no JSON from the browser driver:\n" .. out)
            local page = cjson.decode(line)
            assert(page.fatal == nil, page.fatal)
            print("console screenshot: " .. page.screenshot)
            assert.same({}, page.errors)
            assert.equal("rmq console", page.title)
            local broker
            for _, row in ipairs(page.brokers) do
                if row[2] == "broker-web" then
                    broker = row
                end
            end
            assert(broker, "broker-web is not on the page: " .. cjson.encode(page.brokers))
            assert.equal("WebCluster", broker[1])
            assert.equal(s.broker_addr, broker[5])
            assert.equal("V4_9_8", broker[6])
            local topic = page.topics.WebTopic
            assert.equal("1", topic[2])            -- queues
            assert.equal(tostring(N), topic[3])    -- messages
            local group = page.groups.WebGroup
            assert.equal(tostring(N - M), group[3])
            assert.is_true(page.sparklines >= 1)
            -- The group's queue, after a click on its row.
            assert.same({ "WebTopic", "0", tostring(N), tostring(M), tostring(N - M) },
                        { page.queues[1][1], page.queues[1][2], page.queues[1][3], page.queues[1][4],
                          page.queues[1][5] })
            -- The send form, then the lookup form, on the same page.
            assert.matches('"status": "SEND_OK"', page.sent, 1, true)
            local found = cjson.decode(page.found)
            assert.equal(1, #found)
            assert.equal("sent from chromium", found[1].body)
            assert.equal("from-the-page", found[1].keys)
            assert.is_true(exists(shot), shot .. " was not written")
        end)
        env.stop(s)
        assert(ok, err)
    end)
end)
