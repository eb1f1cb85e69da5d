"""Child processes for ``tests/test_redis_state.py`` (one Redis campaign state shared with the parent).

``python tests/_redis_state_child.py hold URL CAMPAIGN DIR HOST TTL N``: open the ledger as owner on host
``HOST`` with heartbeat TTL ``TTL`` s, reserve ``N`` x $0.1 (keys ``held-<i>``), print ``{"owner": ...}`` and
keep the heartbeat going until killed.

``python tests/_redis_state_child.py answer URL CAMPAIGN DIR N``: for request keys ``q-0`` .. ``q-<N-1>`` (the
same for every child), do what the model caller does per request: the guarded reservation (stored answer, a
reservation held elsewhere, or a new reservation of $0.05 worst case), then the "call" and ONE ``put`` that
stores the answer and settles it at $0.03; a key held elsewhere is retried later. Print
``{"paid": [keys this process paid for], "refused": n}`` at the end.
"""

from __future__ import annotations

import json
import sys
import time

from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.ledger import BudgetExhausted
from geoagent.runtime.redis_state import open_redis_campaign_state


def hold(url: str, campaign: str, folder: str, host: str, ttl_s: float, n: int) -> None:
    state = open_redis_campaign_state(url, campaign, folder, recover=False, heartbeat_ttl_s=ttl_s, host=host)
    for i in range(n):
        state.ledger.reserve(f"held-{i}", 0.1, model="m")
    print(json.dumps({"owner": state.ledger.owner}), flush=True)
    time.sleep(3600)


def answer(url: str, campaign: str, folder: str, n: int) -> None:
    state = open_redis_campaign_state(url, campaign, folder, recover=False)
    paid, refused = [], 0
    todo = [f"q-{i}" for i in range(n)]
    deadline = time.monotonic() + 60
    while todo and time.monotonic() < deadline:
        later = []
        for key in todo:
            try:
                got = state.ledger.reserve_guarded(key, 0.05, model="m")
            except BudgetExhausted:
                refused += 1
                continue
            if got == "stored":
                continue
            if got == "elsewhere":
                later.append(key)
                continue
            time.sleep(0.001)  # the "call"
            state.store.put(key, {"model_name": "m"}, ModelResponse(f"answer {key}", Usage(10, 2)), got,
                            cost_usd=0.03)
            paid.append(key)
        todo = later
        time.sleep(0.01)
    print(json.dumps({"paid": paid, "refused": refused, "left": todo}), flush=True)
    state.close()


if __name__ == "__main__":
    mode, url, campaign, folder = sys.argv[1:5]
    if mode == "hold":
        hold(url, campaign, folder, sys.argv[5], float(sys.argv[6]), int(sys.argv[7]))
    else:
        answer(url, campaign, folder, int(sys.argv[5]))
