-- A child process for the crash specs: writes messages to a store in
-- SYNC_FLUSH mode as fast as it can and, after each acknowledged put,
-- appends "phy qoff queueId size seq" to an ack file, until it is killed.
--
--   lua5.4 spec/support/store_writer.lua STORE_DIR ACK_FILE
local store = require("rmq.store")

local dir, ackpath = arg[1], arg[2]
local st = assert(store.open(dir, {
    mappedFileSizeCommitLog = 256 * 1024,
    mappedFileSizeConsumeQueue = 20 * 100,
    maxHashSlotNum = 128,
    maxIndexNum = 1024,
    flushDiskType = "SYNC_FLUSH",
    flushIntervalConsumeQueue = 50,
    flushConsumeQueueThoroughInterval = 200,
    storeHost = "127.0.0.1:10911",
}))
local ack = assert(io.open(ackpath, "a"))
local seq = 0
while true do
    seq = seq + 1
    local q = seq % 4
    local body = ("seq=%d;"):format(seq) .. string.rep(string.char(97 + seq % 26), 200 + (seq * 131) % 3000)
    local status, phy, qoff, wrote = st:put({
        topic = "Crash", queueId = q, body = body,
        properties = "KEYS\1c-" .. seq .. "\2TAGS\1T" .. (seq % 3),
        bornHost = "127.0.0.1:40000",
    })
    if status == "PUT_OK" then
        ack:write(("%d %d %d %d %d\n"):format(phy, qoff, q, wrote, seq))
        ack:flush()
    end
end
