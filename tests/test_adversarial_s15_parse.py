"""Adversarial review of how model output is read (session 15, s15-parse): each test failed on main before its fix.

The parsers are pure functions over the model's verbatim text, so these tests call them directly with the
hostile answer; no client or server is involved.
"""

from __future__ import annotations

from geoagent.geoverify.parse import parse_verdict


# --- GeoVerify: a confidence too large for a float -------------------------------------------------

def test_geoverify_confidence_too_large_for_a_float_keeps_the_verdict():
    """A confidence written as a 400-digit integer (a looping model) made ``float()`` raise OverflowError inside
    the parser: the answer became a parse failure ("parser error: OverflowError ...") and its clear verdict was
    lost from H and F. Like ``1e309`` (infinite), it is an unusable confidence: the verdict stands, confidence
    None, rule ``confidence_invalid``."""
    big = "9" * 400
    for text in ('{"verdict": "yes", "confidence": ' + big + '}',
                 '{"verdict": "no", "confidence": -' + big + ', "evidence": ["tram"]}'):
        p = parse_verdict(text)
        assert p.ok, p.reason
        assert p.verdict in ("yes", "no")
        assert p.confidence is None
        assert "confidence_invalid" in p.rules
        assert p.raw == text
    assert parse_verdict('{"verdict": "no", "confidence": -' + big + ', "evidence": ["tram"]}').evidence == ("tram",)
