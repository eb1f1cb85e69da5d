"""Site candidates are named in the release's label languages (seed 000 Sec. 3.2.1; the release's
``scripts/00_select_sites.py`` asks WDQS's label service for ``en,mul,fr,es,de``: "The fallback language chain above
should avoid it going forward", after a Marrakech stadium with only French/Arabic names came back as its QID).
The sampler asked ``en,mul`` only, so an item labelled only in French, Spanish or German came back as its bare QID
and was skipped as unlabelled (``skip_no_label``) where the release samples it (sampler version 4)."""

from __future__ import annotations

import asyncio
import math

from geoagent.clients.mapillary import MapillaryClient
from geoagent.clients.wdqs import SITE_LABEL_LANGUAGES, WdqsClient, site_candidates_query
from geoagent.crawl.sampler import SAMPLER_VERSION, sample_sites, sampler_version_warning
from geoagent.crawl.settings import CitySpec, SamplerSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as mly_fake
from geoagent.sandbox import wdqs as wd_fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 31.63, -8.0


def _offset(dx_m: float, dy_m: float) -> tuple[float, float]:
    return LAT + dy_m / 111195.0, LON + dx_m / (111195.0 * math.cos(math.radians(LAT)))


def test_the_site_query_asks_the_release_label_languages():
    assert SITE_LABEL_LANGUAGES == ("en", "mul", "fr", "es", "de")  # 00_select_sites.py wikidata_landmarks
    q = site_candidates_query(LAT, LON, 3.0, ["Q33506"], 60, limit=10, offset=0)
    assert 'wikibase:language "en,mul,fr,es,de"' in q


def test_a_site_labelled_only_in_french_spanish_or_german_is_sampled_under_that_label():
    # four museums 600 m apart: English, French-only, Spanish-only, German-only; one with no label at all
    spots = {"Q101": ("en", "Museum A"), "Q102": ("fr", "Stade Municipal"), "Q103": ("es", "Plaza Mayor"),
             "Q104": ("de", "Alte Brücke"), "Q105": (None, "")}
    ents, imgs = [], []
    for k, (qid, (lang, name)) in enumerate(spots.items()):
        lat, lon = _offset(600 * (k - 2), 0)
        ents.append(wd_fake.FakeEntity(qid, name if lang == "en" else "", lat, lon, 5, ("Q33506",),
                                       labels={lang: name} if lang not in (None, "en") else {}))
        imgs += [mly_fake.FakeImage(str(930000 + 100 * k + i), lat + 0.0001 * (i - 4), lon) for i in range(9)]
    wd_app, mly_app = wd_fake.make_app(ents), mly_fake.make_app(imgs)

    async def go():
        async with serve(wd_app) as wd, serve(mly_app) as mly, HttpClient(default_policy=FAST) as http:
            city = CitySpec(city="Marrakech", country="MA", continent="AF", lat=LAT, lon=LON)
            return await sample_sites(city, WdqsClient(http, wd + "/sparql", UA), MapillaryClient(http, mly, "MLY|1|x", UA),
                                      SamplerSettings(sites_per_city=5), seed=3)

    res = asyncio.run(go())
    landmarks = {s["qid"]: s["landmark"] for s in res.sites}
    assert landmarks == {"Q101": "Museum A", "Q102": "Stade Municipal", "Q103": "Plaza Mayor",
                         "Q104": "Alte Brücke"}, res.walk
    assert {"qid": "Q105", "decision": "skip_no_label", "label": "Q105"} in res.walk  # still no name in any of them


def test_a_crawl_sampled_before_the_wider_languages_is_told():
    assert SAMPLER_VERSION >= 4  # 5: a landmark already a site of another city is skipped (test_crawl_crawl2_s13)
    line = sampler_version_warning({"3": ["Marrakech"], str(SAMPLER_VERSION): ["Lima"]})
    assert line is not None and "version 3: Marrakech" in line and "Lima" not in line
    assert "en,mul" in line and "fr,es,de" in line  # says what version 3 could not name
