"""Fragment masking (:func:`geoagent.secrets.mask_values`) spares capitalised words of a person-chosen secret.

Before: a run of 8 of a secret's characters was no fragment only when its letters were all of one case
("required", "GITHUB_P"). A secret a person chose, such as a Redis password ``Password2026`` or ``Geoagent!2026``
(remembered from the ``[backend]`` URL, :func:`geoagent.runtime.backend`, and masked in every log line, the
manifest's config record and stored reasons), holds a capitalised word: its run ``Password`` / ``Geoagent`` was
a fragment, matched in any case, so every "password" and every "geoagent" in ordinary text was masked (a Redis
error "invalid username-password pair" lost its word, a state path ``/work/geoagent/state`` read ``/work/***/state``).
Now a run whose letter stretches are each lower case, upper case or capitalised (a capital then lower case)
reads as words too; the secret itself, in any case, and its runs holding digits or other characters (a cut
echo) are masked as before."""

from __future__ import annotations

from geoagent.secrets import MASK, mask_values, redact


def test_capitalised_words_of_a_secret_are_not_masked_in_ordinary_text():
    secrets = ["Password2026", "Geoagent!2026"]
    text = "redis: invalid username-password pair; state in /work/geoagent/state (GEOAGENT_STATE)"
    assert mask_values(text, secrets) == text
    assert redact(text, secrets) == text


def test_the_secret_and_its_cut_echoes_are_still_masked():
    secrets = ["Password2026", "Geoagent!2026"]
    assert mask_values("auth PASSWORD2026 refused", secrets) == f"auth {MASK} refused"
    assert mask_values("auth geoagent!2026 refused", secrets) == f"auth {MASK} refused"
    # a truncated echo: a run holding a digit or another character is a fragment, widened to the whole echo
    assert mask_values("auth Password20... refused", secrets) == f"auth {MASK}... refused"
    assert mask_values("auth ...ent!2026 refused", secrets) == f"auth ...{MASK} refused"
