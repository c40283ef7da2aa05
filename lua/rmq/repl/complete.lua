-- Tab completion for `rmq repl`, as a plain function of what is typed:
--
--   complete.candidates(word, before, env, names) -> {candidates}
--     word    the word under the cursor (the line editor splits at blanks,
--             quotes, parentheses and commas)
--     before  the line before that word
--     env     the session's environment (its functions and variables)
--     names   a names cache (rmq.repl.names): topics(), groups()
--     docs    the functions' docs (rmq.repl.commands: session.docs), for
--             option names in an admin command's option table
--
-- Inside a string (the word follows a quote) the candidates are topic or
-- group names, closed by the same quote: group names where the function
-- called, or the option set, is about groups or consumers (consume's
-- second argument too), topic names otherwise.  Typing a key of an admin
-- command's option table (update_topic{wr), its option names.  After "a.b." the fields
-- of that table.  Else the session's functions (with "(" added), its
-- variables, Lua's globals and keywords.
local M = {}

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
                   "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while" }

local MAX = 500   -- candidates offered at most

local function starts(s, prefix)
    return s:sub(1, #prefix) == prefix
end

local function add_prefixed(out, seen, list, prefix, suffix)
    for _, s in ipairs(list) do
        if #out >= MAX then
            return
        end
        if type(s) == "string" and starts(s, prefix) and not seen[s] then
            seen[s] = true
            out[#out + 1] = s .. (suffix or "")
        end
    end
end

-- Where the cursor is, from the text before it: the function whose
-- arguments it is in (fname) and which argument (arg, 1-based); inside
-- an option table ({...} right after fname, or as an argument), the key
-- being given a value (key), or at_key when a key is being typed.
local function call_context(before)
    local depth, arg = 0, 1
    local ctx = {}
    for i = #before, 1, -1 do
        local c = before:sub(i, i)
        if c == ")" or c == "}" then
            depth = depth + 1
        elseif c == "(" or c == "{" then
            if depth == 0 then
                local name = before:sub(1, i - 1):match("([%w_]+)%s*$")
                if c == "{" and not ctx.brace then
                    ctx.brace = true
                    local inner = before:sub(i + 1)
                    ctx.key = inner:match("([%w_]+)%s*=%s*$")
                    ctx.at_key = inner:match("^[^=]*$") ~= nil or inner:match(",%s*$") ~= nil
                    if name then   -- fname{...}
                        ctx.fname, ctx.arg = name, 1
                        return ctx
                    end
                    arg = 1   -- count the enclosing call's arguments now
                else
                    ctx.fname, ctx.arg = name, arg
                    return ctx
                end
            else
                depth = depth - 1
            end
        elseif c == "," and depth == 0 then
            arg = arg + 1
        end
    end
    ctx.arg = arg
    return ctx
end

local function wants_groups(fname, arg, key)
    if key then
        return key == "g" or key == "s" or key:lower():find("group") ~= nil or key:lower():find("consumer") ~= nil
    end
    if fname == nil then
        return false
    end
    if fname == "consume" then
        return arg == 2
    end
    return fname:find("group") ~= nil or fname:find("consumer") ~= nil
end

local function identifier_keys(t, out)
    for k in pairs(t) do
        if type(k) == "string" and k:match("^[%a_][%w_]*$") then
            out[#out + 1] = k
        end
    end
end

local function fields(env, path)
    local t = env
    for part in path:gmatch("[^.:]+") do
        local ok, v = pcall(function() return t[part] end)
        if not ok or type(v) ~= "table" then
            return nil
        end
        t = v
    end
    local keys = {}
    identifier_keys(t, keys)
    local mt = getmetatable(t)
    if type(mt) == "table" and type(mt.__index) == "table" then
        identifier_keys(mt.__index, keys)
    end
    table.sort(keys)
    return keys, t
end

function M.candidates(word, before, env, names, docs)
    local out, seen = {}, {}
    local quote = before:sub(-1)
    if quote == '"' or quote == "'" then
        local ctx = call_context(before:sub(1, -2))
        local ok, list
        if wants_groups(ctx.fname, ctx.arg, ctx.key) then
            ok, list = pcall(names.groups, names)
        else
            ok, list = pcall(names.topics, names)
        end
        if ok then
            add_prefixed(out, seen, list, word, quote)
        end
        return out
    end
    local path, last = word:match("^(.*)[.:]([%w_]*)$")
    if path then
        local keys, t = fields(env, path)
        if keys then
            local sep = word:sub(#path + 1, #path + 1)
            for _, k in ipairs(keys) do
                if #out >= MAX then
                    break
                end
                if starts(k, last) and not seen[k] then
                    seen[k] = true
                    out[#out + 1] = path .. sep .. k .. (type(t[k]) == "function" and "(" or "")
                end
            end
        end
        return out
    end
    -- An option's name in an admin command's option table.
    local ctx = call_context(before)
    if ctx.brace and ctx.at_key and ctx.fname and docs and docs[ctx.fname] then
        for _, o in ipairs(docs[ctx.fname].options or {}) do
            if o.long and starts(o.long, word) and #out < MAX then
                out[#out + 1] = o.long .. " = "
            end
        end
        if #out > 0 then
            return out
        end
    end
    local own = {}
    identifier_keys(env, own)
    table.sort(own)
    for _, k in ipairs(own) do
        if starts(k, word) and #out < MAX then
            seen[k] = true
            out[#out + 1] = k .. (type(env[k]) == "function" and "(" or "")
        end
    end
    local globals = {}
    identifier_keys(_G, globals)
    table.sort(globals)
    for _, k in ipairs(globals) do
        if starts(k, word) and not seen[k] and #out < MAX then
            seen[k] = true
            out[#out + 1] = k .. (type(_G[k]) == "function" and "(" or "")
        end
    end
    add_prefixed(out, seen, KEYWORDS, word, nil)
    return out
end

return M
