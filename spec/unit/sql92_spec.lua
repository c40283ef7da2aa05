-- The SQL92 compiler and evaluator (src/filter/sql92.c through
-- rmq.filter) against RocketMQ 4.9.8's rules: expressions -> results
-- over property maps (TRUE / FALSE / NULL = unknown / ERROR = what Java
-- throws on while evaluating, which makes the message not match),
-- compile errors with 4.9.8's exception text, the size and depth
-- limits, and nonsense that must never crash.
local filter = require("rmq.filter")

local function eval(expr, props)
    local f, err = filter.compile(expr)
    assert(f, err)
    return f:eval(props)
end

describe("rmq.filter SQL92", function()
    local cases = {
        -- comparisons: property strings converted per the constant's type
        { "a > 1", { a = "3" }, "TRUE" }, { "a > 1", { a = "1" }, "FALSE" }, { "a >= 1", { a = "1" }, "TRUE" },
        { "a < 1.5", { a = "1" }, "TRUE" }, { "a <= -2", { a = "-2" }, "TRUE" },
        { "a > 1", {}, "NULL" },
        { "a > 1", { a = "x" }, "ERROR" },                -- Integer.valueOf("x") throws
        { "a > 1", { a = "3000000000" }, "ERROR" },       -- beyond Integer: throws as in Java
        { "a > 2147483648", { a = "3000000000" }, "TRUE" }, -- a Long constant: Long.valueOf
        { "a > 1.5", { a = " 2 " }, "TRUE" },             -- Double.valueOf trims
        { "a > b", { a = "10", b = "2" }, "TRUE" },       -- two strings: compared as doubles
        { "a > b", { a = "x", b = "1" }, "ERROR" },
        { "a = 1", { a = "01" }, "TRUE" }, { "a = 1", { a = "abc" }, "ERROR" },
        { "a = 'abc'", { a = "abc" }, "TRUE" }, { "a = 'it''s'", { a = "it's" }, "TRUE" },
        { "a = b", { a = "q", b = "q" }, "TRUE" }, { "a = 1.0", { a = "1" }, "TRUE" },
        { "a = TRUE", { a = "TRUE" }, "TRUE" }, { "a = FALSE", { a = "yes" }, "TRUE" },
        { "a <> 'x'", { a = "y" }, "TRUE" }, { "a <> 'x'", {}, "NULL" },
        { "1 = 1", {}, "TRUE" }, { "1 = 1L", {}, "TRUE" }, { "2 = 2.0", {}, "TRUE" },
        -- BETWEEN, IN, IS NULL
        { "a BETWEEN 1 AND 3", { a = "2" }, "TRUE" }, { "a BETWEEN 1 AND 3", { a = "4" }, "FALSE" },
        { "a BETWEEN 1 AND 3", {}, "NULL" }, { "a NOT BETWEEN 1 AND 3", { a = "4" }, "TRUE" },
        { "a IN ('x', 'y')", { a = "y" }, "TRUE" }, { "a IN ('x')", { a = "z" }, "FALSE" },
        { "a NOT IN ('x')", { a = "z" }, "TRUE" }, { "a NOT IN ('x')", {}, "NULL" },
        { "a IS NULL", {}, "TRUE" }, { "a IS NULL", { a = "" .. "v" }, "FALSE" },
        { "a IS NOT NULL", { a = "v" }, "TRUE" },
        -- three-valued logic
        { "NOT (a > 1)", {}, "NULL" }, { "NOT (a > 1)", { a = "0" }, "TRUE" },
        { "a > 1 AND b > 1", { a = "2" }, "NULL" }, { "a > 1 AND b > 1", { a = "0" }, "FALSE" },
        { "a > 1 OR b > 1", { b = "2" }, "TRUE" }, { "a > 1 OR b > 1", { a = "0" }, "NULL" },
        { "a > 1 OR TRUE", {}, "TRUE" }, { "a > 1 AND FALSE", {}, "FALSE" },
        { "FALSE AND a > 1", { a = "x" }, "FALSE" },       -- short circuit: no conversion error
        { "a > 1 AND FALSE", { a = "x" }, "ERROR" },
        { "TRUE", {}, "TRUE" }, { "NULL", {}, "NULL" }, { "NOT NULL", {}, "NULL" },
        { "a", { a = "true" }, "FALSE" },                  -- a bare property is never Boolean
        { "a", {}, "NULL" },
        { "-a < 0", { a = "5" }, "NULL" },                 -- negating a string gives null
        { "TAGS = 'TagA'", { TAGS = "TagA" }, "TRUE" },
        { "not (A > 1) and a is null or b = 'x'", { A = "0" }, "TRUE" }, -- keywords ignore case, names do not
        { "a > 1 -- comment\n", { a = "2" }, "TRUE" }, { "/* c */ a > 1", { a = "2" }, "TRUE" },
        { "a > 1 trailing words", { a = "2" }, "TRUE" },   -- JavaCC stops after a complete expression
        { "a < 1.5e1 AND b = .5", { a = "14", b = "0.5" }, "TRUE" },  -- float literals mid-text
        { "a = 5.", { a = "5" }, "TRUE" }, { "a > 1E2", { a = "101" }, "TRUE" },
        { "a > 12e", { a = "13" }, "TRUE" },               -- "12" then the name e: trailing, ignored
    }
    for _, c in ipairs(cases) do
        it(("%s over %s is %s"):format(c[1]:gsub("\n", " "), next(c[2]) and "props" or "{}", c[3]), function()
            assert.equal(c[3], eval(c[1], c[2]))
        end)
    end

    it("matches a stored properties string", function()
        local f = assert(filter.compile("a > 1 AND TAGS = 'T'"))
        assert.is_true(f:match("a\0012\002TAGS\001T"))
        assert.is_false(f:match("a\0010\002TAGS\001T"))
        assert.is_false(f:match(""))
    end)

    local errors = {
        { "", "^org%.apache%.rocketmq%.filter%.parser%.ParseException: Encountered \"<EOF>\"" },
        { "a >", "ParseException: Encountered \"<EOF>\" at line 1, column 4%." },
        { "(a > 1", "ParseException" },
        { "a != 1", "^org%.apache%.rocketmq%.filter%.parser%.TokenMgrError: Lexical error at line 1, column 3%." },
        { "a > 'x'", "^java%.lang%.RuntimeException: Value ''x'' cannot be compared%.$" },
        { "a = NULL", "^java%.lang%.RuntimeException: 'NULL' cannot be compared%.$" },
        { "TRUE = 1", "'TRUE' cannot be compared with '1'" },
        { "a BETWEEN 3 AND 1", "Illegal values of between, left value%(3%) must less than or equal to right value%(1%)" },
        { "a BETWEEN NULL AND 1", "Illegal values of between, values can not be null!" },
        { "'x' IN ('x')", "Expected a property for In expression, got: 'x'" },
        { "a IN ()", "ParseException" },
        { "a IN (1)", "ParseException" },
        { "1", "Expression will not result in a boolean value: 1" },
        { "NOT a > 1", "Value '%(NOT a%)' cannot be compared" },
        { "a > 0.0", "0%.0 is less than 4%.9E%-324" },
        { "a > 1e999", "is greater than 1%.7976931348623157E308" },
        { "a > 99999999999999999999", "^java%.lang%.NumberFormatException" },
        { "a.b = 1", "TokenMgrError" },
        { "a NOT LIKE 'x'", "ParseException" },
        { "'unterminated", "TokenMgrError" },
    }
    -- An IN after a long IN list, described in an error: the property is
    -- printed from its own node (an items index read as a node index read
    -- past the node array: ASan caught it).
    local long = {}
    for i = 0, 59 do
        long[#long + 1] = ("'%d'"):format(i)
    end
    local list = "b IN (" .. table.concat(long, ", ") .. ") AND "
    errors[#errors + 1] = { list .. "(a IN ('x')) > 1", "Value 'a IN %( x %)' cannot be compared" }
    errors[#errors + 1] = { list .. "a IN ('x') BETWEEN 1 AND 2", "Value 'a IN %( x %)' cannot be compared" }
    for _, c in ipairs(errors) do
        it("refuses " .. c[1], function()
            local f, err = filter.compile(c[1])
            assert.is_nil(f)
            assert.matches(c[2], err)
        end)
    end

    it("bounds length, depth and terms (the conf keys' limits)", function()
        local f, err = filter.compile("a > 1 AND b > 2", 5)
        assert.is_nil(f)
        assert.matches("longer than 5 bytes %(filterExpressionMaxLength%)", err)
        f, err = filter.compile(string.rep("(", 50) .. "a > 1" .. string.rep(")", 50), 1000, 20)
        assert.is_nil(f)
        assert.matches("nested deeper than 20 %(filterExpressionMaxDepth%)", err)
        f, err = filter.compile(string.rep("a > 1 AND ", 40) .. "TRUE", 10000, 20)
        assert.is_nil(f)
        assert.matches("nested deeper than 20", err)
        f, err = filter.compile(string.rep("NOT ", 10000) .. "TRUE")
        assert.is_nil(f)
        assert.matches("nested deeper than 128", err)
        f, err = filter.compile("a IN ('1','2','3','4','5','6')", 1000, 100, 5)
        assert.is_nil(f)
        assert.matches("more than 5 terms %(filterExpressionMaxNodes%)", err)
        f = assert(filter.compile(string.rep("a > 1 AND ", 60) .. "TRUE", 10000, 128))
        assert.equal("NULL", f:eval({}))
    end)

    it("survives nonsense: every answer is a filter or an error, never a crash", function()
        local pieces = { "a", "b", "TAGS", "'s'", "''", "'", "1", "1.5", ".5", "5.", "1e3", "9999999999",
                         "99999999999999999999", "0", "007", "L", "(", ")", ",", "=", "<>", "<", ">", "<=",
                         ">=", "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "+", "-",
                         "--", "/*", "*/", "\n", " ", "!", "\0", "\255", "$x", "_" }
        local seed = 12345
        local function rnd(n)
            seed = (seed * 1103515245 + 12345) % 2147483648
            return seed % n + 1
        end
        local props = { a = "1", b = "x", TAGS = "T", ["$x"] = "2" }
        local compiled = 0
        for _ = 1, 3000 do
            local parts = {}
            for k = 1, rnd(12) do
                parts[k] = pieces[rnd(#pieces)]
            end
            local f, err = filter.compile(table.concat(parts, rnd(2) == 1 and " " or ""))
            if f then
                compiled = compiled + 1
                local r = f:eval(props)
                assert.truthy(r == "TRUE" or r == "FALSE" or r == "NULL" or r == "ERROR")
            else
                assert.is_string(err)
                assert.is_nil(err:find("\n"))
            end
        end
        assert.truthy(compiled > 0)
    end)
end)
