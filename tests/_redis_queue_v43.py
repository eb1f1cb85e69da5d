"""The Redis queue scripts of the version before lane streams (session 43, commit 589ed6b2), frozen: an older process.

Tests of the lane streams' upgrade (tests/test_redis_lanes44.py) run these beside the current code on one queue, as
a process of that version still running after an upgrade would: it puts every task into ``stream`` (no lane
recorded), leases only from ``stream`` and from the expired leases, and acks, releases and nacks by the ``entry``
hash. Copied word for word from ``geoagent/runtime/redis_queue.py`` of that version (``_PRELUDE``, ``_PUT``,
``_LEASE``, ``_FINISH``); :class:`OldQueue` calls them with that version's keys (13 queue keys, then the reply
record, then the ``consumers`` hash).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from geoagent.runtime.queue import SUPERSEDED, Task

KEY_SUFFIXES = (
    "stream", "payload", "state", "attempts", "error", "lease", "entry", "leases", "delayed", "dead", "counts",
    "charges", "killer",
)

# Shared prelude of every script: names for KEYS, the server clock, group creation, the two moves that
# keep the stream, the PEL and the indexes in step, and ``once``, the reply record of a mutating call.
_PRELUDE = """
redis.replicate_commands()
local S, PAY, ST, ATT, ERR, LID, ENT, LEASES, DELAYED, DEAD, CNT =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local CHG, KILL = KEYS[12], KEYS[13]
local GROUP = ARGV[1]
local SUPERSEDED = '""" + SUPERSEDED + """'
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function ensure_group()
  if redis.call('EXISTS', S) == 0 then
    redis.call('XGROUP', 'CREATE', S, GROUP, '0', 'MKSTREAM')
  end
end
-- make a task deliverable now: a fresh stream entry, state ready (counts are the caller's business)
local function enqueue(key)
  local id = redis.call('XADD', S, '*', 'k', key)
  redis.call('HSET', ENT, key, id)
  redis.call('HSET', ST, key, 'ready')
end
-- a dead or done task back to ready with a clean record: its failed attempts, recorded charges and killing charge
-- forgotten, a fresh stream entry (requeue_dead, reopen_done; counts are the caller's business)
local function revive(key)
  redis.call('HDEL', ATT, key)
  redis.call('HDEL', CHG, key)
  redis.call('HDEL', KILL, key)
  enqueue(key)
end
-- revive each task of keys that is in state `from` ('dead': requeue_dead, 'done': reopen_done), after `before(key)`
-- when given, and move the counts with them; returns how many moved
local function revive_from(from, keys, before)
  local moved = 0
  for _, key in ipairs(keys) do
    if redis.call('HGET', ST, key) == from then
      if before then before(key) end
      revive(key)
      moved = moved + 1
    end
  end
  if moved > 0 then
    redis.call('HINCRBY', CNT, from, -moved)
    redis.call('HINCRBY', CNT, 'ready', moved)
  end
  return moved
end
-- take a leased task out of the PEL and the stream, and drop its lease
local function unlink(key)
  local id = redis.call('HGET', ENT, key)
  if id then
    redis.call('XACK', S, GROUP, id)
    redis.call('XDEL', S, id)
    redis.call('HDEL', ENT, key)
  end
  redis.call('HDEL', LID, key)
  redis.call('ZREM', LEASES, key)
end
-- Run a mutating call at most once per call token. KEYS[14] is this call's reply record, ARGV[2] its
-- lifetime in ms. A first run applies the effect (apply() returns the reply and, optionally, a smaller
-- record to keep) and writes the record in the same atomic script; a repeat of the token (redis-py
-- retrying after a lost reply) changes nothing and answers from the record (through replay() if given).
local function once(apply, replay)
  local seen = redis.call('GET', KEYS[14])
  if seen then
    local record = cmsgpack.unpack(seen)
    if replay then return replay(record) end
    return record
  end
  local reply, record = apply()
  if record == nil then record = reply end
  redis.call('SET', KEYS[14], cmsgpack.pack(record), 'PX', ARGV[2])
  return reply
end
"""

# ARGV: group, reply ttl ms, key1, payload1, key2, payload2, ... -> number added (by the first run)
_PUT = _PRELUDE + """
return once(function()
  ensure_group()
  local added = 0
  for i = 3, #ARGV, 2 do
    local key = ARGV[i]
    if redis.call('HSETNX', PAY, key, ARGV[i + 1]) == 1 then
      enqueue(key)
      added = added + 1
    end
  end
  if added > 0 then redis.call('HINCRBY', CNT, 'ready', added) end
  return added
end)
"""

# ARGV: group, reply ttl ms, consumer, n, visibility timeout us, token, promote limit, consumer record (JSON; KEYS[15]
# is the ``consumers`` hash) -> list of {key, payload, attempts, lease id, last error or nil}
# The record keeps only the granted keys in order (lease id i is '<token>.<i>'); a replay rebuilds the rows
# of the tasks this lease still holds (payload is immutable, attempts and error cannot change while held).
_LEASE = _PRELUDE + """
local consumer, n, vt, token = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local function row(key, lid)
  return {key, redis.call('HGET', PAY, key), tonumber(redis.call('HGET', ATT, key) or '0'), lid,
          redis.call('HGET', ERR, key)}
end
local function replay(granted)
  local out = {}
  for i, key in ipairs(granted) do
    local lid = token .. '.' .. i
    if redis.call('HGET', ST, key) == 'leased' and redis.call('HGET', LID, key) == lid then
      out[#out + 1] = row(key, lid)
    end
  end
  return out
end
return once(function()
  ensure_group()
  local now = now_us()
  local deadline = now + vt
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, tonumber(ARGV[7]))
  for _, key in ipairs(due) do
    redis.call('ZREM', DELAYED, key)
    enqueue(key)
  end
  local out, granted, i = {}, {}, 0
  local function grant(key)
    i = i + 1
    local lid = token .. '.' .. i
    redis.call('HSET', LID, key, lid)
    redis.call('ZADD', LEASES, deadline, key)
    out[i] = row(key, lid)
    granted[i] = key
  end
  -- expired leases first: the work of a crashed consumer is the oldest
  local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, n)
  local orphans = 0
  for _, key in ipairs(expired) do
    local id = redis.call('HGET', ENT, key)
    if id and #redis.call('XCLAIM', S, GROUP, consumer, 0, id) == 1 then
      grant(key)
    else  -- no pending entry (should not happen): give it a fresh one, deliverable below
      redis.call('ZREM', LEASES, key)
      redis.call('HDEL', LID, key)
      enqueue(key)
      orphans = orphans + 1
    end
  end
  if orphans > 0 then
    redis.call('HINCRBY', CNT, 'leased', -orphans)
    redis.call('HINCRBY', CNT, 'ready', orphans)
  end
  local fresh = 0
  if i < n then
    local got = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', n - i, 'STREAMS', S, '>')
    if got then
      for _, entry in ipairs(got[1][2]) do
        local id, key = entry[1], entry[2][2]
        if redis.call('HGET', ST, key) == 'ready' and redis.call('HGET', ENT, key) == id then
          redis.call('HSET', ST, key, 'leased')
          fresh = fresh + 1
          grant(key)
        else  -- a stray entry (its task moved on): drop it
          redis.call('XACK', S, GROUP, id)
          redis.call('XDEL', S, id)
        end
      end
    end
  end
  if fresh > 0 then
    redis.call('HINCRBY', CNT, 'ready', -fresh)
    redis.call('HINCRBY', CNT, 'leased', fresh)
  end
  if i > 0 then  -- who holds these: a later process on the same machine hands them back once this one is gone
    redis.call('HSET', KEYS[15], consumer, ARGV[8])
  end
  return out, granted
end, replay)
"""

# ARGV: group, reply ttl ms, op (ack|release|dead), reason (a release: its delay in us, '' = none), key1, lease1,
#       ... -> list of stale keys
_FINISH = _PRELUDE + """
return once(function()
  ensure_group()
  local op, reason = ARGV[3], ARGV[4]
  local now = now_us()
  local stale, applied = {}, 0
  for i = 5, #ARGV, 2 do
    local key, lid = ARGV[i], ARGV[i + 1]
    if redis.call('HGET', ST, key) == 'leased' and redis.call('HGET', LID, key) == lid then
      unlink(key)
      applied = applied + 1
      if op == 'ack' then
        redis.call('HSET', ST, key, 'done')
      elseif op == 'release' then
        local delay = tonumber(reason) or 0  -- a release's "reason" is its delay, us ('' = none)
        if delay > 0 then
          redis.call('HSET', ST, key, 'ready')
          redis.call('ZADD', DELAYED, now + delay, key)
        else
          enqueue(key)
        end
      else
        redis.call('HSET', ST, key, 'dead')
        redis.call('HINCRBY', ATT, key, 1)
        redis.call('HSET', ERR, key, reason)
        redis.call('ZADD', DEAD, now, key)
      end
    else
      stale[#stale + 1] = key
    end
  end
  if applied > 0 then
    local to = ({ack = 'done', release = 'ready', dead = 'dead'})[op]
    redis.call('HINCRBY', CNT, 'leased', -applied)
    redis.call('HINCRBY', CNT, to, applied)
  end
  return stale
end)
"""


class OldQueue:
    """The older version's put, lease, ack and release on queue ``prefix`` (a synchronous redis-py client)."""

    def __init__(self, client: Any, prefix: str, consumer: str = "old:1:x") -> None:
        self.client, self.prefix, self.consumer = client, prefix, consumer
        self.keys = [prefix + s for s in KEY_SUFFIXES]
        self._put, self._lease, self._finish = (client.register_script(x) for x in (_PUT, _LEASE, _FINISH))

    def _once(self, script: Any, args: list[Any], token: str | None = None, extra: tuple[str, ...] = ()) -> Any:
        token = token or uuid.uuid4().hex
        return script(keys=[*self.keys, self.prefix + "reply:" + token, *extra], args=["workers", 300_000, *args])

    def put_many(self, items: list[tuple[str, dict]]) -> int:
        return int(self._once(self._put, [x for k, p in items for x in (k, orjson.dumps(p))]))

    def lease(self, n: int, visibility_timeout_s: float) -> list[Task]:
        token = uuid.uuid4().hex
        rows = self._once(self._lease, [self.consumer, n, round(visibility_timeout_s * 1e6), token, max(n, 1000),
                                        b"{}"], token=token, extra=(self.prefix + "consumers",))
        return [Task(key=k.decode(), payload=orjson.loads(p), attempts=int(a), lease_id=lid.decode(),
                     last_error=e and e.decode()) for k, p, a, lid, e in rows]

    def finish(self, op: str, tasks: list[Task], reason: str = "") -> list[str]:
        args: list[Any] = [op, reason]
        for t in tasks:
            args += [t.key, t.lease_id]
        return [k.decode() for k in self._once(self._finish, args)]
