-- A broker's run-time config updates (UPDATE_BROKER_CONFIG) cannot switch
-- on what a conf may not ask for: the same one-line refusal as at load.
local net = require("rmq.net")
local server = require("support.server")

describe("UPDATE_BROKER_CONFIG and keys rmq does not implement", function()
    local b

    setup(function()
        b = server.start({
            role = "broker", workers = 1, brokerName = "broker-a",
            storePathRootDir = server.tmpdir() .. "/store",
            mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1",
        })
    end)

    teardown(function()
        if b then assert.equal(0, b:stop()) end
    end)

    local function update(body)
        return assert(net.call(b.addr, { code = 25, body = body }, 10000))
    end

    it("refuses a feature rmq lacks or to change the broker role, and takes the values rmq has", function()
        local r = update("fetchNamesrvAddrByAddressServer=true\n")
        assert.equal(1, r.code)
        assert.equal("key 'fetchNamesrvAddrByAddressServer' = true is not supported: rmq has no address server"
            .. " client (set namesrvAddr); remove it or set false", r.remark)
        r = update("brokerRole=SYNC_MASTER\n")
        assert.equal(1, r.code)
        assert.equal("key 'brokerRole' cannot be changed while rmq runs; set it in the conf file and restart"
            .. " (live keys: brokerFastFailureEnable, brokerPermission, compressedRegister, enablePropertyFilter,"
            .. " forceRegister, osPageCacheBusyTimeOutMills, registerBrokerTimeoutMills, registerNameServerPeriod,"
            .. " slaveReadEnable, slaveReadPolicy, topicQueueNumsMax, waitTimeMillsInHeartbeatQueue,"
            .. " waitTimeMillsInPullQueue, waitTimeMillsInSendQueue, waitTimeMillsInTransactionQueue)", r.remark)
        -- SQL92 filters exist: the switch is taken at run time.
        r = update("enablePropertyFilter=true\n")
        assert.equal(0, r.code, r.remark)
        -- Unchanged values are accepted, as for any key.
        r = update("fetchNamesrvAddrByAddressServer=false\nenablePropertyFilter=false\n")
        assert.equal(0, r.code, r.remark)
        local cfg = assert(net.call(b.addr, { code = 26 }, 10000))
        assert.matches("\nfetchNamesrvAddrByAddressServer=false\n", "\n" .. cfg.body)
        assert.matches("\nregionId=DefaultRegion\n", "\n" .. cfg.body)
    end)
end)
