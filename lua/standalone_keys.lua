-- standalone_keys: the inputs of decide.lua on one Redis (standalone or Sentinel's master).
--
-- Part of the decide script, between the algorithms and decide.lua (limit/decide_script.cpp
-- joins them). The keys are the call's KEYS; every one of them is on this server.
local ARGV, KEYS = ARGV, KEYS
local cluster = false
