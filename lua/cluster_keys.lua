-- cluster_keys: the inputs of decide.lua on a Redis Cluster master.
--
-- Part of the decide script, between the algorithms and decide.lua; on a cluster the script
-- starts with the shebang line "#!lua flags=allow-cross-slot-keys" (limit/decide_script.cpp).
--
-- A batch holds requests of several hash slots owned by this master. Redis refuses KEYS of
-- different slots (CROSSSLOT) even with that flag, so a batch passes its keys in ARGV:
--   ARGV[1]  K, the number of keys; ARGV[2..K+1] the keys; the rest is decide.lua's ARGV.
-- and KEYS is empty. The flag lets the script touch those keys when this node serves them.
-- A key it does not serve now (its slot moved, or is migrating away and the key has left)
-- would fail the call midway, after earlier requests wrote: so every key is tried first with
-- a read (pcall: an error is an answer, not a failure), and a request with a key that fails
-- is answered "elsewhere" by decide.lua, untouched. The proxy sends such a request again on
-- its own, with its keys as KEYS, and Redis's usual MOVED / ASK / TRYAGAIN say where.
--
-- A call with KEYS (a request sent on its own) uses them as they are: Redis checked the slot.
local ARGV, KEYS = ARGV, KEYS
local foreign = nil
if #KEYS == 0 then
  local nkeys = tonumber(ARGV[1])
  if not nkeys or nkeys < 0 or nkeys % 1 ~= 0 or nkeys + 1 > #ARGV then
    return redis.error_reply('ERR decide: argument 1 is not a number of keys')
  end
  local keys, args = {}, {}
  for i = 1, nkeys do keys[i] = ARGV[i + 1] end
  for i = nkeys + 2, #ARGV do args[#args + 1] = ARGV[i] end
  for i = 1, nkeys do
    local key = keys[i]
    if type(redis.pcall('EXISTS', key)) ~= 'number' then
      foreign = foreign or {}
      foreign[key] = true
    end
  end
  ARGV, KEYS = args, keys
end
