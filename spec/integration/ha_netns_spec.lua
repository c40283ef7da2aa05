-- Master and slave in two network namespaces, the link between them cut
-- and healed under load (scripts/netns-ha.sh --short): replication stalls,
-- resumes and converges byte for byte.  Pending where namespaces cannot be
-- made (not root, a container without CAP_SYS_ADMIN): the script says why.
describe("HA across a cut network link (netns)", function()
    it("stalls while cut, then converges with the master's files", function()
        local build = os.getenv("RMQ_BUILD") or "build"
        local p = assert(io.popen("scripts/netns-ha.sh --short --build " .. build .. " 2>&1; echo rc=$?"))
        local out = p:read("a")
        p:close()
        local rc = tonumber(out:match("rc=(%d+)%s*$"))
        if rc == 77 then
            pending(out:match("SKIPPED: ([^\n]*)") or "skipped")
            return
        end
        assert.equal(0, rc, out)
        assert.matches("stalled: the slave's files did not change while cut", out)
        assert.matches("converged %d+ ms after the last send", out)
        assert.matches("netns%-ha: OK", out)
    end)
end)
