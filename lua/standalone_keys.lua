-- standalone_keys: the inputs of decide.lua on one Redis (standalone or Sentinel's master).
--
-- Part of the decide library, after decide.lua (limit/decide_script.cpp joins them and adds
-- the registration of the function, or the call of the script). The keys are the call's
-- KEYS; every one of them is on this server. Returns the keys, the arguments and whether
-- this is a cluster, or nil and an error reply.
local function inputs(KEYS, ARGV)
  return KEYS, ARGV, false
end
