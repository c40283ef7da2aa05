-- Policies: the decisions a user may want to change, as plain functions
-- of a facts table (no I/O, no waiting).  A conf or a client option names
-- one by module ("rmq.policy.queue_select") or gives the function itself.
local M = {}

-- Moves (in this Lua state) each time the live console swapped a policy
-- module's code (rmq.console_live.swap): whoever caches resolved policy
-- functions resolves them again when it changed.
local generation = 0

function M.generation()
    return generation
end

function M.bump()
    generation = generation + 1
end

--- Resolves a policy spec to a function.
-- @param spec     a function, a module name, or a module table
-- @param field    the function's name inside a module (e.g. "select")
-- @param default  module name used when spec is nil
-- @return function, or nil, error message
function M.resolve(spec, field, default)
    spec = spec or default
    if type(spec) == "function" then
        return spec
    end
    local mod = spec
    if type(spec) == "string" then
        local ok, loaded = pcall(require, spec)
        if not ok then
            return nil, ("cannot load policy module '%s': %s"):format(spec, loaded)
        end
        mod = loaded
    end
    if type(mod) == "table" and type(mod[field]) == "function" then
        return mod[field]
    end
    return nil, ("policy %s has no function '%s'"):format(tostring(spec), field)
end

return M
