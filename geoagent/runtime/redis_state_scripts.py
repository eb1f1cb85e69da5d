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
-- book reservation `id` (not open) as unknown-outcome spend at `attempts` x `amount`
local function book_unknown(id, model, amount, now, note, attempts)
  redis.call('HSET', P .. 'r:' .. id, 'state', 'unknown', 'closed', now, 'note', note, 'attempts', attempts)
  redis.call('HINCRBY', T, 'unknown_nusd', amount * attempts)
  redis.call('HINCRBY', T, 'unknown_calls', attempts)
  redis.call('HINCRBY', P .. 'm:' .. model, 'unknown_nusd', amount * attempts)
  redis.call('HINCRBY', P .. 'm:' .. model, 'unknown_calls', attempts)
end
-- open -> unknown at `attempts` x the reservation amount (mark_unknown, recovery)
local function to_unknown(id, now, note, attempts)
  local r = P .. 'r:' .. id
  local f = redis.call('HMGET', r, 'state', 'amount', 'owner', 'key', 'model')
  if f[1] ~= 'open' then return 0 end
  local amount = tonumber(f[2])
  local model = f[5] or ''
  unopen(id, f[3], f[4], model, amount)
  book_unknown(id, model, amount, now, note, attempts)
  return 1
end
-- a new reservation id (redis39 #1b): the counter `rid` followed by the caller's random 6-digit `salt`, built as a
-- string (Lua would print a large number in exponent form). A server that lost its most recent writes (a failover
-- to a replica behind the primary, a restart from an older snapshot) counts `rid` again from an older value; the
-- salt keeps the ids it hands out again apart from those live processes still hold. Indexed in `rids` (score = id:
-- exact below 2**53) for iteration; `rid_legacy` keeps the last id of a campaign begun with plain counter ids.
local function new_id(salt)
  local n = redis.call('INCR', P .. 'rid')
  if redis.call('EXISTS', P .. 'rids') == 0 then redis.call('SETNX', P .. 'rid_legacy', n - 1) end
  local id = n .. string.format('%06d', tonumber(salt))
  redis.call('ZADD', P .. 'rids', id, id)
  return id
end
-- whether reservation `id` on the server is the caller's (redis39 #1a): 'mine', 'missing' (the server lost it) or
-- 'other' (its id was handed out again, to another request key or owner). `key` nil: an old caller, not checked.
local function whose(id, key, owner)
  local f = redis.call('HMGET', P .. 'r:' .. id, 'key', 'owner')
  if not f[1] then return 'missing' end
  if key == nil or (f[1] == key and f[2] == owner) then return 'mine' end
  return 'other'
end
-- the id a caller's call is booked under when its reservation id names another caller's (whose = 'other'), and
-- whether it is new: made once per (id, owner, key) and remembered, so a retry of the same script after a lost reply
-- books the call on the same record instead of a second one (review39a #4: SETTLE and MARK_UNKNOWN booked twice)
local function moved_id(id, key, owner, salt)
  local m = P .. 'moved:' .. id .. ':' .. owner .. ':' .. key
  local known = redis.call('GET', m)
  if known then return known, false end
  local fresh = new_id(salt)
  redis.call('SET', m, fresh)
  return fresh, true
end
-- a caller's reservation the server lost, written again as record `id` in state 'lost' (closed at once by the
-- caller's settle or unknown-outcome booking; never counted as open): the call's cost gets a record like any other
local function rebook(id, key, owner, model, has_model, amount, now, note)
  local r = P .. 'r:' .. id
  redis.call('HSET', r, 'key', key, 'amount', amount, 'state', 'lost', 'owner', owner, 'attempts', 1,
             'created', now, 'note', note)
  if has_model == '1' then redis.call('HSET', r, 'model', model) end
  redis.call('SADD', P .. 'models', model)
  if not redis.call('ZSCORE', P .. 'rids', id) then redis.call('ZADD', P .. 'rids', id, id) end
end
-- the note of a rebooked reservation
local LOST_NOTE = 'the Redis server lost this reservation (it lost recent writes); booked again by its caller'
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
#: none: the reservation is checked against the lower of it and the campaign's cap; walk25 #1), the id's random salt
#: (0..999999, ``new_id``), the owner's write count the caller saw last ('' = none yet; redis39 #1c).
#: Returns {'reserved', id (a string of digits), write count} (a retried call: the same) | {'refused', cap, spent,
#: reserved, unknown} | {'stored'} | {'elsewhere'} | {'lost'} (the campaign's totals, its cap among them, are gone:
#: redis36 #1 read a missing cap as $0) | {'rolledback', write count} (the server's count of this owner's
#: reservations is below what it answered before: it lost recent writes; nothing reserved).
RESERVE = _PRELUDE + r"""
local rep = P .. 'reply:' .. ARGV[2]
local prev = redis.call('GET', rep)
if prev then  -- '<id>:<write count>' (a record of an older version: '<id>')
  local at = string.find(prev, ':', 1, true)
  if not at then return {'reserved', prev} end
  return {'reserved', string.sub(prev, 1, at - 1), tonumber(string.sub(prev, at + 1))}
end
local amount, key, model, owner = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[8]
if ARGV[10] == '1' then
  if redis.call('HEXISTS', P .. 'resp', key) == 1 then return {'stored'} end
  local holders = redis.call('HVALS', P .. 'kopen:' .. key)
  for _, o in ipairs(holders) do if o ~= owner then return {'elsewhere'} end end
end
local t = redis.call('HMGET', T, 'cap_nusd', 'spent_nusd', 'reserved_nusd', 'unknown_nusd')
if not t[1] then return {'lost'} end  -- no cap: the totals are gone (a server restarted without persistence)
if ARGV[15] and ARGV[15] ~= '' then  -- the owner's count of reservations went back (redis39 #1c)
  local seen = tonumber(redis.call('HGET', P .. 'wseq', owner) or '0')
  if seen < tonumber(ARGV[15]) then return {'rolledback', seen} end
end
local cap, spent, reserved, unknown = num(t[1]), num(t[2]), num(t[3]), num(t[4])
local own = tonumber(ARGV[13] or '')
if own and own < cap then cap = own end
if spent + unknown + reserved + amount > cap then
  return {'refused', cap, spent, reserved, unknown}
end
local id = new_id(ARGV[14] or '0')
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
local wseq = redis.call('HINCRBY', P .. 'wseq', owner, 1)
redis.call('SET', rep, id .. ':' .. wseq, 'PX', ARGV[3])
return {'reserved', id, wseq}
"""

#: The reservation the caller holds, as it knows it (redis39 #1a; absent: not checked): its request key, owner, amount
#: (nano-USD), model, has model ('1'/'0'), and a random salt (0..999999) for a new id.
_HELD = "request key, owner, amount (nano-USD), model, has model ('1'/'0'), salt for a new id (0..999999)"

#: What a script answers when the reservation the caller holds is not on the server (redis39 #1a): LOST_MISSING, it
#: is gone (booked again under its own id); LOST_OTHER, its id names another caller's reservation (left alone; the
#: call booked under a new id). Either means the server lost recent writes. ``GONE``: as LOST_MISSING, but the
#: campaign's totals are gone too (a server flushed or restarted empty): nothing booked, the error ``lost``.
LOST_MISSING, LOST_OTHER = -1, -2

#: ARGV: prefix, reservation id, actual (nano-USD), input tokens, output tokens, now, unreported note ('' the usage was
#: reported; else :data:`geoagent.runtime.ledger.USAGE_NOT_REPORTED`), then the reservation as held (``_HELD``).
#: Returns 1, 0 (already settled), LOST_MISSING / LOST_OTHER (the call settled on a record written again), or the
#: error ``lost`` (totals gone) / ``no reservation <id>`` (missing, an old caller that did not say what it holds).
SETTLE = _PRELUDE + r"""
local id, key, owner = ARGV[2], ARGV[8], ARGV[9]
local who = whose(id, key, owner)
if who ~= 'mine' then
  if key == nil then return redis.error_reply('no reservation ' .. id) end
  if redis.call('HEXISTS', T, 'cap_nusd') == 0 then return redis.error_reply('lost') end
  local fresh = true
  if who == 'other' then id, fresh = moved_id(id, key, owner, ARGV[13]) end
  if fresh then rebook(id, key, owner, ARGV[11], ARGV[12], tonumber(ARGV[10]), ARGV[6], LOST_NOTE) end
end
local done = settle(id, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7])
if who == 'missing' then return -1 elseif who == 'other' then return -2 end
return done
"""

#: ARGV: prefix, reservation id, now, note, then the request key and owner of the reservation as held (absent: not
#: checked). Returns 1 if it was open (now released), 0 if not, LOST_MISSING / LOST_OTHER (nothing changed: the call
#: was not billed, and another caller's reservation is left alone).
RELEASE = _PRELUDE + r"""
local who = whose(ARGV[2], ARGV[5], ARGV[6])
if who == 'missing' then return -1 elseif who == 'other' then return -2 end
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
#: past its heartbeat, and that process now reports more possibly billed ones), else 0; with the reservation as held
#: (``_HELD``, from ARGV[6]) LOST_MISSING / LOST_OTHER: booked as unknown-outcome spend on a record written again, or
#: the error ``lost`` (totals gone).
MARK_UNKNOWN = _PRELUDE + r"""
local attempts = tonumber(ARGV[5])
local id, key, owner = ARGV[2], ARGV[6], ARGV[7]
local who = whose(id, key, owner)
if who == 'missing' and key == nil then return 0 end
if who ~= 'mine' then
  if redis.call('HEXISTS', T, 'cap_nusd') == 0 then return redis.error_reply('lost') end
  local fresh = true
  if who == 'other' then id, fresh = moved_id(id, key, owner, ARGV[11]) end
  local amount = tonumber(ARGV[8])
  if fresh then
    rebook(id, key, owner, ARGV[9], ARGV[10], amount, ARGV[3], LOST_NOTE)
    local model = ARGV[9]
    if ARGV[10] ~= '1' then model = '' end
    book_unknown(id, model, amount, ARGV[3], LOST_NOTE .. ': ' .. ARGV[4], attempts)
  end
  if who == 'missing' then return -1 end
  return -2
end
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
redis.call('HDEL', P .. 'wseq', ARGV[2])
return 1
"""

#: ARGV: prefix, reply token, reply ttl (ms), key, record (JSON), model field ('\0' = none), reservation id
#: ('' = none), actual (nano-USD), input tokens, output tokens, now, unreported note (as for ``SETTLE``), then the
#: reservation as held (``_HELD``; absent: not checked). Stores the record unless the key has one and settles the
#: reservation, both or neither. Returns {stored, lost}: stored 1 (stored now) or 0 (kept the earlier one); lost 0,
#: or LOST_MISSING / LOST_OTHER (the call settled on a record written again, redis39 #1a). Errors: ``lost`` (the
#: reservation and the campaign's totals are gone: nothing stored), ``no reservation <id>`` (an old caller's
#: reservation is missing).
PUT_RESPONSE = _PRELUDE + r"""
local rep = P .. 'reply:' .. ARGV[2]
local prev = redis.call('GET', rep)
if prev then return {tonumber(prev), 0} end
local rid, key, owner = ARGV[7], ARGV[13], ARGV[14]
local who = 'mine'
if rid ~= '' then
  who = whose(rid, key, owner)
  if who == 'missing' and key == nil then return redis.error_reply('no reservation ' .. rid) end
  if who ~= 'mine' and redis.call('HEXISTS', T, 'cap_nusd') == 0 then return redis.error_reply('lost') end
end
local stored = redis.call('HSETNX', P .. 'resp', ARGV[4], ARGV[5])
if stored == 1 then
  redis.call('ZADD', P .. 'resp_seq', redis.call('INCR', P .. 'resp_n'), ARGV[4])
  redis.call('HINCRBY', P .. 'resp_models', ARGV[6], 1)
end
if rid ~= '' then
  local fresh = true
  if who == 'other' then rid, fresh = moved_id(rid, key, owner, ARGV[18]) end
  if who ~= 'mine' and fresh then rebook(rid, key, owner, ARGV[16], ARGV[17], tonumber(ARGV[15]), ARGV[11], LOST_NOTE) end
  settle(rid, tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11], ARGV[12])
end
redis.call('SET', rep, stored, 'PX', ARGV[3])
local lost = 0
if who == 'missing' then lost = -1 elseif who == 'other' then lost = -2 end
return {stored, lost}
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

#: ARGV: prefix, table, then (old key, new key, row JSON, request key or '') quads: each row is written under its new
#: key only when that key has no row (HSETNX: a row another process stored there since the row was read is kept;
#: review41c #3), and its old key is deleted only when the new key then holds this answer: the row written here, the
#: same JSON, or a row of the same non-empty request key. Every write comes first and the deletes after: a script
#: stopped half-way (an error, e.g. the server refusing a write when out of memory) has deleted nothing, so a moved
#: row is never lost, at worst kept under both keys until the next move drops the old one (review41c #4: a MULTI of
#: PUT_RESULTS + HDEL + ZREM ran the deletes even when the script failed; Redis does not roll back). Returns
#: {moved, dropped}.
MOVE_RESULTS = _PRELUDE + r"""
local H, Z = P .. 't:' .. ARGV[2], P .. 'tk:' .. ARGV[2]
local function request_of(text)
  local ok, row = pcall(cjson.decode, text)
  if ok and type(row) == 'table' and type(row.request_key) == 'string' then return row.request_key end
  return nil
end
local gone, moved = {}, 0
for i = 3, #ARGV, 4 do
  if redis.call('HSETNX', H, ARGV[i + 1], ARGV[i + 2]) == 1 then
    redis.call('ZADD', Z, 0, ARGV[i + 1])
    moved = moved + 1
    gone[#gone + 1] = ARGV[i]
  else
    local there = redis.call('HGET', H, ARGV[i + 1])
    if there == ARGV[i + 2] or (ARGV[i + 3] ~= '' and request_of(there) == ARGV[i + 3]) then
      gone[#gone + 1] = ARGV[i]
    end
  end
end
if moved > 0 then redis.call('SADD', P .. 'tables', ARGV[2]) end
for _, key in ipairs(gone) do
  redis.call('HDEL', H, key)
  redis.call('ZREM', Z, key)
end
return {moved, #gone - moved}
"""

#: ARGV: prefix, table, key, fallback key, row JSON, request key or '': the row is written under the key when it has
#: none (HSETNX) or holds a row of the same non-empty request key (HSET), else under the fallback key (HSET); the
#: decision and the write are one script, so a row another process stores under the key meanwhile is never
#: overwritten by another answer (fixgeohint42 #3: the scorer's write of a swapped-image task queued under its
#: earlier key, as MOVE_RESULTS). Returns the key written.
PUT_RESULT_UNLESS_OTHER = _PRELUDE + r"""
local H, Z = P .. 't:' .. ARGV[2], P .. 'tk:' .. ARGV[2]
local at = ARGV[3]
if redis.call('HSETNX', H, at, ARGV[5]) == 0 then
  local ok, there = pcall(cjson.decode, redis.call('HGET', H, at))
  if not (ARGV[6] ~= '' and ok and type(there) == 'table' and there.request_key == ARGV[6]) then at = ARGV[4] end
  redis.call('HSET', H, at, ARGV[5])
end
redis.call('ZADD', Z, 0, at)
redis.call('SADD', P .. 'tables', ARGV[2])
return at
"""
