-- luacheck (Debian's lua-check), run by scripts/test.sh before the specs:
-- any warning fails the run.  Lua 5.4, and no globals anywhere: modules
-- return tables.
std = "lua54"
max_line_length = false
exclude_files = { "build*/**", "spec/interop/ali_ons/node_modules/**" }

-- busted's describe/it/assert/... in the specs and their helpers.
files["spec/"] = { std = "+busted" }

-- A handler keeps its whole signature (ctx, cmd, h), used or not: it is
-- the processor contract, and reads better than _ctx.
unused_args = false
