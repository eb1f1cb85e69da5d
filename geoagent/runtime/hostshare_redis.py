"""The host-share board on Redis: :class:`~geoagent.runtime.hostshare.HostShare` across machines.

With ``[backend] kind = "redis"`` every machine of a campaign shares each host's rate, concurrency, turns and
``Retry-After`` pauses through this board on the campaign's Redis server instead of the per-machine SQLite file
``state/<campaign>/hosts.sqlite``. The algorithm, its rules and its window proof are those of
:mod:`geoagent.runtime.hostshare` (read its module docstring); only the storage and the clock differ:

* Storage: keys under ``geoagent:<campaign>::hs:`` (:func:`board_prefix`): ``m:<seq>`` one hash per member row
  (host, pid, start time, boot, heartbeat, hold, adopted_seq, adopted_at, gone_at; a process keeps a row only while
  its host, pid, start time and boot are its own: a server that lost recent writes hands row numbers out again),
  ``h:<host>`` the host's rows
  (sorted set by seq), ``seq`` the row counter, ``p:<host>`` a pause's end, ``n:<host>`` the turns' ``next_at``,
  ``t:<host>``/``ti:<host>`` the turn queue (tickets by number, and their member rows), ``tseq`` the ticket counter.
  Every compare-and-set step (tick, turn, release, leave, mark gone) is one Lua script, atomic on the server as
  the SQLite board's ``BEGIN IMMEDIATE`` transactions are.
* Clock: every time on the board is the server's clock (``TIME`` inside the script), so rows written by
  different machines compare with each other. A process converts between its own ``time.monotonic()`` and the
  board's clock at each call, always in the safe direction (later): a local time ``t`` goes to the board as
  ``S + (t - L_send)`` and a board time ``b`` comes back as ``L_recv + (b - S)``, where ``S`` is the server's
  time when the script ran and ``L_send <= S <= L_recv`` (in real time) the local times before and after the
  call. So an ``adopted_at``, ``gone_at``, pause end or ``next_at`` is never seen earlier than it is, and the
  joining rule (open at ``max(adopted_at, gone_at) + W``) holds across machines as on one. A process's own
  lease starts at ``L_send`` (before its heartbeat reached the server), so its last possible send is before
  ``heartbeat + LEASE_S`` in server time, which is what a dead row's ``gone_at`` is set to. The server's clock
  is a wall clock: a step of it (NTP) while rows are live shifts every comparison by that step; machines'
  clock RATES are assumed equal (drift is far below the 10%/20 ms margin over one window).
* Liveness: a row is gone when its heartbeat (server time) is older than
  :data:`~geoagent.runtime.hostshare.STALE_S`, or, for rows of this machine (same boot id), when its pid is gone
  or reused (checked here, marked gone by a script; one poll later than on SQLite). "This machine" is the host
  name with :func:`geoagent.runtime.procs.boot_id` (the kernel boot id and the pid namespace: containers on one kernel share the boot id, not their pids). Rows of other boots are NOT
  dropped (they are other machines). Member hashes expire on their own (``PEXPIRE`` refreshed by every
  heartbeat, long after they stop counting), so a server never keeps dead rows.

Costs: one script call per poll (:data:`~geoagent.runtime.hostshare.POLL_S`) per process, and at hosts that take
turns two or three per send, as on SQLite, plus the round trip to the server.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from geoagent.runtime.hostshare import LEASE_S, PAUSE_KEEP_S, STALE_S, _alive

#: extra lifetime (s) of a member row's key after it no longer counts (a safety net: scripts delete rows first)
ROW_TTL_EXTRA_S = 60.0
#: lifetime (s) of a host's ``next_at`` and turn queue keys after their last use
TURN_TTL_S = 3600.0

_COMMON = r"""
local P = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function fmt(x) return string.format('%%.6f', x) end
local function px(s) return math.max(1000, math.ceil(s * 1000)) end
local function push_next(key, v)
  local na = P .. 'n:' .. key
  local cur = tonumber(redis.call('GET', na) or '0') or 0
  if v > cur then redis.call('SET', na, fmt(v), 'PX', px(v - now + %(turn_ttl)s)) end
end
local function release(key, token, delta)
  redis.call('ZREM', P .. 't:' .. key, token)
  redis.call('HDEL', P .. 'ti:' .. key, token)
  if delta ~= nil and delta ~= cjson.null then push_next(key, now + delta) end
end
local function mark_gone(mk, gone)
  local hold = tonumber(redis.call('HGET', mk, 'hold_s') or '0') or 0
  redis.call('HSET', mk, 'gone_at', fmt(gone))
  redis.call('PEXPIRE', mk, px(gone - now + 2 * hold + %(row_extra)s))
end
""" % {"turn_ttl": TURN_TTL_S, "row_extra": ROW_TTL_EXTRA_S}

# ARGV: P, boot, pid, pstart, hosts json [[key, seq, hold_s, adopted_seq, adopted_at - L_send]],
#       pauses json {key: until - L_send}, releases json [[key, token, next_at - L_send or null]]
_TICK = _COMMON + r"""
local boot, pid, pstart = ARGV[2], ARGV[3], ARGV[4]
local hosts = cjson.decode(ARGV[5])
local pauses = cjson.decode(ARGV[6])
local releases = cjson.decode(ARGV[7])
local stale, lease, keep = %(stale)s, %(lease)s, %(keep)s
for _, r in ipairs(releases) do release(r[1], r[2], r[3]) end
for key, d in pairs(pauses) do
  local pk = P .. 'p:' .. key
  local u = now + d
  local cur = tonumber(redis.call('GET', pk) or '0') or 0
  if u > cur then redis.call('SET', pk, fmt(u), 'PX', px(u - now + keep)) end
end
local seqs = {}
local out_seqs = {}
for _, h in ipairs(hosts) do
  local key, seq, hold, aseq, aat = h[1], tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), tonumber(h[5])
  local ttl = px(2 * (stale + hold) + %(row_extra)s)
  local mk = P .. 'm:' .. seq
  local live = false
  if seq > 0 then
    -- the row is this process's only while it names this host, pid, start time and boot (redis39 #2): a server that
    -- lost recent writes (failover to a replica behind, restart from an older snapshot) counts `seq` again from an
    -- older value and hands this process's number to another process's new row; sharing it, both would take
    -- the whole rate. Another's row is left to it, and this process registers a row of its own
    local f = redis.call('HMGET', mk, 'heartbeat', 'gone_at', 'adopted_seq', 'host', 'pid', 'pstart', 'boot')
    if f[1] and not f[2] and f[4] == key and f[5] == pid and f[6] == pstart and f[7] == boot then
      live = true
      redis.call('HSET', mk, 'heartbeat', fmt(now))
      if aseq > (tonumber(f[3]) or 0) then
        redis.call('HSET', mk, 'adopted_seq', tostring(aseq), 'adopted_at', fmt(now + aat))
      end
      redis.call('PEXPIRE', mk, ttl)
    end
  end
  if not live then
    seq = redis.call('INCR', P .. 'seq')
    mk = P .. 'm:' .. seq
    redis.call('HSET', mk, 'host', key, 'pid', pid, 'pstart', pstart, 'boot', boot, 'joined_at', fmt(now),
               'heartbeat', fmt(now), 'hold_s', fmt(hold), 'adopted_seq', '0', 'adopted_at', '0')
    redis.call('PEXPIRE', mk, ttl)
    redis.call('ZADD', P .. 'h:' .. key, seq, tostring(seq))
  end
  redis.call('PEXPIRE', P .. 'h:' .. key, ttl)
  seqs[key] = seq
  out_seqs[key] = seq
end
local rows = {}
local out_pauses = {}
for key, myseq in pairs(seqs) do
  local hz = P .. 'h:' .. key
  local list = {}
  for _, s in ipairs(redis.call('ZRANGE', hz, 0, -1)) do
    local mk = P .. 'm:' .. s
    local f = redis.call('HMGET', mk, 'heartbeat', 'hold_s', 'adopted_seq', 'adopted_at', 'gone_at', 'boot', 'pid', 'pstart')
    if not f[1] then
      redis.call('ZREM', hz, s)  -- expired long after it stopped counting
    else
      local hb, hold = tonumber(f[1]), tonumber(f[2])
      local gone = tonumber(f[5] or '')
      if gone == nil and tonumber(s) ~= myseq and now - hb > stale then
        gone = math.min(now, hb + lease)  -- it could not send after its lease ran out
        mark_gone(mk, gone)
      end
      if gone ~= nil and gone + hold < now then
        redis.call('DEL', mk)
        redis.call('ZREM', hz, s)
      else
        local row = {seq = tonumber(s), adopted_seq = tonumber(f[3]), adopted_at = tonumber(f[4]) - now,
                     boot = f[6], pid = tonumber(f[7]), pstart = f[8]}
        if gone ~= nil then row['gone_at'] = gone - now end
        table.insert(list, row)
      end
    end
  end
  rows[key] = list
  local u = tonumber(redis.call('GET', P .. 'p:' .. key) or '')
  if u ~= nil and u > now then out_pauses[key] = u - now end
end
return cjson.encode({seqs = out_seqs, rows = rows, pauses = out_pauses})
""" % {"stale": STALE_S, "lease": LEASE_S, "keep": PAUSE_KEEP_S, "row_extra": ROW_TTL_EXTRA_S}

# ARGV: P, seqs json: mark this machine's dead rows gone (their pids were checked by the caller)
_MARK_GONE = _COMMON + r"""
for _, s in ipairs(cjson.decode(ARGV[2])) do
  local mk = P .. 'm:' .. s
  local f = redis.call('HMGET', mk, 'heartbeat', 'gone_at')
  if f[1] and not f[2] then mark_gone(mk, math.min(now, tonumber(f[1]) + %(lease)s)) end
end
return 0
""" % {"lease": LEASE_S}

# ARGV: P, releases json [[key, token, next_at - L_send or null]]
_RELEASE = _COMMON + r"""
for _, r in ipairs(cjson.decode(ARGV[2])) do release(r[1], r[2], r[3]) end
return 0
"""

# ARGV: P, seqs json, spacings json {key: spacing_s}, releases json, token prefix (with its trailing ':'), boot,
# pid, pstart: a row is marked gone only while it names this process (review39a #6: after a server lost recent
# writes, row numbers handed out again could name another machine's row)
_LEAVE = _COMMON + r"""
for _, r in ipairs(cjson.decode(ARGV[4])) do release(r[1], r[2], r[3]) end
for _, s in ipairs(cjson.decode(ARGV[2])) do
  local mk = P .. 'm:' .. s
  local f = redis.call('HMGET', mk, 'heartbeat', 'gone_at', 'pid', 'pstart', 'boot')
  if f[1] and not f[2] and (ARGV[6] == nil or (f[3] == ARGV[7] and f[4] == ARGV[8] and f[5] == ARGV[6])) then
    mark_gone(mk, now)
  end
end
local pre = ARGV[5]
for key, spacing in pairs(cjson.decode(ARGV[3])) do
  local tz = P .. 't:' .. key
  for _, tok in ipairs(redis.call('ZRANGE', tz, 0, -1)) do
    if string.sub(tok, 1, #pre) == pre then
      release(key, tok, nil)
      push_next(key, now + spacing)  -- a request torn down mid-turn may have just sent
    end
  end
end
return 0
"""

# ARGV: P, key, token, member seq, spacing_s
_TURN = _COMMON + r"""
local key, token, member, spacing = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local tz, ti = P .. 't:' .. key, P .. 'ti:' .. key
local next_at = tonumber(redis.call('GET', P .. 'n:' .. key) or '0') or 0
local ticket = tonumber(redis.call('ZSCORE', tz, token) or '')
if ticket == nil then
  ticket = redis.call('INCR', P .. 'tseq')
  -- behind every ticket queued (redis39 #2): after the server lost recent writes `tseq` counts numbers again that
  -- queued tickets hold; two tickets of one number would both see none ahead and send at once
  local last = redis.call('ZRANGE', tz, -1, -1, 'WITHSCORES')
  if #last == 2 and tonumber(last[2]) >= ticket then
    ticket = tonumber(last[2]) + 1
    redis.call('SET', P .. 'tseq', ticket)
  end
  redis.call('ZADD', tz, ticket, token)
  redis.call('HSET', ti, token, member)
end
redis.call('PEXPIRE', tz, px(%(turn_ttl)s))
redis.call('PEXPIRE', ti, px(%(turn_ttl)s))
local dropped = {}
while true do
  local head = redis.call('ZRANGE', tz, 0, 0)
  if #head == 0 or head[1] == token then break end
  local m = redis.call('HGET', ti, head[1])
  local f = {false, false}
  if m then f = redis.call('HMGET', P .. 'm:' .. m, 'heartbeat', 'gone_at') end
  local dead = (not f[1]) or (f[2] ~= false) or (now - tonumber(f[1]) > %(stale)s)
  if not dead then break end
  release(key, head[1], nil)
  next_at = math.max(next_at, now + spacing)  -- it may have sent just before it died
  table.insert(dropped, head[1])
end
if #dropped > 0 then push_next(key, next_at) end
local ahead = redis.call('ZCOUNT', tz, '-inf', '(' .. ticket)
return cjson.encode({ahead = ahead, next_at = next_at - now, dropped = dropped})
""" % {"turn_ttl": TURN_TTL_S, "stale": STALE_S}


def board_prefix(campaign: str) -> str:
    """``geoagent:<campaign>::hs:``, the prefix of every key of the campaign's host-share board on Redis.

    Raises
    ------
    ValueError
        If ``campaign`` is not a safe name (:func:`geoagent.runtime.redis_state.state_prefix`).
    """
    from geoagent.runtime.redis_state import state_prefix

    return state_prefix(campaign) + "hs:"


class RedisBoard:
    """The storage of a :class:`~geoagent.runtime.hostshare.HostShare` board on a Redis server (module docstring).

    Parameters
    ----------
    url : str
        The server's URL (secret: never logged or stored).
    campaign : str
        The campaign name (keys under :func:`board_prefix`).

    Pass it to ``HostShare(board, http)`` in place of the SQLite file's path. Its methods run on the share's board
    thread (blocking redis-py calls); times in and out are this process's ``time.monotonic()`` seconds, converted
    to and from the server's clock in the safe direction. Errors: ``redis.RedisError`` (:attr:`errors`).
    """

    def __init__(self, url: str, campaign: str) -> None:
        import redis

        self._url = url
        self.prefix = board_prefix(campaign)
        self.errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self.boot = ""
        self.pid = 0
        self.pstart = ""
        self.pid_checks = False

    def __repr__(self) -> str:  # never the URL
        return f"RedisBoard({self.prefix!r})"

    def refusal(self, error: BaseException) -> BaseException | None:
        """When ``error`` is the server's refusal, which waiting does not end, the error the share raises at its
        gates instead of retrying (:class:`~geoagent.runtime.hostshare.HostShare`, "A board that refuses"); else
        None (an outage: retried every poll). A refusal of the URL's credentials
        (:func:`geoagent.runtime.redis_retry.auth_refused`: its one line, URL and password masked), or of a command
        (redis-py's ``NoPermissionError``, an ACL user without ``EVALSHA`` or a command a board script calls:
        ``NOPERM``, its message masked likewise). The CLI ends the command on either with exit 2."""
        import redis

        from geoagent.runtime.redis_retry import auth_refused

        refused = auth_refused(error, self._url)
        if refused is not None:
            return refused
        if isinstance(error, redis.exceptions.NoPermissionError):
            from geoagent.runtime.backend import scrub

            return type(error)(scrub(f"host-share board: {error}", self._url))
        return None

    def open(self, *, boot: str, pid: int, pstart: str) -> None:
        """Connect (one ``PING`` first: an unreachable server fails at once) and register the scripts."""
        from geoagent.runtime.redis_state import redis_client

        # "this machine": host name and kernel boot id, as the Redis ledger's owner rule
        # (geoagent.runtime.procs.boot_id): containers on one kernel share the boot id but not their pids
        self.boot, self.pid, self.pstart = f"{socket.gethostname()}|{boot}", pid, pstart
        self.pid_checks = bool(boot)  # without a boot id, another machine's pid could be taken for ours
        self._client = redis_client(self._url)
        for name, src in (("tick", _TICK), ("gone", _MARK_GONE), ("release", _RELEASE), ("leave", _LEAVE), ("turn", _TURN)):
            self._scripts[name] = self._client.register_script(src)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _call(self, name: str, *args: Any) -> tuple[Any, float, float]:
        if self._client is None:
            import redis

            raise redis.ConnectionError("hostshare: board closed")
        sent = time.monotonic()
        out = self._scripts[name](args=[self.prefix, *args])
        return out, sent, time.monotonic()

    @staticmethod
    def _releases(items: list[tuple[str, str, float | None]], sent: float) -> str:
        return json.dumps([[k, tok, None if at is None else at - sent] for k, tok, at in items])

    def tick(self, inp: dict[str, Any]) -> dict[str, Any]:
        """One poll: releases, pauses, heartbeats/registration, departed rows, then the rows and pauses of our
        hosts; the snapshot :meth:`HostShare._apply` reads (``now`` = local time before the call: the lease)."""
        sent = time.monotonic()
        hosts = [[k, seq or 0, hold, aseq, aat - sent] for k, seq, hold, aseq, aat in inp["hosts"]]
        pauses = {k: until - sent for k, until in inp["pauses"].items()}
        if self._client is None:
            import redis

            raise redis.ConnectionError("hostshare: board closed")
        raw = self._scripts["tick"](args=[self.prefix, self.boot, str(self.pid), self.pstart, json.dumps(hosts),
                                          json.dumps(pauses), self._releases(inp["releases"], sent)])
        recv = time.monotonic()
        out = json.loads(raw)
        seqs = {k: int(v) for k, v in (out.get("seqs") or {}).items()}
        mine = set(seqs.values())
        rows: dict[str, list[dict[str, Any]]] = {}
        dead: list[int] = []
        for key, lst in (out.get("rows") or {}).items():
            rows[key] = []
            for r in lst or []:
                seq = int(r["seq"])
                gone = r.get("gone_at")
                if gone is None and seq not in mine and r.get("boot") == self.boot and self.pid_checks \
                        and not _alive(int(r.get("pid") or 0), str(r.get("pstart") or "")):
                    dead.append(seq)  # this machine's process is gone: marked now, counted gone next poll
                rows[key].append({
                    "seq": seq,
                    "adopted_seq": int(r.get("adopted_seq") or 0),
                    "adopted_at": recv + float(r["adopted_at"]),
                    "gone_at": None if gone is None else recv + float(gone),
                })
        if dead:
            self._scripts["gone"](args=[self.prefix, json.dumps(dead)])
        pauses_out = {k: recv + float(v) for k, v in (out.get("pauses") or {}).items()}
        return {"now": sent, "seqs": seqs, "rows": rows, "pauses": pauses_out}

    def release(self, items: list[tuple[str, str, float | None]]) -> None:
        """Remove tickets; push each host's ``next_at`` to the given local time (converted to server time)."""
        if not items:
            return
        sent = time.monotonic()
        if self._client is None:
            return
        self._scripts["release"](args=[self.prefix, self._releases(items, sent)])

    def leave(self, seqs: list[int], spacings: dict[str, float], releases: list[tuple[str, str, float | None]],
              token_prefix: str) -> None:
        """Mark rows ``seqs`` gone now, apply ``releases``, and drop this share's tickets (``next_at`` of their
        hosts pushed one spacing on: a request torn down mid-turn may have just sent)."""
        if self._client is None or not (seqs or releases or spacings):
            return
        sent = time.monotonic()
        self._scripts["leave"](args=[self.prefix, json.dumps(seqs), json.dumps(spacings or {}),
                                     self._releases(releases, sent), token_prefix + ":", self.boot, str(self.pid),
                                     self.pstart])

    def turn(self, key: str, token: str, member: int, spacing_s: float) -> dict[str, Any]:
        """:meth:`HostShare._turn_db` on Redis: ``now``, ``next_at`` (local monotonic s) and ``ahead``."""
        raw, _sent, recv = self._call("turn", key, token, str(member), repr(float(spacing_s)))
        out = json.loads(raw)
        return {"now": recv, "next_at": recv + float(out["next_at"]), "ahead": int(out["ahead"])}

    def pauses(self, keys: list[str] | None = None) -> dict[str, float]:
        """Pauses in force: ``{host or limit key: seconds left}`` (all of the campaign's when ``keys`` is None)."""
        c = self._client
        if c is None:
            return {}
        found: dict[str, float] = {}
        names = [k.decode() if isinstance(k, bytes) else k for k in c.scan_iter(match=self.prefix + "p:*", count=200)]
        if not names:
            return {}
        now_s, now_us = c.time()
        now = float(now_s) + float(now_us) / 1e6
        for name, val in zip(names, c.mget(names)):
            key = name[len(self.prefix) + 2:]
            if val is None or (keys is not None and key not in keys):
                continue
            left = float(val) - now
            if left > 0:
                found[key] = left
        return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def redis_board_pauses(url: str, campaign: str) -> dict[str, float]:
    """The pauses in force on the campaign's board on Redis: ``{host or limit key: seconds left}``, longest first;
    read-only (writes nothing). The Redis counterpart of :func:`geoagent.runtime.hostshare.board_pauses`, used by
    ``status``: a pause posted by any machine of the campaign. Times are the server's clock (``TIME``).

    Raises
    ------
    redis.RedisError
        The server cannot be reached.
    """
    board = RedisBoard(url, campaign)
    from geoagent.runtime.redis_state import redis_client

    board._client = redis_client(url)
    try:
        return board.pauses()
    finally:
        board.close()
