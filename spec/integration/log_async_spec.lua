-- A worker's log lines never wait for the log file (src/core/log.h):
-- they go through a ring of logBufferBytes that the "log" thread writes
-- out.  Before, every line was a write(2) on the thread that logged it:
-- a worker whose log file did not take lines (a busy disk; here a FIFO
-- whose reader does not read) stopped answering every client it served.
-- Here the log file is a FIFO held open by a reader that reads nothing
-- until the end: its pipe (64 KiB) and the ring (16 KiB) fill, every
-- request is still answered, the lines past them are dropped and
-- counted, and once a reader drains the pipe the lines come out in the
-- order they were logged, the gap marked "N messages suppressed" before
-- any later line.
local net = require("rmq.net")
local proc = require("rmq.proc")
local server = require("support.server")

local LINES, LINE_BYTES = 200, 1000   -- 200 KB: well past the pipe and the ring

-- A log file that takes nothing: a FIFO in a temp dir of its own, held
-- open by a reader that reads nothing until :drain() (O_RDWR: the open
-- does not wait for a writer, and the server's open does not wait for a
-- reader).  log.dir: the temp dir; log.path: the FIFO, for logFile.
local function stuck_log()
    local dir = server.tmpdir()
    local log = { dir = dir, path = dir .. "/broker.log", out = dir .. "/read.log" }
    assert(os.execute("mkfifo " .. log.path))
    log.hold = assert(io.open(log.path, "r+"))

    -- Waits for what the reader has copied to hold needle; returns it.
    function log:wait_for(needle, why)
        local text
        assert.is_truthy(server.eventually(function()
            text = server.read_file(self.out)
            return text:find(needle, 1, true) ~= nil
        end, 60000), why .. ":\n" .. (text or ""):sub(-3000))
        return text
    end

    -- A reader comes (cat, into log.out) and the one that read nothing
    -- goes; returns once the note of the gap is out: the ring has room
    -- again, and lines logged from then on are kept, after it.
    function log:drain()
        self.cat = assert(proc.spawn({ file = "/bin/cat", args = { self.path }, stdout = self.out,
                                       stderr = self.dir .. "/cat.err" }))
        self.hold:close()
        self.hold = nil
        self:wait_for("messages suppressed", "no 'messages suppressed' line")
    end

    -- For teardown: stops b (the server logging here, if still running)
    -- and the readers.
    function log:close(b)
        -- A case that failed before its reader came: one now, so that
        -- nothing of the server waits on the pipe while it stops.
        if b and not self.cat then
            self.cat = proc.spawn({ file = "/bin/cat", args = { self.path }, stdout = "/dev/null",
                                    stderr = self.dir .. "/cat.err" })
        end
        if self.hold then
            self.hold:close()
            self.hold = nil
        end
        if b then
            b:stop()
        end
        if self.cat and not self.cat.exited then
            self.cat:kill(15)
            self.cat:wait(10000)
        end
    end

    return log
end

describe("log lines of a worker", function()
    local b, log

    teardown(function()
        if log then
            log:close(b)
        end
    end)

    it("never hold up its requests when the log file takes nothing; the gap is counted, the order kept", function()
        log = stuck_log()
        b = server.start({ source = ([[
            return {
                role = "broker", brokerName = "broker-log", workers = 1,
                storePathRootDir = %q, namesrvAddr = "127.0.0.1:1",
                mappedFileSizeCommitLog = 1048576, messageIndexEnable = false,
                autoCreateTopicEnable = true,
                logFile = %q, logBufferBytes = 16384,
                processors = {
                    -- One log line of the worker per request, numbered.
                    [7002] = function(ctx, cmd)
                        require("rmq.log").info("LOGSEQ %%d %%s", tonumber(cmd:get("seq")),
                                                string.rep("x", tonumber(cmd:get("size"))))
                        return { code = 0 }
                    end,
                },
            }
        ]]):format(log.dir .. "/store", log.path) })
        local c = assert(net.connect(b.addr))
        local function line(seq)
            local r = assert(c:call({ code = 7002, ext = { seq = tostring(seq), size = tostring(LINE_BYTES) } },
                                    30000))
            assert.equal(0, r.code, r.remark)
        end
        -- Every request answered while nothing reads the log (before:
        -- the worker blocked in write(2) once the pipe was full, about
        -- the 60th, and this call timed out).
        for seq = 1, LINES do
            line(seq)
        end
        -- A send that auto-creates its topic (an INFO line of the
        -- worker) is answered too.
        local r = assert(c:call({ code = 310, ext = {
            a = "LogAsyncP", b = "LogAsyncTopic", c = "TBW102", d = "4", e = "0", f = "0",
            g = "1700000000000", h = "0", i = "WAIT\1true", j = "0", k = "false", m = "false" },
            body = "while the log is stuck" }, 30000))
        assert.equal(0, r.code, r.remark)

        -- Now a reader: what was kept comes out, then lines logged after.
        log:drain()
        for seq = LINES + 1, LINES + 5 do
            line(seq)
        end
        local text = log:wait_for("LOGSEQ " .. (LINES + 5) .. " ",
                                  "the lines logged after the reader came never reached the log")

        -- In order, every seq either written or counted in a note, and
        -- the note before every line logged after the gap.
        local seqs, suppressed, note_at = {}, 0, nil
        for l in text:gmatch("[^\n]+") do
            local seq = tonumber(l:match("LOGSEQ (%d+) "))
            local n = tonumber(l:match("%[log%] (%d+) messages suppressed"))
            if seq then
                if #seqs > 0 then
                    assert.is_true(seq > seqs[#seqs], ("LOGSEQ %d after %d"):format(seq, seqs[#seqs]))
                end
                seqs[#seqs + 1] = seq
            elseif n then
                suppressed = suppressed + n
                note_at = note_at or #seqs
            end
        end
        assert.is_not_nil(note_at, "no 'messages suppressed' line:\n" .. text:sub(-3000))
        local kept = 0
        for _, seq in ipairs(seqs) do
            if seq <= LINES then
                kept = kept + 1
            end
        end
        assert.is_true(kept < LINES and kept > 0, ("%d of %d kept"):format(kept, LINES))
        -- Other lines (the auto-created topic's) may be among the dropped.
        assert.is_true(suppressed >= LINES - kept, ("%d counted, %d missing"):format(suppressed, LINES - kept))
        -- The lines logged once the reader came are all there, after the note.
        for i = 0, 4 do
            assert.equal(LINES + 1 + i, seqs[#seqs - 4 + i])
        end
        assert.is_true(note_at <= #seqs - 5)
        print(("\n  log_async: %d of %d lines kept (pipe + 16 KiB ring), %d counted as suppressed")
            :format(kept, LINES, suppressed))
        c:close()
        local status = b:stop()
        b = nil
        assert.equal(0, status)
    end)
end)

-- The main thread's lines (the console, admin requests, the persisters:
-- everything it does once READY) go through the ring too.  Before, they
-- were a write(2) of their own: with the log a FIFO whose reader reads
-- nothing, a console snippet that logs stopped the main thread in that
-- write once the pipe was full, and the session was never answered.
-- The lines dropped are counted in /metrics, brokerStatus and the
-- console's log().
describe("log lines of the main thread", function()
    local client = require("rmq.console_live.client")
    local prom = require("support.prom")
    local b, log

    teardown(function()
        if log then
            log:close(b)
        end
    end)

    it("never hold up the console once READY; the lines dropped are counted where the process figures are", function()
        log = stuck_log()
        b = server.start({
            role = "broker", brokerName = "broker-log-main", workers = 1,
            storePathRootDir = log.dir .. "/store", namesrvAddr = "127.0.0.1:1",
            mappedFileSizeCommitLog = 1048576, messageIndexEnable = false,
            logFile = log.path, logBufferBytes = 16384, console = "unix",
            metricsExporterType = "PROM", metricsPromExporterPort = 0,
        })
        local sock = log.dir .. "/store/console.sock"
        local function eval(code)
            local c = assert(client.open("unix:" .. sock, nil, 30000))
            local ok, text = c:eval(code)
            c:close()
            return ok, text
        end
        -- 200 lines of 1 KB from the main thread: past the pipe and the
        -- ring.  Before, the main thread blocked in write(2) at about the
        -- 60th and this eval timed out.
        local ok, text = eval('for seq = 1, 200 do require("rmq.log").info("MAINSEQ %d %s", seq, '
                              .. 'string.rep("m", 1000)) end return "logged"')
        assert.is_true(ok, text)
        assert.matches("logged", text, 1, true)
        -- Answered again: the main thread is not stuck behind the log.
        local dropped
        ok, text = eval("return log().droppedLines")
        assert.is_true(ok, text)
        dropped = tonumber(text:match("(%d+)"))
        assert.is_true(dropped ~= nil and dropped > 0, "log().droppedLines: " .. tostring(text))
        -- The same count in /metrics and in brokerStatus (never lower:
        -- the count only grows).
        local scraped = prom.value(prom.scrape(b.metrics_addr), "rmq_log_dropped_lines_total")
        assert.is_true(scraped ~= nil and scraped >= dropped, "rmq_log_dropped_lines_total: " .. tostring(scraped))
        local c = assert(net.connect(b.addr))
        local r = assert(c:call({ code = 28 }, 30000))
        assert.equal(0, r.code, r.remark)
        local status = tonumber(r.body:match('"logDroppedLines":"(%d+)"'))
        assert.is_true(status ~= nil and status >= dropped, "brokerStatus logDroppedLines: " .. tostring(status))
        c:close()

        -- A reader comes: what was kept comes out in order, the gap noted.
        log:drain()
        ok = eval('require("rmq.log").info("MAINSEQ 201 after")')
        assert.is_true(ok)
        text = log:wait_for("MAINSEQ 201 after", "the line logged after the reader came never reached the log")
        local last, note_before = 0, false
        for l in text:gmatch("[^\n]+") do
            local seq = tonumber(l:match("%[main%] MAINSEQ (%d+) "))
            if seq then
                assert.is_true(seq > last, ("MAINSEQ %d after %d"):format(seq, last))
                if seq == 201 then
                    assert.is_true(note_before, "MAINSEQ 201 before the note of the gap")
                end
                last = seq
            elseif l:find("messages suppressed", 1, true) then
                note_before = true
            end
        end
        assert.equal(201, last)
        local st = b:stop()
        b = nil
        assert.equal(0, st)
    end)
end)
