"""Lua scripts of the Redis campaign state (:mod:`geoagent.runtime.redis_state`).

Each script runs atomically on the server (``EVAL``, https://redis.io/commands/eval/): no other command
interleaves, so the cap check and the reservation, or the stored response and its settlement, are one
step for every client on every machine. Every script validates its input *before* its first write: Redis
does not roll back the writes of a script that fails half-way.

ARGV[1] of every script is the key prefix ``geoagent:<campaign>::`` (see the layout table in
:mod:`geoagent.runtime.redis_state`); keys are built from it inside the scripts, so the state needs one
Redis server (or a primary with replicas), not Redis Cluster.

Numbers. Amounts are integer nano-USD. Redis' Lua numbers are IEEE doubles, exact for integers below
2**53 nano-USD (about 9 million USD), far above any campaign cap; they are handed back to Redis as numbers
(``HINCRBY`` receives them formatted with 17 significant digits, i.e. exactly), never through ``tostring``
(14 digits).
"""

from __future__ import annotations

# helpers shared by every script: P = prefix; `num` reads a possibly missing field as 0
_PRELUDE = r"""
local P = ARGV[1]
local function num(v) if not v then return 0 end return tonumber(v) end
-- 0 - x, never -x: Lua's -0 reaches HINCRBY as "-0", which Redis refuses as no integer (half-way through a script)
local function neg(x) return 0 - x end
local T = P .. 'totals'
-- a reservation leaves the open indexes (per owner, per request key) and the per-model open counts
local function unopen(id, owner, key, model, amount)
  redis.call('SREM', P .. 'oopen:' .. owner, id)
  redis.call('HDEL', P .. 'kopen:' .. key, id)
  redis.call('HINCRBY', T, 'open_reservations', -1)
  redis.call('HINCRBY', T, 'reserved_nusd', neg(amount))
  redis.call('HINCRBY', P .. 'm:' .. model, 'reserved_nusd', neg(amount))
  redis.call('HINCRBY', P .. 'm:' .. model, 'open_reservations', -1)
end
-- open -> unknown at `attempts` x the reservation amount (mark_unknown, recovery)
local function to_unknown(id, now, note, attempts)
  local r = P .. 'r:' .. id
  local f = redis.call('HMGET', r, 'state', 'amount', 'owner', 'key', 'model')
  if f[1] ~= 'open' then return 0 end
  local amount = tonumber(f[2])
  local model = f[5] or ''
  unopen(id, f[3], f[4], model, amount)
  redis.call('HSET', r, 'state', 'unknown', 'closed', now, 'note', note, 'attempts', attempts)
  redis.call('HINCRBY', T, 'unknown_nusd', amount * attempts)
  redis.call('HINCRBY', T, 'unknown_calls', attempts)
  redis.call('HINCRBY', P .. 'm:' .. model, 'unknown_nusd', amount * attempts)
  redis.call('HINCRBY', P .. 'm:' .. model, 'unknown_calls', attempts)
  return 1
end
-- close reservation `id` with its actual cost; 0 if already settled (idempotent); the caller checked it exists.
-- `unreported` (a note, '' = the usage was reported): the answer carried no usable usage count, so the call is
-- booked at no less than its reservation (the worst case), the note kept on the reservation and the call counted
-- per model as `unreported_calls` / `unreported_nusd` (the SQLite ledger's USAGE_NOT_REPORTED rows)
local function settle(id, actual, n_in, n_out, now, unreported)
  local r = P .. 'r:' .. id
  local f = redis.call('HMGET', r, 'state', 'amount', 'attempts', 'owner', 'key', 'model')
  local state = f[1]
  if state == 'settled' then return 0 end
  local amount, attempts, owner, model = tonumber(f[2]), num(f[3]), f[4], f[6] or ''
  local M = P .. 'm:' .. model
  if unreported and unreported ~= '' and actual < amount then actual = amount end
  if state == 'open' then
    unopen(id, owner, f[5], model, amount)
  elseif state == 'unknown' then
    redis.call('HINCRBY', T, 'unknown_nusd', neg(amount * attempts))
    redis.call('HINCRBY', T, 'unknown_calls', neg(attempts))
    redis.call('HINCRBY', M, 'unknown_nusd', neg(amount * attempts))
    redis.call('HINCRBY', M, 'unknown_calls', neg(attempts))
  end
  redis.call('HSET', r, 'state', 'settled', 'actual', actual, 'in', n_in, 'out', n_out, 'attempts', 1,
             'closed', now)
  if unreported and unreported ~= '' then
    redis.call('HSET', r, 'note', unreported)
    redis.call('HINCRBY', M, 'unreported_calls', 1)
    redis.call('HINCRBY', M, 'unreported_nusd', actual)
  end
  local over = actual - amount
  if over > 0 then
    redis.call('HINCRBY', T, 'overrun_nusd', over)
    redis.call('HINCRBY', T, 'overrun_calls', 1)
  end
  redis.call('HINCRBY', T, 'spent_nusd', actual)
  redis.call('HINCRBY', T, 'calls', 1)
  redis.call('HINCRBY', T, 'input_tokens', n_in)
  redis.call('HINCRBY', T, 'output_tokens', n_out)
  redis.call('HINCRBY', M, 'spent_nusd', actual)
  redis.call('HINCRBY', M, 'calls', 1)
  redis.call('HINCRBY', P .. 'settled_by_owner', owner, 1)
  redis.call('HINCRBY', P .. 'settled_by_owner:' .. owner, model, 1)
  return 1
end
"""

#: ARGV: prefix, reply token, reply ttl (ms), amount (nano-USD), request key, model ('' = none), has model
#: ('1'/'0'), owner, now (unix s), guard ('1': answer 'stored' / 'elsewhere' instead of reserving when the
#: response is stored or another owner holds an open reservation for the key), owner record (JSON: written to
#: ``owners`` unless there, so that recovery can judge every open reservation, also one made after a recovery
#: dropped the record of its owner, a live process that had stalled past its heartbeat), heartbeat TTL (ms: the
#: reservation refreshes the owner's heartbeat, it proves the owner alive), the owner's own cap (nano-USD, '' for
#: none: the reservation is checked against the lower of it and the campaign's cap; walk25 #1).
#: Returns {'reserved', id} | {'refused', cap, spent, reserved, unknown} | {'stored'} | {'elsewhere'} | {'lost'} (the
#: campaign's totals, its cap among them, are gone: redis36 #1 read a missing cap as $0).
RESERVE = _PRELUDE + r"""
local rep = P .. 'reply:' .. ARGV[2]
local prev = redis.call('GET', rep)
if prev then return {'reserved', tonumber(prev)} end
local amount, key, model, owner = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[8]
if ARGV[10] == '1' then
  if redis.call('HEXISTS', P .. 'resp', key) == 1 then return {'stored'} end
  local holders = redis.call('HVALS', P .. 'kopen:' .. key)
  for _, o in ipairs(holders) do if o ~= owner then return {'elsewhere'} end end
end
local t = redis.call('HMGET', T, 'cap_nusd', 'spent_nusd', 'reserved_nusd', 'unknown_nusd')
if not t[1] then return {'lost'} end  -- no cap: the totals are gone (a server restarted without persistence)
local cap, spent, reserved, unknown = num(t[1]), num(t[2]), num(t[3]), num(t[4])
local own = tonumber(ARGV[13] or '')
if own and own < cap then cap = own end
if spent + unknown + reserved + amount > cap then
  return {'refused', cap, spent, reserved, unknown}
end
local id = redis.call('INCR', P .. 'rid')
local r = P .. 'r:' .. id
redis.call('HSET', r, 'key', key, 'amount', amount, 'state', 'open', 'owner', owner, 'attempts', 1,
           'created', ARGV[9])
if ARGV[7] == '1' then redis.call('HSET', r, 'model', model) end
redis.call('HINCRBY', T, 'reserved_nusd', amount)
redis.call('HINCRBY', T, 'open_reservations', 1)
redis.call('SADD', P .. 'oopen:' .. owner, id)
redis.call('HSET', P .. 'kopen:' .. key, id, owner)
if ARGV[11] then  -- a reserving owner is alive: its record and heartbeat exist from now on
  redis.call('HSETNX', P .. 'owners', owner, ARGV[11])
  redis.call('SET', P .. 'hb:' .. owner, '1', 'PX', ARGV[12])
end
redis.call('SADD', P .. 'models', model)
redis.call('HINCRBY', P .. 'm:' .. model, 'reserved_nusd', amount)
redis.call('HINCRBY', P .. 'm:' .. model, 'open_reservations', 1)
redis.call('SET', rep, id, 'PX', ARGV[3])
return {'reserved', id}
"""

#: ARGV: prefix, reservation id, actual (nano-USD), input tokens, output tokens, now, unreported note ('' or absent:
#: the usage was reported; else :data:`geoagent.runtime.ledger.USAGE_NOT_REPORTED`). Returns 1, 0 (already
#: settled) or the error ``no reservation <id>``.
SETTLE = _PRELUDE + r"""
if redis.call('EXISTS', P .. 'r:' .. ARGV[2]) == 0 then
  return redis.error_reply('no reservation ' .. ARGV[2])
end
return settle(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7])
"""

#: ARGV: prefix, reservation id, now, note. Returns 1 if it was open (now released), else 0.
RELEASE = _PRELUDE + r"""
local r = P .. 'r:' .. ARGV[2]
local f = redis.call('HMGET', r, 'state', 'amount', 'owner', 'key', 'model')
if f[1] ~= 'open' then return 0 end
unopen(ARGV[2], f[3], f[4], f[5] or '', tonumber(f[2]))
redis.call('HSET', r, 'state', 'released', 'closed', ARGV[3], 'note', ARGV[4])
redis.call('HINCRBY', T, 'released_calls', 1)
return 1
"""

#: ARGV: prefix, reservation id, now, note, attempts. Returns 1 if it was open (now unknown), 2 if it was unknown
#: already at fewer attempts (raised to ``attempts``: recovery booked one attempt of a live process that stalled
#: past its heartbeat, and that process now reports more possibly billed ones), else 0.
MARK_UNKNOWN = _PRELUDE + r"""
local attempts = tonumber(ARGV[5])
if to_unknown(ARGV[2], ARGV[3], ARGV[4], attempts) == 1 then return 1 end
local r = P .. 'r:' .. ARGV[2]
local f = redis.call('HMGET', r, 'state', 'amount', 'attempts', 'model')
if f[1] ~= 'unknown' then return 0 end
local more = attempts - num(f[3])
if more <= 0 then return 0 end
local amount, M = tonumber(f[2]), P .. 'm:' .. (f[4] or '')
redis.call('HSET', r, 'attempts', attempts, 'note', ARGV[4])
redis.call('HINCRBY', T, 'unknown_nusd', amount * more)
redis.call('HINCRBY', T, 'unknown_calls', more)
redis.call('HINCRBY', M, 'unknown_nusd', amount * more)
redis.call('HINCRBY', M, 'unknown_calls', more)
return 2
"""

#: ARGV: prefix, now, then (owner, mode) pairs; mode 'force' converts the owner's open reservations, 'hb'
#: only when its heartbeat key ``hb:<owner>`` is gone (expired). A converted owner's record is dropped.
#: Returns the number of reservations converted to unknown-outcome spend.
RECOVER = _PRELUDE + r"""
local converted = 0
for i = 3, #ARGV, 2 do
  local owner, mode = ARGV[i], ARGV[i + 1]
  if mode == 'force' or redis.call('EXISTS', P .. 'hb:' .. owner) == 0 then
    local ids = redis.call('SMEMBERS', P .. 'oopen:' .. owner)
    for _, id in ipairs(ids) do
      converted = converted + to_unknown(id, ARGV[2], 'owner process gone', 1)
    end
    redis.call('HDEL', P .. 'owners', owner)
    redis.call('DEL', P .. 'hb:' .. owner)
  end
end
return converted
"""

#: ARGV: prefix, owner. Drops the owner record and heartbeat if it holds no open reservation; returns 1 if so.
RETIRE = _PRELUDE + r"""
if redis.call('SCARD', P .. 'oopen:' .. ARGV[2]) > 0 then return 0 end
redis.call('HDEL', P .. 'owners', ARGV[2])
redis.call('DEL', P .. 'hb:' .. ARGV[2])
return 1
"""

#: ARGV: prefix, reply token, reply ttl (ms), key, record (JSON), model field ('\0' = none), reservation id
#: ('' = none), actual (nano-USD), input tokens, output tokens, now, unreported note (as for ``SETTLE``). Stores the
#: record unless the key has one and settles the reservation, both or neither. Returns 1 (stored now) or 0 (kept the
#: earlier one).
PUT_RESPONSE = _PRELUDE + r"""
local rep = P .. 'reply:' .. ARGV[2]
local prev = redis.call('GET', rep)
if prev then return tonumber(prev) end
local rid = ARGV[7]
if rid ~= '' and redis.call('EXISTS', P .. 'r:' .. rid) == 0 then
  return redis.error_reply('no reservation ' .. rid)
end
local stored = redis.call('HSETNX', P .. 'resp', ARGV[4], ARGV[5])
if stored == 1 then
  redis.call('ZADD', P .. 'resp_seq', redis.call('INCR', P .. 'resp_n'), ARGV[4])
  redis.call('HINCRBY', P .. 'resp_models', ARGV[6], 1)
end
if rid ~= '' then settle(rid, tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11], ARGV[12]) end
redis.call('SET', rep, stored, 'PX', ARGV[3])
return stored
"""

#: ARGV: prefix, table, overwrite ('1'/'0'), then (key, row JSON) pairs. Returns how many rows were written
#: (every row with overwrite, as SQLite's INSERT OR REPLACE counts; only new keys without).
PUT_RESULTS = _PRELUDE + r"""
local H, Z = P .. 't:' .. ARGV[2], P .. 'tk:' .. ARGV[2]
local n = 0
for i = 4, #ARGV, 2 do
  if ARGV[3] == '1' then
    redis.call('HSET', H, ARGV[i], ARGV[i + 1])
    n = n + 1
  else
    n = n + redis.call('HSETNX', H, ARGV[i], ARGV[i + 1])
  end
  redis.call('ZADD', Z, 0, ARGV[i])
end
if n > 0 then redis.call('SADD', P .. 'tables', ARGV[2]) end
return n
"""
