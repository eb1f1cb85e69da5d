"""Made-up API keys for tests, drawn at run time so that no key-shaped text is in the repository (secret scanners
flag a literal in a provider's key shape even when it was made up); none of them is, or was, a real key."""

from __future__ import annotations

import random
import string


def made_up_key(prefix: str, n: int, alphabet: str = string.ascii_letters + string.digits, seed: object = 0) -> str:
    """``prefix`` plus ``n`` characters of ``alphabet`` drawn from a RNG seeded by ``prefix`` and ``seed``: the same
    key on every run, a different one for each seed."""
    rng = random.Random(f"{prefix}{seed}")
    return prefix + "".join(rng.choice(alphabet) for _ in range(n))
