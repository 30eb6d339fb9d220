-- cluster_keys: the inputs of decide.lua on a Redis Cluster master.
--
-- Part of the decide library, after decide.lua (limit/decide_script.cpp joins them); on a
-- cluster the function is registered with the flag allow-cross-slot-keys (the script form
-- starts with the shebang line "#!lua flags=allow-cross-slot-keys").
--
-- A batch holds requests of several hash slots owned by this master. Redis refuses KEYS of
-- different slots (CROSSSLOT) even with that flag, so a batch passes its keys in ARGV:
--   ARGV[1]  K, the number of keys; ARGV[2..K+1] the keys; the rest is decide.lua's ARGV.
-- and KEYS is empty. The flag lets the code touch those keys where this node serves them;
-- a key it does not serve fails when read, and decide.lua answers that request "elsewhere",
-- untouched (see read_failed there). The proxy sends such a request again on its own, with
-- its keys as KEYS, and Redis's usual MOVED / ASK / TRYAGAIN say where.
--
-- A call with KEYS (a request sent on its own) uses them as they are: Redis checked the slot.
-- Returns the keys, the arguments and true, or nil and an error reply.
local function inputs(KEYS, ARGV)
  if #KEYS > 0 then return KEYS, ARGV, true end
  local nkeys = tonumber(ARGV[1])
  if not nkeys or nkeys < 0 or nkeys % 1 ~= 0 or nkeys + 1 > #ARGV then
    return nil, redis.error_reply('ERR decide: argument 1 is not a number of keys')
  end
  local keys, args = {}, {}
  for i = 1, nkeys do keys[i] = ARGV[i + 1] end
  for i = nkeys + 2, #ARGV do args[#args + 1] = ARGV[i] end
  return keys, args, true
end
