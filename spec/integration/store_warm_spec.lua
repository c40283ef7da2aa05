-- warmMapedFileEnable, 4.9.8's default (false): a broker's commit log
-- files are sparse, reserved on disk a chunk (4 MiB) at a time ahead of
-- the writer, and pre-faulted commitLogWarmWindowBytes (64 MiB) ahead of
-- it, so an almost empty store with 1 GiB files (the current and the
-- pre-allocated next one) takes tens of MiB, not 2 GiB.  With the key
-- on, every new file is reserved whole, as before.  Measured with du
-- (allocated blocks), on real brokers.
local net = require("rmq.net")
local producer = require("rmq.client.producer")
local server = require("support.server")
local env = require("support.broker_consume_env")

-- Allocated KiB under dir, and the apparent size in bytes of each
-- commit log file.
local function usage(dir)
    local p = io.popen("du -sk " .. dir .. " 2>/dev/null")
    local kib = tonumber(p:read("a"):match("^(%d+)"))
    p:close()
    local sizes = {}
    p = io.popen("stat -c '%s' " .. dir .. "/commitlog/* 2>/dev/null")
    for line in p:lines() do
        sizes[#sizes + 1] = tonumber(line)
    end
    p:close()
    return kib, sizes
end

-- The warm window, the index file's slots (20 MiB), the consume queues'
-- chunks and the 4 MiB reserved ahead: far below one 1 GiB file.
local LIMIT_KIB = 160 * 1024

local function send_some(e, n)
    local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxWarmProducer" })
    e:route("FxWarm", 4)
    for i = 1, n do
        assert(p:send({ topic = "FxWarm", body = ("x"):rep(1000) .. i }))
    end
end

describe("commit log warming", function()
    it("is off by default: 1 GiB files stay sparse, the store takes tens of MiB", function()
        local e = env.start({ workers = 1, mappedFileSizeCommitLog = 1024 * 1024 * 1024 })
        local ok, err = pcall(function()
            send_some(e, 200)
            -- The next file is pre-allocated (sparse) in the background.
            assert(server.eventually(function() return #select(2, usage(e.store)) >= 2 end, 5000),
                   "no pre-allocated next file")
            local kib, sizes = usage(e.store)
            for _, sz in ipairs(sizes) do
                assert.equal(1024 * 1024 * 1024, sz)
            end
            assert.is_true(kib < LIMIT_KIB, ("the store takes %d KiB"):format(kib))
            -- Restarted on the same store, it recovers and goes on
            -- writing (the write position is reserved, not the file).
            e:restart()
            send_some(e, 10)
            kib = usage(e.store)
            assert.is_true(kib < LIMIT_KIB, ("the store takes %d KiB after a restart"):format(kib))
            -- And after a crash: recovery zeroes the file's tail as a
            -- hole, it does not allocate the rest of the file.
            e:restart({ kill = true })
            send_some(e, 10)
            kib = usage(e.store)
            assert.is_true(kib < LIMIT_KIB, ("the store takes %d KiB after a crash"):format(kib))
        end)
        assert.equal(0, (e:stop()))
        assert(ok, err)
    end)

    it("with warmMapedFileEnable reserves each file whole", function()
        local size = 32 * 1024 * 1024
        local e = env.start({ workers = 1, mappedFileSizeCommitLog = size, warmMapedFileEnable = true,
                              commitLogWarmWindowBytes = 0 })
        local ok, err = pcall(function()
            send_some(e, 20)
            local kib = server.eventually(function()
                local k, s = usage(e.store)
                return #s >= 2 and k >= 2 * size // 1024 and k
            end, 5000)
            assert.truthy(kib, "the current and next files are not reserved whole")
        end)
        assert.equal(0, (e:stop()))
        assert(ok, err)
    end)

    it("pre-faults no more than commitLogWarmWindowBytes ahead (0: nothing)", function()
        local e = env.start({ workers = 1, mappedFileSizeCommitLog = 1024 * 1024 * 1024,
                              commitLogWarmWindowBytes = 0, maxHashSlotNum = 1000 })
        local ok, err = pcall(function()
            send_some(e, 20)
            net.sleep(300)
            local kib = usage(e.store)
            assert.is_true(kib < 16 * 1024, ("the store takes %d KiB without a window"):format(kib))
        end)
        assert.equal(0, (e:stop()))
        assert(ok, err)
    end)
end)
