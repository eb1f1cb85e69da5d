"""GeoHint geocoder: turn a parsed answer (city, area, building) into a coordinate and an error in km.

Protocol (seed 000 Sec. 4.2-4.3, Sec. 7, Appendix B):

1. **Anchor first.** The model's *own* answered city is resolved first (Wikidata, Nominatim fallback);
   its coordinate is the anchor that disambiguates every finer name. The ground truth is never used to
   choose a candidate: it enters only :attr:`LocatedAnswer.error_km`, after resolution. (Using the truth
   would launder "London Soho" into "New York SoHo".) A city field naming several places ("Shibuya, Tokyo",
   "Shibuya (Tokyo)", "Paris, Texas") is judged as a whole: every name variant is looked up, and an item of a city
   class (:data:`CITY_CLASSES`) anchors when the rest of the field confirms it, in three passes, each in variant
   order and then search order:

   a. **Containment (version 6).** A city item that a place (an item of no city class: a county, a state, a
      country) another variant named contains administratively: the place is in the city item's ``located in the
      administrative territorial entity`` chain (P131, https://www.wikidata.org/wiki/Property:P131, followed upward
      at most :data:`CONTAINMENT_MAX_LEVELS` steps by batched ``wbgetentities`` requests of at most
      :data:`CONTAINMENT_MAX_IDS_PER_LEVEL` ids, so at most 3 requests per city field) or is the ``country`` (P17,
      https://www.wikidata.org/wiki/Property:P17) of the city item or of a container on the way ("Paris, Texas" ->
      Paris, Texas, in Lamar County, in Texas; "Springfield, Illinois" -> the Springfield in Illinois, whichever
      the search ranks first; "Tokyo, Japan" -> Tokyo, by its P17). The container is traced ``contains-city``, its
      distance from the city in ``anchor_distance_km``. Containment is tried over the whole field before distance:
      it is the stronger evidence (a region's or a country's point lies hundreds of km from its cities, and a place
      named beside a city that contains it says which of the city's namesakes was meant, where distance only says
      what lies near). Unless the city item's own variant ranks before it a place of no city class that is
      unrelated to it (neither contains the other) and lies in the same container: then the container does not
      tell the two readings apart ("Virginia, USA": the state, or Virginia, Minnesota), and the city item is a
      namesake (trace ``namesake-city``, ``anchor_distance_km`` from that place), left out of pass b; a namesake in
      one segment that another segment confirms anchors all the same, and is not traced a namesake. (Version 7.)
      Of the city items a container fits, the one that the most other variants confirm anchors, a variant confirming
      it by a place that contains it (traced ``contains-city``) or lies within ``anchor_radius_km`` of it (pass b's
      rule, traced ``not-a-city``); ties: variant order, then search order. In "Springfield, Illinois, USA" the
      country contains every Springfield of the United States, the state only the one in Illinois; in "Manhattan,
      New York, USA" the country contains Manhattan, Kansas and New York City alike, and the borough lies in New York
      City. And no city item anchors by containment when a place (no city class) of the field is contained by more
      other variants than confirm that city item ("Clarendon, Arlington, Virginia, USA": the neighbourhood, in the
      county, in Virginia and in the United States, against Arlington, Texas, in the United States only): passes b
      and c decide. (Version 6 anchored the first city item that any container held, in that order: Springfield,
      Massachusetts, Manhattan, Kansas and Arlington, Texas, when the search ranks them first.)
   b. **Distance (version 5).** A city item within ``anchor_radius_km`` of a place another variant named: that
      place's city ("Shibuya, Tokyo" -> Tokyo; "SoHo, New York" -> New York City, near one of the two SoHos;
      "Manhattan, New York" -> New York City, not Manhattan, Kansas). The place is traced ``not-a-city``; a
      segment whose city items are all far from the other segments' places names a namesake ("Arlington,
      Virginia": Virginia, Minnesota; trace ``out-of-anchor``).
   c. Else the first located hit of the first variant that has one ("Arlington, Virginia": the county; "Virginia,
      USA": the state).

   When only one variant has located hits, its first city item anchors, else its first located hit ("Paris").
   But (version 6) when another segment of the field named something the search could not find ("Clarendon" in
   "Clarendon, Virginia"; a part of the located name, as "Virginia area", is no other segment) and the located
   variant ranks before its first city item a place of no city class unrelated to it, nothing in the field tells
   the two apart and the field reads "unknown place, region": that place anchors (the state Virginia, at its
   point) and the city item is traced ``namesake-city`` (Virginia, Minnesota, 1,570 km from anything the answer
   meant). A place that contains the city item or lies in it ("New York": the state, which contains New York City)
   is one reading at two scales and leaves the city item anchored; a single-name field ("Virginia") keeps its
   first city item, even when neither finer field resolves near it ("Manhattan" with the area "SoHo": Manhattan,
   Kansas, if the search ranks it as the first city item; a city-level answer, censored). That a finer field would
   resolve near a place the search ranked first is no evidence for it: "Chinatown", "Old Town" or "Central Park"
   lie near most regions' points (a rule that read it so was tried in session 33 and withdrawn: "Victoria" with
   "Chinatown" moved from Victoria, British Columbia, to Bendigo, 13,122 km). (Version 5 anchored
   "Paris, Texas" on the first hit of "Paris", Paris, France, as Texas's point lies 510 km from Paris, Texas, and
   "Clarendon, Virginia" on Virginia, Minnesota; session 19 anchored on the first variant with a city item, whatever
   the other segments named.) Sec. 4.2: the anchor is "derived from
   the model's own answered city", and in "Shibuya, Tokyo" the city is Tokyo, in "Paris, Texas" the Paris in
   Texas. A state, province or territory code in the field is looked up by the region's name (version 14,
   :func:`~geoagent.geohint.placenames.with_region_name`): "Cambridge MA" and "Cambridge, MA" are read as "Cambridge,
   Massachusetts", whose state contains the Cambridge meant (pass a), where "Cambridge MA" is no item's label and "MA"
   beside "Cambridge" names nothing that tells the namesakes apart (geocode38 #5); a code that may name another
   country's region or a country ("Perth WA", "Berlin DE") only when a segment after it names the region's country
   (review41a #4). (Before session 19 the first variant with any located hit anchored, so the ward Shibuya did, and the
   area answer "Shibuya" was then the anchor itself, city level and censored.)
2. **Building -> area -> city.** The building is tried first, then the area; the level that resolved is
   recorded (``building``, ``area``, ``city`` or ``none``).
3. **Exact names, parenthetical aliases stripped (fault 1).** Each level tries
   :func:`~geoagent.geohint.placenames.name_variants`: the text as given, then without parenthetical
   asides ("Shibuya (Miyamasuzaka)" -> "Shibuya"), then the segments of compound answers. A Wikidata
   search hit counts only when the variant equals one of its labels or aliases after folding.
4. **Linear features are never scored (fault 2, Sec. 7).** A building answer whose primary name is a
   street, road, avenue, dōri, calle, rue, Straße ... (by name, :func:`is_linear_name`, or by the
   Wikidata class of the resolved item, :data:`LINEAR_CLASSES`, or Nominatim's ``highway`` category) is
   not scored as a point: the area decides, and when the area fails the answer is ``city`` level
   (censored), never the street's own coordinate (trace outcome ``linear-deferred``). Sec. 4.3: "Linear
   features cannot be scored as points"; Sec. 7: they cost precision "without affecting whether an answer
   counts as correct"; the release's ``geocontext/geocode.py`` skips a linear place and falls through to
   area, then city. (Before session 13 the street's point was scored at ``area`` level when the area
   failed, which could make a hit of a street whose one Wikidata point lay within 1 km of the site.)
   A street named in the *area* field is no point either (session 19): at the area level a candidate whose
   Wikidata class is linear (:data:`LINEAR_CLASSES`) or a Nominatim road (``highway``) is passed over (trace
   outcome ``linear-area``) and the next candidate or name variant is tried ("Aoyama-dori, Shibuya" -> Shibuya:
   Sec. 7, linear features "resolve only to neighbourhood level"); when nothing else resolves the answer is
   ``city`` level, censored. The area level decides by class only, not by :func:`is_linear_name`: the name rule's
   bound endings -bashi and -zaka also end district names ("Shinbashi", "Kyobashi" are areas in the release's
   judged sample). (Before session 19 a street named as the area was scored at its one point: "Meiji-dori" as
   the area was an area-level hit 0.82 km from a Shibuya truth while the same street as the building was
   censored.) Classes are matched against the item's direct P31 values, without following subclass of (P279):
   a street typed only by a subclass (a pedestrian or shopping street) is linear only when its class is added
   through ``Geocoder(linear_classes=...)`` (or, at the building level, by its name).
5. **No global fallback (fault 3).** A candidate farther than ``anchor_radius_km`` from the anchor is
   rejected; if no candidate lies within the radius the level fails (trace outcome
   ``out-of-anchor``). With no anchor (the city did not resolve) nothing finer is tried and the
   level is ``none`` (trace ``no-anchor``): Sec. 4.2 disambiguates by "an anchor derived from the model's own answered
   city, never the ground truth", and a lookup with none is the global most-linked fallback fault 3 removed (the
   release's code, with no anchor, takes the most-linked hit anywhere: "Chinatown" beside an unknown city would be
   San Francisco's at any site; geocode38 #5, judged right). Among several exact Wikidata matches within the radius, ``candidate_rule`` picks one
   (:data:`CANDIDATE_RULES`): ``"nearest"`` (default, session 35) the one nearest the anchor, the answer's own city
   (Sec. 4.2: "Ambiguous names are disambiguated using an anchor derived from the model's own answered city": an
   answer "Oakland, Chinatown" is Oakland's Chinatown, not San Francisco's, 12 km away but first in the search's
   order), and at the building level none when its matches lie :data:`AMBIGUOUS_BUILDING_KM` or more apart (a chain's
   branches, two churches of one name: not uniquely locatable, App. B; trace ``ambiguous``, and the Nominatim
   fallback is not asked: the area decides); ``"first"`` the first in the search's order (the default before);
   ``"most_sitelinks"`` the
   one with the most sitelinks (ties: the first), the release's rule (``geocontext/geocode.py``
   ``geocode``: ``max(close, key=sitelinks)`` over the candidates within ``near_km=60.0`` of the anchor;
   set ``anchor_radius_km = 60`` with it, :data:`RELEASE_ANCHOR_RADIUS_KM`). The paper gives neither (Sec. 4.2:
   "Ambiguous names are disambiguated using an anchor derived from the model's own answered city"; Sec. 4.3
   fault 3 removes only the global most-linked fallback), so the default stays. Under either rule the release
   differs in its candidates too: it takes the first 8 search hits of any name match, here only exact matches
   of the variant (point 3); and the city itself is the most-linked of its hits there, the first of a city
   class here. Nominatim's fallback has no sitelinks: under ``nearest`` its match nearest the anchor (the same
   building rule), else its first match within the radius.
6. **City level is censored (fault 4).** A ``city`` result keeps its coordinate and ``error_km`` for
   reference, but :attr:`LocatedAnswer.hit` is always False for it: the answer is only known to be no
   finer than the city. An area or building candidate that *is* the anchor city (same QID) counts as
   city level too, and so (session 19) does one that is *a* city whatever the city field held: a Wikidata
   item of a city class or coarser (:data:`COARSE_CLASSES`) or a Nominatim place whose ``addresstype`` is a city's or coarser
   (:data:`CITY_ADDRESSTYPES`), trace outcome ``same-as-city``. The city-level result is then that item's point,
   label and QID (the first such, building before area), and the anchor stays the city field's. An item Wikidata
   passed over at a level (a city item, or a street at the area level) is passed over the same way when the
   Nominatim fallback finds an OSM object tagged with its QID but typed otherwise (session 20). Sec. 4.3,
   fault 4: "every answer resolving no finer than 'Paris'" was a hit at paris_marais; before session 19,
   ``city="Île-de-France", area="Paris"`` still was (Q90's point lies 0.761 km from the site).
7. **Coordinates are the point (session 16; degrees-minutes-seconds since session 17).** A field that is plain
   coordinates (:func:`~geoagent.geohint.placenames.plain_coordinates`: "48.8584, 2.2945", "48.8584° N, 2.2945° E",
   "lat 48.8584 lon 2.2945", "48°51'30\"N 2°17'40\"E"; a geo URI, "geo:48.8584,2.2945", and any of these in full-width
   digits, "４８.８５８４, ２.２９４５", since version 14) is not a name: it is used as that level's point without a lookup, source
   :data:`ANSWER_COORDINATES`, label and trace query the field's text as written, ``qid`` None. The level is the
   field's (``building``/``place`` -> ``building``, ``area`` -> ``area``, ``city`` -> ``city``), so the hit rule
   (finer than city, < 1 km) and the city censoring apply unchanged. City coordinates are the anchor; building or
   area coordinates need none to be found (nothing to disambiguate), so they are scored even when the city did not
   resolve. Beside a resolved anchor they must lie within ``anchor_radius_km`` of it, as a name's candidate must
   (version 13, geohint39 #1): farther, the answer contradicts its own city (a latitude and longitude swapped,
   a sign lost, another city's point), the level fails (trace ``out-of-anchor``) and the next level decides. Before, the text went to Wikidata and Nominatim as a place-name query
   (with its comma-split segments "48.8584" and "2.2945"). Ambiguous text (one number, out of range, minutes without a
   degree sign, inside prose) is still looked up as a name. The paper's schema asks for names (App. A.1); it says nothing of this case.

Nominatim is a fallback per name after Wikidata finds no usable candidate (Appendix B), bounded to
the anchor's box. Transport failures propagate (a missing answer must never become a wrong one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from geoagent import constants as C
from geoagent.clients.nominatim import NominatimClient, NominatimPlace
from geoagent.clients.wikidata import Entity, WikidataClient
from geoagent.geo import haversine_km
from geoagent.geohint.placenames import (fold, is_bare_designator, is_linear_name, is_null_answer, name_variants,
                                         plain_coordinates, primary_name, with_region_name)
from geoagent.textfmt import label_text

#: Default anchor radius in km. A project choice (the paper gives no value), derived from the release:
#: sites lie at most 8.6 km from their city's screening centre (tokyo_shimokita, ``city_pool.csv``) and
#: ladder reference points at most 6 km from their site (Sec. 3.3; released maximum 5.983 km), so every
#: place a GeoHint answer could plausibly name lies within ~15 km of the city centre; 25 km leaves room
#: for the offset between Wikidata's city coordinate and the screening centre while excluding every
#: other city that shares a district name (London Soho vs New York SoHo: ~5,570 km).
DEFAULT_ANCHOR_RADIUS_KM = 25.0

#: Steps of ``located in the administrative territorial entity`` (P131) followed upward from a city item of a compound
#: city field, to find whether a place another segment named contains it (module doc, point 1): its own P131 values
#: are step 1, so a walk makes at most ``CONTAINMENT_MAX_LEVELS - 1`` ``wbgetentities`` requests. A project choice (the
#: paper has no containment test): 4 reaches a US city's state (city -> county -> state: 2) and a Japanese ward's
#: prefecture with room for the deeper chains of other countries, and the country comes from ``country`` (P17) at
#: every step. A region named beyond it does not contain the city for the geocoder.
CONTAINMENT_MAX_LEVELS = 4
#: Items fetched at one step of that walk, at most: one ``wbgetentities`` request (50 ids, the API's limit without
#: the bot flag); the rest, in variant and search order, are not followed.
CONTAINMENT_MAX_IDS_PER_LEVEL = 50

#: Wikidata classes (P31) of linear features: street Q79007, road Q34442, thoroughfare Q83620, avenue
#: Q7543083 and Q207934, boulevard Q54114, dead-end street Q12731. (QIDs as used in public Wikidata
#: tooling; extend through ``Geocoder(linear_classes=...)``.)
LINEAR_CLASSES = frozenset({"Q79007", "Q34442", "Q83620", "Q7543083", "Q207934", "Q54114", "Q12731"})

#: Wikidata classes preferred when several exact hits for a city name have coordinates: city Q515,
#: big city Q1549591, capital Q5119, city with millions of inhabitants Q1637706, metropolis Q200250,
#: city of the United States Q1093829.
CITY_CLASSES = frozenset({"Q515", "Q1549591", "Q5119", "Q1637706", "Q200250", "Q1093829"})

#: Wikidata classes (P31) of a place no finer than a city, named in the area or building field (fault 4, module doc
#: point 6): the city classes, and the direct classes of towns, municipalities and coarser units that Nominatim's
#: ``addresstype`` already censors (:data:`CITY_ADDRESSTYPES`; geocode35 #4: "Vincennes", a commune, was an area hit
#: for a Paris site through Wikidata and city level through Nominatim): town Q3957, commune of France Q484170, comune
#: of Italy Q747074, municipality of Spain Q2074737, municipality of Germany Q262166, county Q28575, region of
#: England Q48091 (not the generic "geographic region" Q82794, which sub-city areas may carry), ceremonial county
#: of England Q180673, state Q7275, province Q34876, first-level
#: administrative country subdivision Q10864048, metropolitan area Q1907114, country Q6256, sovereign state
#: Q3624078. Not wards, boroughs or districts of a city (finer than it: "Shibuya" in "Tokyo, Shibuya" is an area).
#: Direct P31 only, like :data:`LINEAR_CLASSES`; extend through ``Geocoder(coarse_classes=...)``.
COARSE_CLASSES = CITY_CLASSES | frozenset({
    "Q3957", "Q484170", "Q747074", "Q2074737", "Q262166", "Q28575", "Q48091", "Q180673", "Q7275", "Q34876",
    "Q10864048", "Q1907114", "Q6256", "Q3624078"})

#: Nominatim ``addresstype`` values of a city or of something coarser (a region, a country): such a place named
#: in the building or area field is no finer than a city (module doc, point 6). Not ``city_district``,
#: ``suburb``, ``quarter``, ``neighbourhood``, ``village``: places finer than a city.
CITY_ADDRESSTYPES = frozenset({"city", "town", "municipality", "county", "state", "province", "region", "country"})

#: how the geocoder picks among several exact Wikidata matches of one name within the anchor radius (module doc,
#: point 5): the first in the search's order, or the most-linked (the release's ``geocode``)
CANDIDATE_NEAREST = "nearest"
CANDIDATE_FIRST = "first"
CANDIDATE_MOST_SITELINKS = "most_sitelinks"
CANDIDATE_RULES = (CANDIDATE_NEAREST, CANDIDATE_FIRST, CANDIDATE_MOST_SITELINKS)
DEFAULT_CANDIDATE_RULE = CANDIDATE_NEAREST
#: under the ``nearest`` rule, a building name whose exact matches within the anchor radius lie at least this far apart
#: (km) is not uniquely locatable (seed 000 App. B: chains "with thousands of branches and hence not uniquely
#: locatable"): which one is meant decides a hit at the 1 km threshold, so the level fails (trace ``ambiguous``) and
#: the area decides
AMBIGUOUS_BUILDING_KM = 1.0
def _spread_km(points: list[tuple[float | None, float | None]]) -> float:
    """The largest haversine distance (km) between two of ``points`` (lat, lon in degrees); 0 for fewer than two."""
    pts = [(a, b) for a, b in points if a is not None and b is not None]
    return max((haversine_km(a[0], a[1], b[0], b[1]) for i, a in enumerate(pts) for b in pts[i + 1:]), default=0.0)


#: the release's anchor radius, km (``geocontext/geocode.py``: ``geocode(..., near_km=60.0)``), to pair with
#: ``candidate_rule = "most_sitelinks"`` to geocode as the release does
RELEASE_ANCHOR_RADIUS_KM = 60.0

#: ``LocatedAnswer.source`` (the stage's ``geocode_source``) and ``Lookup.source`` of a point the answer gave as
#: plain coordinates, used without a lookup (module doc, point 7)
ANSWER_COORDINATES = "answer-coordinates"

#: Version of the geocoding rules of this module, recorded with a GeoHint campaign (``designs`` in its manifest,
#: :func:`geoagent.runtime.manifest.design_versions`): located answers of two versions follow different rules, so a
#: resumed campaign whose answers were geocoded under another version says so. 1: the rules of the module doc,
#: points 1-6 (a manifest without the key was geocoded under it); 2 (session 16): point 7, decimal coordinates in
#: an answer are its point, without a lookup; 3 (session 17): degrees-minutes-seconds too (before they were looked up
#: as a name, which found nothing or the wrong place); 4 (session 19): a street named as the area is not scored
#: (point 4), a compound city field anchors on its city (point 1), a city item named at a finer level is city
#: level (point 6); 5 (session 20): a compound city field's segments are judged together, a city item anchoring
#: only near a place another segment named (point 1), and the Nominatim fallback passes over an item Wikidata
#: passed over (point 6); 6: a compound city field's city item also fits when a place another segment named contains
#: it (P131 chain, P17), tried before distance; a city item such a container does not tell from an unrelated place its
#: own segment ranks first is a namesake; and a lone located segment beside a segment that located nothing is read as
#: the unrelated place its search ranks before the city item (point 1: "Paris, Texas", "Clarendon, Virginia"); 7: of
#: several city items that containers fit, the one the most other segments confirm (by containment or within the
#: radius) anchors ("Springfield, Illinois, USA": the Springfield in Illinois, not the first Springfield of the United
#: States; "Manhattan, New York, USA": New York City, not Manhattan, Kansas), none when a place of the field is
#: contained by more segments, and an anchoring city item is not also traced a namesake.
#: 8 (session 33): a leading "between" is taken off a name as "near" is ("between Shibuya and Harajuku": Shibuya
#: first, break33 #4). (A one-name city field re-read as a place its search ranked first when a finer field resolved
#: near that place was part of version 8 for a while and is withdrawn: v8check, the homonyms of most regions.)
#: 9 (session 35, geocode35): of several matches within the radius the one nearest the anchor (``candidate_rule``
#: "nearest", the new default: a campaign geocoded under "first" before says so through this version, as its manifest
#: fills in today's defaults), a building named in places 1 km or more apart is ambiguous and the area decides, towns,
#: communes and coarser units named at a finer level are city level (:data:`COARSE_CLASSES`), and the name rules of
#: :mod:`geoagent.geohint.placenames` (more street designators, hedge words, relational phrases, ø/đ/ł/æ folded).
#: 10 (session 36): the echo rule ``"name"`` (:mod:`geoagent.geohint.echo`, scored with each located answer, so its
#: changes are versioned here too): a name's last word is never dropped as an article ("Đại La" is no longer "Đại",
#: which "Đại học", university, named), and a name "The <word>" is named only where the word starts a segment of the
#: field or follows an article ("Pall Mall" and "a shopping mall" no longer echo "The Mall").
#: 11 (session 37, geohint37 #3): the echo rule ``"name"`` also takes a name without a trailing ", <the site's city>"
#: ("Akasaka, Tokyo" is named by "Akasaka", as "Akasaka (Tokyo)" was).
#: 12 (session 38, geocode38 #7, #11): an aside in curly brackets, or opened and never closed at the end ("Shibuya
#: (Miyamasuzaka", an answer cut off), is removed as a closed one is (fault 1); "未知", "不明", "I don't know" and their
#: kin are no answer, not place names to look up; a Nominatim place matches a query by any of its names
#: (``namedetails``: "神南" finds the place whose localised ``name`` is "Jinnan", geocode38 #4).
#: 13 (session 39, geohint39 #1): building or area coordinates farther than ``anchor_radius_km`` from a resolved
#: anchor fail their level (``out-of-anchor``), as a name's candidates there do (point 7).
#: 14 (session 41, fixgeo41): a geo URI ("geo:35.66,139.70") and coordinates in full-width digits are the field's point
#: (point 7; geocode38 #11: looked up as names before); a US state, Canadian province or Australian state code in the
#: city field ("Cambridge MA", "Cambridge, MA") is looked up by the region's name, so the namesake in that region
#: anchors (point 1; geocode38 #5: "Cambridge MA" anchored nothing and "Cambridge, MA" the search's first Cambridge).
#: 15 (session 42, sec42 #3 and fixrev42 #3, #4): the names the geocoder matches and labels with are cleaned of control
#: and bidirectional formatting characters, whitespace runs one space (:func:`geoagent.textfmt.label_text`): Wikidata
#: labels, aliases, descriptions and matched texts, Nominatim names, display names, address parts and ``namedetails``.
#: 16 (session 43, crawl43 #2): a Nominatim place's ``wikidata`` tag is its item only when it is a Wikidata item id
#: (:func:`geoagent.clients.nominatim.wikidata_tag`); any other value (``"Q1;Q2"``, a URL, control characters) is no
#: tag, so an answer located at such a place records its ``osm:<type>/<id>`` key as ``qid``, not the tag's text.
GEOCODER_RULES_VERSION = 16
#: the first version each located answer records (``extra.geocoder_rules`` of a scored row, newuser41 #1): a row
#: without it was located by an earlier version (or read from a release, which records none)
GEOCODER_RULES_RECORDED_FROM = 14

LEVELS = ("building", "area", "city", "none")
#: Our level names -> the release's ``resolved_level`` values (``answers_judged*.csv``).
RELEASE_LEVELS = {"building": "place", "area": "area", "city": "city", "none": ""}


def level_from_release(value: str | None) -> str:
    """Map a release ``resolved_level`` (``place``/``area``/``city``/empty) to ours.

    Raises
    ------
    ValueError
        On any other value.
    """
    v = (value or "").strip().lower()
    for ours, theirs in RELEASE_LEVELS.items():
        if v == theirs or v == ours:
            return ours
    raise ValueError(f"unknown resolved_level {value!r}; expected one of place, area, city or empty")


def _another_name(failed: str, located: str) -> bool:
    """Whether a city-field variant that located nothing names something else than the one that located: neither
    one's words (folded) hold the other's ("Clarendon" beside "Virginia"; not "Virginia area" or "Clarendon,
    Virginia", which hold "Virginia")."""
    a, b = set(fold(failed).split()), set(fold(located).split())
    return bool(a) and not (a <= b or b <= a)


def _related(a: Candidate, b: Candidate, boxes: Mapping[str, frozenset[str]]) -> bool:
    """Whether one of two Wikidata items contains the other (``boxes``: each item's containers, from
    :meth:`Geocoder._containers`), or they are one item."""
    return a.qid == b.qid or a.qid in boxes.get(b.qid or "", ()) or b.qid in boxes.get(a.qid or "", ())


@dataclass(frozen=True, slots=True)
class ParsedAnswer:
    """The three named levels of one GeoHint answer (untrusted model text; None or "unknown" = absent)."""

    city: str | None = None
    area: str | None = None
    building: str | None = None

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> ParsedAnswer:
        """Read ``city``, ``area`` and ``building`` (or the release's ``place``) from a message payload.

        Looks in ``payload["parsed"]`` or ``payload["answer"]`` when those are objects, else at the top
        level. Non-string values are ignored.
        """
        src: Mapping[str, Any] = payload
        for key in ("parsed", "answer"):
            if isinstance(payload.get(key), Mapping):
                src = payload[key]
                break

        def text(*keys: str) -> str | None:
            for k in keys:
                v = src.get(k)
                if isinstance(v, str) and v.strip():
                    return v.strip()
            return None

        return cls(city=text("city"), area=text("area"), building=text("building", "place"))


@dataclass(frozen=True, slots=True)
class Lookup:
    """One step of the geocoder's trace.

    Attributes
    ----------
    level : str
        ``city``, ``building`` or ``area``.
    query : str
        The name variant tried.
    source : str
        ``wikidata``, ``nominatim``, :data:`ANSWER_COORDINATES` (the answer's own coordinates, no lookup) or ``-``
        (decided without a lookup).
    outcome : str
        ``resolved``, ``no-match`` (no exact name match), ``out-of-anchor`` (matches exist but none within
        the radius; at the city level: a segment's city items all farther than the radius from every place another
        segment named, module doc point 1), ``no-coordinates``, ``linear-deferred`` (a linear feature left to the area level, never scored),
        ``linear-area`` (a linear feature named as the area, passed over, never scored), ``ambiguous`` (a building
        name with matches :data:`AMBIGUOUS_BUILDING_KM` or more apart within the radius: not uniquely locatable, the
        area decides; the nearest one named), ``same-as-city`` (the
        candidate is the anchor city itself, or another city item or coarser place: city level),
        ``not-a-city`` (the place a city-field segment named, whose city, named by another segment, anchors;
        module doc point 1), ``contains-city`` (a place a city-field segment named that contains the city item
        another segment named, which anchors: P131 chain or P17, point 1a), ``namesake-city`` (a city item passed
        over because its own segment ranks before it an unrelated place of no city class that the rest of the field
        supports as well, point 1a, or because another segment located nothing and the field reads "place,
        region", point 1), ``null`` (no answer given),
        ``no-anchor`` (finer levels skipped because the city did not resolve).
    qid, label : str or None
        The candidate concerned (the resolved one, or the nearest rejected one).
    anchor_distance_km : float or None
        Distance of that candidate from the anchor, km. At the city level: for ``out-of-anchor``, from the nearest
        place another segment named; for ``contains-city``, from the city item it contains; for ``namesake-city``,
        from the place its segment was read as instead.
    """

    level: str
    query: str
    source: str
    outcome: str
    qid: str | None = None
    label: str | None = None
    anchor_distance_km: float | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A resolved place: id (QID, ``osm:<type>/<id>``, or None for the answer's own coordinates), label,
    coordinate in degrees, source and linearity."""

    qid: str | None
    label: str
    lat: float
    lon: float
    source: str
    linear: bool = False


@dataclass(slots=True)
class LocatedAnswer:
    """A geocoded answer.

    Attributes
    ----------
    resolved_level : str
        ``building``, ``area``, ``city`` or ``none`` (release names: ``place``, ``area``, ``city``, empty).
    lat, lon : float or None
        Resolved coordinate in degrees (None for ``none``).
    label : str or None
        Label of the resolved item (the release's ``resolved_label``).
    qid : str or None
        Wikidata QID of the resolved item (``osm:<type>/<id>`` when only Nominatim knew it; None for the answer's
        own coordinates).
    error_km : float or None
        Haversine distance from the resolved coordinate to the site's true coordinate, km (None when
        nothing resolved or no truth was given). Kept for ``city`` results but censored in :attr:`hit`.
    trace : list of Lookup
        Every lookup made, in order.
    anchor_qid, anchor_label : str or None
        The city anchor used.
    source : str or None
        ``wikidata`` or ``nominatim`` for the resolved item; :data:`ANSWER_COORDINATES` when the answer gave the
        point as plain coordinates (module doc, point 7; ``label`` is then the field's text as written).
    linear : bool
        True only in results stored before session 19: before session 13 a linear building was scored at area
        level when the area failed, and until session 19 a street named as the area was scored at its point; the
        geocoder now never scores a linear feature (module doc, point 4), so False.
    """

    resolved_level: str
    lat: float | None = None
    lon: float | None = None
    label: str | None = None
    qid: str | None = None
    error_km: float | None = None
    trace: list[Lookup] = field(default_factory=list)
    anchor_qid: str | None = None
    anchor_label: str | None = None
    source: str | None = None
    linear: bool = False

    @property
    def hit(self) -> bool:
        """Sec. 4.2: ``error_km < 1`` and finer than the city (city level is censored, never a hit)."""
        return (
            self.resolved_level in ("building", "area")
            and self.error_km is not None
            and self.error_km < C.HIT_THRESHOLD_KM
        )

    @property
    def finer_than_city(self) -> bool:
        return self.resolved_level in ("building", "area")

    def as_payload(self) -> dict[str, Any]:
        """JSON-ready dict: every field, the trace as a list of dicts, plus ``hit``."""
        d = asdict(self)
        d["hit"] = self.hit
        return d

    def as_release_row(self) -> dict[str, Any]:
        """The release's columns: ``resolved_level`` (place/area/city/empty), ``resolved_label``,
        ``error_km`` (rounded to 3 decimals, empty when None) and ``hit``. A hit just under the threshold is
        rounded down instead (0.9996 km is written 0.999, not 1.0), so the row read back by the release's rule,
        ``error_km < 1`` on the written value (:mod:`geoagent.geohint.judged`), is still the hit it was (geocode35
        #10)."""
        err = None if self.error_km is None else round(self.error_km, 3)
        if err is not None and self.hit and err >= C.HIT_THRESHOLD_KM:
            err = math.floor(self.error_km * 1000) / 1000
        return {
            "resolved_level": RELEASE_LEVELS[self.resolved_level],
            "resolved_label": self.label or "",
            "error_km": "" if err is None else err,
            "hit": self.hit,
        }

    @classmethod
    def from_payload(cls, d: Mapping[str, Any]) -> LocatedAnswer:
        """Inverse of :meth:`as_payload` (``hit`` is recomputed, never trusted)."""
        trace = [Lookup(**t) for t in d.get("trace") or []]
        names = set(cls.__dataclass_fields__) - {"trace"}
        return cls(trace=trace, **{k: d.get(k) for k in names if k in d})


class Geocoder:
    """Resolves :class:`ParsedAnswer` objects against Wikidata (and optionally Nominatim).

    Parameters
    ----------
    wikidata : WikidataClient
        Primary source.
    nominatim : NominatimClient, optional
        Fallback for names Wikidata cannot place within the anchor radius (Appendix B); None disables it.
    anchor_radius_km : float
        Radius around the anchor city within which finer candidates are accepted, km (default
        :data:`DEFAULT_ANCHOR_RADIUS_KM`, see there for its derivation).
    language : str
        Search language.
    search_limit : int
        Wikidata search results examined per variant (1..50).
    max_variants : int
        Name variants tried per level.
    linear_classes : frozenset of str
        Wikidata classes treated as linear features.
    candidate_rule : str
        Which of several exact Wikidata matches within the radius is taken (:data:`CANDIDATE_RULES`; default
        :data:`DEFAULT_CANDIDATE_RULE`, ``"nearest"``); ``"most_sitelinks"`` asks Wikidata for sitelinks too and
        takes the most-linked (module doc, point 5).
    coarse_classes : frozenset of str
        Wikidata classes of places no finer than a city, censored at the area and building levels
        (:data:`COARSE_CLASSES`).

    Raises
    ------
    ValueError
        If ``anchor_radius_km`` is not a positive finite number, or ``candidate_rule`` is not one of
        :data:`CANDIDATE_RULES`.
    """

    def __init__(
        self,
        wikidata: WikidataClient,
        nominatim: NominatimClient | None = None,
        *,
        anchor_radius_km: float = DEFAULT_ANCHOR_RADIUS_KM,
        language: str = "en",
        search_limit: int = 10,
        max_variants: int = 6,
        linear_classes: frozenset[str] = LINEAR_CLASSES,
        candidate_rule: str = DEFAULT_CANDIDATE_RULE,
        coarse_classes: frozenset[str] = COARSE_CLASSES,
    ) -> None:
        if not (isinstance(anchor_radius_km, (int, float)) and math.isfinite(anchor_radius_km) and anchor_radius_km > 0):
            raise ValueError(f"anchor_radius_km must be a positive number of km, got {anchor_radius_km!r}")
        if candidate_rule not in CANDIDATE_RULES:
            raise ValueError(f"candidate_rule must be one of {', '.join(map(repr, CANDIDATE_RULES))}, got {candidate_rule!r}")
        self.candidate_rule = candidate_rule
        self.wikidata = wikidata
        self.nominatim = nominatim
        self.anchor_radius_km = float(anchor_radius_km)
        self.language = language
        self.search_limit = int(search_limit)
        self.max_variants = int(max_variants)
        self.linear_classes = frozenset(linear_classes)
        self.coarse_classes = frozenset(coarse_classes)

    # ---- public ---------------------------------------------------------------------------------

    async def locate(
        self, answer: ParsedAnswer, *, true_lat: float | None = None, true_lon: float | None = None
    ) -> LocatedAnswer:
        """Geocode one answer; see the module docstring for the protocol.

        Parameters
        ----------
        answer : ParsedAnswer
            The model's city, area and building.
        true_lat, true_lon : float, optional
            The site's true coordinate in degrees, used ONLY for ``error_km`` after resolution.

        Returns
        -------
        LocatedAnswer

        Raises
        ------
        geoagent.runtime.http.HttpError, WikidataError, NominatimBudgetExceeded
            Lookups that could not be made; nothing is guessed in their place.
        """
        trace: list[Lookup] = []
        anchor = await self._resolve_city(answer.city, trace)
        if anchor is None:
            for level, text in (("building", answer.building), ("area", answer.area)):
                point = self._answer_point(text, level, trace)  # coordinates need no anchor (point 7)
                if point is not None:
                    return self._finish(level, point, None, trace, true_lat, true_lon)
                if not is_null_answer(text):
                    trace.append(Lookup(level, str(text), "-", "no-anchor"))
            return self._finish("none", None, None, trace, true_lat, true_lon)

        cities: list[Candidate] = []  # city items named at a finer level (trace ``same-as-city``; module doc, point 6)
        building = await self._resolve_building(answer.building, anchor, trace, cities)
        if building is not None:
            return self._finish("building", building, anchor, trace, true_lat, true_lon)
        area = await self._resolve_fine(answer.area, "area", anchor, trace, skip_linear=True, cities=cities)
        if area is not None:
            return self._finish("area", area, anchor, trace, true_lat, true_lon)
        # a linear building or area answer (trace ``linear-deferred``, ``linear-area``) is never scored, not even
        # when nothing else resolved: its one coordinate says nothing about where along the street the photo was
        # taken (fault 2, module doc). A city named at a finer level is the answer's city-level point (point 6).
        return self._finish("city", cities[0] if cities else anchor, anchor, trace, true_lat, true_lon)

    # ---- levels ---------------------------------------------------------------------------------

    @staticmethod
    def _answer_point(text: str | None, level: str, trace: list[Lookup]) -> Candidate | None:
        """The field's own point when ``text`` is plain coordinates (module doc, point 7), else None."""
        latlon = plain_coordinates(text)
        if latlon is None:
            return None
        assert text is not None
        trace.append(Lookup(level, text, ANSWER_COORDINATES, "resolved", None, text))
        return Candidate(qid=None, label=text, lat=latlon[0], lon=latlon[1], source=ANSWER_COORDINATES)

    def _fine_point(self, text: str | None, level: str, anchor: Candidate,
                    trace: list[Lookup]) -> tuple[bool, Candidate | None]:
        """``(is coordinates, point)`` of a building or area field beside a resolved anchor (module doc, point 7):
        ``(False, None)`` when ``text`` is not plain coordinates (look it up as a name); ``(True, None)`` when they
        lie farther than ``anchor_radius_km`` from the anchor (the level fails, trace ``out-of-anchor`` with the
        distance, as a name found only there does: fault 3; geohint39 #1: "40.7233, -74.0030" beside city "Paris",
        or a latitude and longitude swapped, scored a 5,836 km miss although the answer's area was a hit);
        ``(True, point)`` otherwise."""
        point = self._answer_point(text, level, trace)
        if point is None:
            return False, None
        d = haversine_km(anchor.lat, anchor.lon, point.lat, point.lon)
        if d > self.anchor_radius_km:
            last = trace.pop()
            trace.append(Lookup(level, last.query, ANSWER_COORDINATES, "out-of-anchor", None, last.label, round(d, 3)))
            return True, None
        return True, point

    async def _resolve_city(self, text: str | None, trace: list[Lookup]) -> Candidate | None:
        """The anchor (module doc, point 1)."""
        point = self._answer_point(text, "city", trace)
        if point is not None:
            return point
        # a state code written out ("Cambridge MA" -> "Cambridge, Massachusetts"): the state is then a segment whose
        # item contains the Cambridge meant (point 1a; geocode38 #5: "Cambridge MA" located nothing, no anchor)
        variants = name_variants(with_region_name(text), max_variants=self.max_variants)
        if not variants:
            trace.append(Lookup("city", text or "", "-", "null"))
            return None
        # every variant's located hits first: the segments of a compound field are judged together (module doc,
        # point 1): [(variant, [(candidate, is a city item)])], in variant order
        found: list[tuple[str, list[tuple[Candidate, bool]]]] = []
        entities: dict[str, Entity] = {}  # the located hits by QID, with their P131 and P17 (containment, point 1)
        failed: list[str] = []  # variants that located nothing (``no-match``, ``no-coordinates``)
        steps: dict[str, list[Lookup]] = {}  # each variant's own trace steps, written in variant order below
        for variant in variants:
            hits = await self._exact_hits(variant)
            if not hits:
                steps[variant] = [Lookup("city", variant, "wikidata", "no-match")]
                failed.append(variant)
                continue
            ents = await self.wikidata.get_entities([h for h in hits], props=("labels", "claims"), languages=self._langs())
            located = [ents[q] for q in hits if ents[q].has_coordinates]
            if not located:
                steps[variant] = [Lookup("city", variant, "wikidata", "no-coordinates", hits[0])]
                failed.append(variant)
                continue
            for e in located:
                entities.setdefault(e.qid, e)
            found.append((variant, [(self._from_entity(e), bool(set(e.classes) & CITY_CLASSES)) for e in located]))
            steps[variant] = []
        pick: tuple[str, Candidate] | None = None
        refused: list[Lookup] = []  # namesake cities, one per segment (traced unless one of them anchors after all)
        if len(found) == 1:
            pick = await self._one_located_segment(found[0], failed, entities, steps)
        elif found:
            pick = await self._segments_together(found, entities, steps, refused)
        if pick is not None:
            variant, cand = pick
            for step in refused:  # "Tokyo, Japan": Tokyo lies far from Japan's point, and anchors all the same
                if step.qid != cand.qid:
                    steps[step.query].append(step)
            # a namesake in one segment that another segment confirms ("Washington, D.C., USA": the state ranks first
            # in "Washington", "D.C." names the capital alone) anchors, and is no namesake in the trace
            for v, vsteps in steps.items():
                vsteps[:] = [t for t in vsteps if not (t.outcome == "namesake-city" and t.qid == cand.qid)]
            steps[variant].append(Lookup("city", variant, "wikidata", "resolved", cand.qid, cand.label))
        for variant in variants:
            trace.extend(steps.get(variant, ()))
        if pick is not None:
            return pick[1]
        if self.nominatim is not None:
            for variant in variants[:2]:
                places = await self.nominatim.search(variant, limit=5)
                named = [p for p in places if p.has_name(fold(variant), fold)]
                pick = next((p for p in named if p.category in ("boundary", "place")), named[0] if named else None)
                if pick is not None:
                    cand = self._from_place(pick)
                    trace.append(Lookup("city", variant, "nominatim", "resolved", cand.qid, cand.label))
                    return cand
                trace.append(Lookup("city", variant, "nominatim", "no-match"))
        return None

    async def _one_located_segment(self, segment: tuple[str, list[tuple[Candidate, bool]]], failed: list[str],
                                   entities: Mapping[str, Entity], steps: dict[str, list[Lookup]]) -> tuple[str, Candidate]:
        """The anchor when one variant of the city field located anything (module doc, point 1): its first city item,
        else its first place. Version 6: when another segment of the field named something the search could not find
        (``failed`` holds a variant that is neither a part of this one nor holds it: "Clarendon" beside "Virginia",
        not "Virginia area") and this segment's hits rank before that city item a place of no city class unrelated to
        it (neither contains the other, :meth:`_containers`), nothing in the field tells the two readings apart and
        the field reads "unknown place, region": the first such place anchors and the city item is traced
        ``namesake-city`` ("Clarendon, Virginia": the state, not Virginia, Minnesota)."""
        variant, cands = segment
        first_city = next((k for k, (_, city) in enumerate(cands) if city), None)
        if first_city is None:
            return variant, cands[0][0]
        city = cands[first_city][0]
        before = [c for c, _ in cands[:first_city]]  # places of no city class, ranked before it
        if not before or not any(_another_name(f, variant) for f in failed):
            return variant, city
        boxes = await self._containers([city, *before], entities)
        rival = next((c for c in before if not _related(c, city, boxes)), None)
        if rival is None:  # "New York": the state contains New York City, one reading at two scales
            return variant, city
        steps[variant].append(Lookup("city", variant, "wikidata", "namesake-city", city.qid, city.label,
                                     round(haversine_km(rival.lat, rival.lon, city.lat, city.lon), 3)))
        return variant, rival

    async def _segments_together(self, found: list[tuple[str, list[tuple[Candidate, bool]]]],
                                 entities: Mapping[str, Entity], steps: dict[str, list[Lookup]],
                                 refused: list[Lookup]) -> tuple[str, Candidate]:
        """The anchor when several variants of the city field located something (module doc, point 1), in three
        passes, each in variant order and then search order: (1, version 6) a city item that a place (no city class)
        another segment named contains: P131 chain or P17 (:meth:`_containers`), unless its own segment ranks before
        it a place of no city class, unrelated to it, that the same container holds (a namesake: trace
        ``namesake-city``); of several, the one the most other segments confirm, by containment or within the
        radius, unless a place of the field is contained by more other segments (version 7; ties: the first);
        (2, version 5) a city item within ``anchor_radius_km`` of such a place, namesakes of pass
        1 left out; (3) the first located hit of the first segment. ``refused`` gets one ``out-of-anchor`` step per
        segment whose city items pass 2 found too far."""
        pick: tuple[str, Candidate] | None = None
        # places (no city class) per segment, and whether any city item could be contained in one of another segment
        places = [[c for c, city in cands if not city] for _, cands in found]
        cities = [[c for c, city in cands if city] for _, cands in found]
        namesakes: set[str | None] = set()
        if any(cities[i] and any(places[j] for j in range(len(found)) if j != i) for i in range(len(found))):
            # the walk starts at every city item, then at every place (the places' containers are followed last when
            # a step holds more ids than one request takes)
            starts = [c for cs in cities for c in cs] + [c for ps in places for c in ps]
            boxes = await self._containers(starts, entities)
            # version 7: of the city items a container fits, the one that the most other segments confirm, by a place
            # that contains it or (the version-5 rule) lies within the radius: in "Springfield, Illinois, USA" the
            # country contains every Springfield of the United States and the state only the one meant; in
            # "Manhattan, New York, USA" the country contains Manhattan, Kansas and New York City alike, and the
            # borough lies in New York City. Ties: variant order, then search order
            best: tuple[str, Candidate, dict[str, Candidate], dict[str, Candidate]] | None = None
            placed = 0  # the most other segments that contain one place (no city class) of the field
            for i, (variant, cands) in enumerate(found):
                holders = [(v, p) for j, (v, _) in enumerate(found) if j != i for p in places[j]]
                for k, (cand, city) in enumerate(cands):
                    box = boxes.get(cand.qid, frozenset())
                    containing = [(v, p) for v, p in holders if p.qid in box and p.qid != cand.qid]
                    if not city:
                        placed = max(placed, len({v for v, _ in containing}))
                        continue
                    if not containing:
                        continue
                    # a place of its own segment, ranked before it and unrelated to it, in the same container: the
                    # container does not tell the two readings apart ("Virginia, USA": the state, or Virginia, MN)
                    rivals = [c for c, cc in cands[:k] if not cc and not _related(c, cand, boxes)]
                    fits = [(v, p) for v, p in containing if not any(p.qid in boxes.get(r.qid, ()) for r in rivals)]
                    if not fits:
                        rival = next(r for r in rivals if any(p.qid in boxes.get(r.qid, ()) for _, p in containing))
                        namesakes.add(cand.qid)
                        steps[variant].append(Lookup("city", variant, "wikidata", "namesake-city", cand.qid, cand.label,
                                                     round(haversine_km(rival.lat, rival.lon, cand.lat, cand.lon), 3)))
                        continue
                    confirming: dict[str, Candidate] = {}  # each confirming segment's first place that contains it
                    for v, p in fits:
                        confirming.setdefault(v, p)
                    near: dict[str, Candidate] = {}  # each other segment's nearest place within the radius
                    for v, p in sorted(holders, key=lambda t: haversine_km(cand.lat, cand.lon, t[1].lat, t[1].lon)):
                        if v not in confirming and haversine_km(cand.lat, cand.lon, p.lat, p.lon) <= self.anchor_radius_km:
                            near.setdefault(v, p)
                    if best is None or len(confirming) + len(near) > len(best[2]) + len(best[3]):
                        best = (variant, cand, confirming, near)
            # a place of the field that more segments contain than confirm any such city item is the better reading
            # ("Arlington, Virginia, USA": the county, in Virginia and in the United States, before Arlington, Texas,
            # in the United States only): no city item anchors by containment, the passes below decide
            if best is not None and len(best[2]) + len(best[3]) >= placed:
                variant, cand, confirming, near = best
                for v, place in confirming.items():
                    steps[v].append(Lookup("city", v, "wikidata", "contains-city", place.qid, place.label,
                                           round(haversine_km(cand.lat, cand.lon, place.lat, place.lon), 3)))
                for v, place in near.items():
                    steps[v].append(Lookup("city", v, "wikidata", "not-a-city", place.qid, place.label))
                return variant, cand
        # a city item anchors when it lies within the radius of a place (not a city item) another segment named:
        # that place's city ("Shibuya, Tokyo"; "SoHo, New York": one of the SoHos; "Manhattan, New York": New York
        # City, not Manhattan, Kansas). A city far from every such place is a namesake ("Arlington, Virginia":
        # Virginia, Minnesota), trace ``out-of-anchor``
        for i, (variant, cands) in enumerate(found):
            near_places = [(v, p) for j, (v, _) in enumerate(found) if j != i for p in places[j]]
            # each city item with the nearest place of the other segments: (km, its variant, place) or None
            ranked = [(min(((haversine_km(cand.lat, cand.lon, c.lat, c.lon), v, c) for v, c in near_places),
                           key=lambda t: t[0], default=None), cand) for cand in cities[i] if cand.qid not in namesakes]
            fit = next(((near, cand) for near, cand in ranked if near and near[0] <= self.anchor_radius_km), None)
            if fit is not None:
                (_, v, place), cand = fit
                steps[v].append(Lookup("city", v, "wikidata", "not-a-city", place.qid, place.label))
                pick = (variant, cand)
                break
            if ranked:  # the segment's nearest city item (its first when no other segment named a place)
                near, cand = min(ranked, key=lambda t: math.inf if t[0] is None else t[0][0])
                refused.append(Lookup("city", variant, "wikidata", "out-of-anchor", cand.qid, cand.label,
                                      None if near is None else round(near[0], 3)))
        if pick is None:  # no city item fits: the first place of the first segment that named one
            pick = (found[0][0], found[0][1][0][0])
        return pick

    async def _containers(self, items: list[Candidate], known: Mapping[str, Entity]) -> dict[str, frozenset[str]]:
        """The QIDs of the items that contain each of ``items`` administratively, by QID: its ``located in the
        administrative territorial entity`` (P131, https://www.wikidata.org/wiki/Property:P131) values, theirs, and so
        on up to :data:`CONTAINMENT_MAX_LEVELS` steps, and the ``country`` (P17,
        https://www.wikidata.org/wiki/Property:P17) of the item and of every container fetched on the way (module
        doc, point 1; seed 000 Sec. 4.2). ``known``: entities already fetched (their claims are used as they are).
        One batched ``wbgetentities`` request (``props=claims``) per step beyond the first, for at most
        :data:`CONTAINMENT_MAX_IDS_PER_LEVEL` items not yet known, so at most ``CONTAINMENT_MAX_LEVELS - 1`` requests
        per call; an item the API calls missing, one left over the per-step bound, and a cycle end that branch."""
        ents: dict[str, Entity] = dict(known)
        reach: dict[str, dict[str, None]] = {}  # item -> its containers so far, P131 and P17 (an ordered set)
        followed: dict[str, set[str]] = {}  # item -> the P131 values reached so far (a cycle ends there)
        frontier: dict[str, list[str]] = {}  # item -> the P131 values reached at the last step, to follow
        for c in items:
            e = ents.get(c.qid or "")
            if c.qid is None or e is None or c.qid in reach:
                continue
            reach[c.qid] = dict.fromkeys([*e.located_in, *e.countries])
            followed[c.qid] = {c.qid, *e.located_in}
            frontier[c.qid] = list(dict.fromkeys(e.located_in))
        for _ in range(CONTAINMENT_MAX_LEVELS - 1):
            frontier = {q: f for q, f in frontier.items() if f}
            if not frontier:
                break
            wanted = list(dict.fromkeys(p for f in frontier.values() for p in f if p not in ents))
            if wanted:
                ents.update(await self.wikidata.get_entities(wanted[:CONTAINMENT_MAX_IDS_PER_LEVEL], props=("claims",)))
            for q, front in frontier.items():
                new: list[str] = []
                for p in front:
                    e = ents.get(p)
                    if e is None or e.missing:
                        continue
                    reach[q].update(dict.fromkeys([e.qid, *e.located_in, *e.countries]))  # e.qid: a merged id's target
                    for g in e.located_in:
                        if g not in followed[q]:
                            followed[q].add(g)
                            new.append(g)
                frontier[q] = new
        return {q: frozenset(r) for q, r in reach.items()}

    async def _resolve_building(self, text: str | None, anchor: Candidate, trace: list[Lookup],
                                cities: list[Candidate]) -> Candidate | None:
        """The building's candidate, or None: no answer, no match within the anchor radius, a linear feature
        (by name or class; left to the area and never scored, module doc point 4), or a city item (added to
        ``cities``, point 6)."""
        if is_null_answer(text):
            trace.append(Lookup("building", text or "", "-", "null"))
            return None
        assert text is not None
        is_point, point = self._fine_point(text, "building", anchor, trace)
        if is_point:
            return point
        head = primary_name(text)
        if is_linear_name(head) or is_bare_designator(head):  # "Street" alone: a street not named
            # fault 2: a street cannot be scored as a point; the area decides (Sec. 4.3, Sec. 7)
            trace.append(Lookup("building", head, "-", "linear-deferred"))
            return None
        cand = await self._resolve_fine(text, "building", anchor, trace, stop_on_linear=True, cities=cities)
        return None if cand is not None and cand.linear else cand

    async def _resolve_fine(
        self, text: str | None, level: str, anchor: Candidate, trace: list[Lookup], *, stop_on_linear: bool = False,
        skip_linear: bool = False, cities: list[Candidate] | None = None,
    ) -> Candidate | None:
        """The answer's own coordinates (point 7), else the first candidate within the anchor radius over the name
        variants (Wikidata, then Nominatim). ``stop_on_linear``: a linear candidate ends the search and is returned
        (the building level, which then defers it); ``skip_linear``: a linear candidate is passed over (trace
        ``linear-area``) and the next candidate or variant is tried (the area level, module doc point 4). City items
        (point 6) are passed over and added to ``cities``."""
        is_point, point = self._fine_point(text, level, anchor, trace)
        if is_point:
            return point
        variants = name_variants(text, max_variants=self.max_variants)
        if not variants:
            trace.append(Lookup(level, text or "", "-", "null"))
            return None
        start = len(trace)
        for variant in variants:
            before = len(trace)
            cand = await self._wikidata_near(variant, level, anchor, trace, skip_linear=skip_linear, cities=cities)
            if cand is None and any(t.outcome == "ambiguous" for t in trace[before:]):
                return None  # a building name found in places far apart: the level fails, the area decides
            if cand is None:
                continue
            if stop_on_linear and cand.linear:
                trace.append(Lookup(level, variant, cand.source, "linear-deferred", cand.qid, cand.label))
                return cand
            return cand
        if self.nominatim is not None and not any(t.outcome == "ambiguous" for t in trace[start:]):
            # (a building name Wikidata found in several places far apart is not uniquely locatable: not asked again)
            # items Wikidata passed over at this level (a city, a street) keep that verdict when an OSM object
            # tagged with their QID comes back typed otherwise (a town mapped as a suburb node)
            passed = {t.qid: t.outcome for t in trace[start:]
                      if t.source == "wikidata" and t.qid and t.outcome in ("same-as-city", "linear-area")}
            for variant in variants[:3]:
                before = len(trace)
                cand = await self._nominatim_near(variant, level, anchor, trace, skip_linear=skip_linear, cities=cities,
                                                  passed=passed)
                if cand is None and any(t.outcome == "ambiguous" for t in trace[before:]):
                    return None
                if cand is None:
                    continue
                if stop_on_linear and cand.linear:
                    trace.append(Lookup(level, variant, cand.source, "linear-deferred", cand.qid, cand.label))
                return cand
        return None

    # ---- sources --------------------------------------------------------------------------------

    def _langs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.language, "en")))

    async def _exact_hits(self, variant: str) -> list[str]:
        """QIDs of search hits whose label, matched text or alias equals ``variant`` after folding."""
        key = fold(variant)
        hits = await self.wikidata.search_entities(variant, language=self.language, limit=self.search_limit)
        return list(dict.fromkeys(h.qid for h in hits if any(fold(n) == key for n in h.names())))

    async def _wikidata_near(self, variant: str, level: str, anchor: Candidate, trace: list[Lookup], *,
                             skip_linear: bool = False, cities: list[Candidate] | None = None) -> Candidate | None:
        hits = await self._exact_hits(variant)
        if not hits:
            trace.append(Lookup(level, variant, "wikidata", "no-match"))
            return None
        most_linked = self.candidate_rule == CANDIDATE_MOST_SITELINKS
        first = self.candidate_rule == CANDIDATE_FIRST
        props = ("labels", "claims", "sitelinks") if most_linked else ("labels", "claims")
        ents = await self.wikidata.get_entities(hits, props=props, languages=self._langs())
        nearest: tuple[float, Entity] | None = None
        within: list[tuple[float, Entity]] = []  # every candidate within the radius (not under "first"), search order
        passed_over = False  # a candidate within the radius was a city item or (area level) a linear feature
        for qid in hits:
            ent = ents[qid]
            if not ent.has_coordinates:
                continue
            # fault 4: naming the city itself is no finer than the city (ent.qid: a merged-away id that a
            # lagging search index still lists resolves to the anchor's own item)
            if ent.qid == anchor.qid:
                trace.append(Lookup(level, variant, "wikidata", "same-as-city", ent.qid, anchor.label, 0.0))
                continue
            d = haversine_km(anchor.lat, anchor.lon, ent.lat, ent.lon)  # type: ignore[arg-type]
            if d <= self.anchor_radius_km:
                if set(ent.classes) & self.coarse_classes:
                    # fault 4 also when the city field named something else (a region, a ward): a city item is
                    # no finer than a city, whichever item anchors the answer (module doc, point 6)
                    cand = self._from_entity(ent)
                    trace.append(Lookup(level, variant, "wikidata", "same-as-city", cand.qid, cand.label, round(d, 3)))
                    if cities is not None:
                        cities.append(cand)
                    passed_over = True
                    continue
                if skip_linear and set(ent.classes) & self.linear_classes:
                    # fault 2 at the area level: a street's one point is not where along it the photo was taken
                    trace.append(Lookup(level, variant, "wikidata", "linear-area", ent.qid, ent.label(self.language),
                                        round(d, 3)))
                    passed_over = True
                    continue
                if not first:
                    within.append((d, ent))
                    continue
                cand = self._from_entity(ent)
                trace.append(Lookup(level, variant, "wikidata", "resolved", cand.qid, cand.label, round(d, 3)))
                return cand
            if nearest is None or d < nearest[0]:
                nearest = (d, ent)
        if within and not most_linked:
            return self._nearest(level, variant, "wikidata", [(d, self._from_entity(e)) for d, e in within], trace)
        if within:
            # the release's rule: the most-linked candidate within the radius (max keeps the first of a tie)
            d, ent = max(within, key=lambda t: t[1].sitelinks or 0)
            cand = self._from_entity(ent)
            trace.append(Lookup(level, variant, "wikidata", "resolved", cand.qid, cand.label, round(d, 3)))
            return cand
        if nearest is None:
            if not passed_over and not any(ents[q].qid == anchor.qid for q in hits):
                trace.append(Lookup(level, variant, "wikidata", "no-coordinates", hits[0]))
        else:
            d, ent = nearest
            trace.append(Lookup(level, variant, "wikidata", "out-of-anchor", ent.qid, ent.label(self.language), round(d, 3)))
        return None

    async def _nominatim_near(self, variant: str, level: str, anchor: Candidate, trace: list[Lookup], *,
                              skip_linear: bool = False, cities: list[Candidate] | None = None,
                              passed: Mapping[str, str] | None = None) -> Candidate | None:
        """The first place named ``variant`` within the anchor radius (Nominatim ``/search``, bounded viewbox), or
        None. ``passed``: QID -> outcome of the items Wikidata passed over at this level (``same-as-city``,
        ``linear-area``); a place tagged with one of them is passed over the same way."""
        assert self.nominatim is not None
        dlat = self.anchor_radius_km / 111.0
        dlon = self.anchor_radius_km / max(1e-6, 111.0 * math.cos(math.radians(anchor.lat)))
        box = (anchor.lon - dlon, anchor.lat + dlat, anchor.lon + dlon, anchor.lat - dlat)
        places = await self.nominatim.search(variant, limit=5, viewbox=box, bounded=True)
        key = fold(variant)
        named = [p for p in places if p.has_name(key, fold)]
        passed_over = False  # a named place within the radius was a city or coarser or (area level) a linear feature
        chosen: list[tuple[float, Candidate]] = []  # under "nearest": every resolvable place within the radius
        for p in named:
            if self._is_anchor_place(p, anchor):
                trace.append(Lookup(level, variant, "nominatim", "same-as-city", anchor.qid, anchor.label, 0.0))
                passed_over = True  # no "out-of-anchor" entry after it (geocode38 #10)
                continue
            d = haversine_km(anchor.lat, anchor.lon, p.lat, p.lon)
            if d <= self.anchor_radius_km:
                cand = self._from_place(p)
                if passed and p.wikidata in passed:  # already in ``cities`` when a city item
                    trace.append(Lookup(level, variant, "nominatim", passed[p.wikidata], cand.qid, cand.label,
                                        round(d, 3)))
                    passed_over = True
                    continue
                if p.addresstype in CITY_ADDRESSTYPES:  # a city or coarser, not the anchor (module doc, point 6)
                    trace.append(Lookup(level, variant, "nominatim", "same-as-city", cand.qid, cand.label, round(d, 3)))
                    if cities is not None:
                        cities.append(cand)
                    passed_over = True
                    continue
                if skip_linear and cand.linear:
                    trace.append(Lookup(level, variant, "nominatim", "linear-area", cand.qid, cand.label, round(d, 3)))
                    passed_over = True
                    continue
                if self.candidate_rule == CANDIDATE_NEAREST:
                    chosen.append((d, cand))
                    continue
                trace.append(Lookup(level, variant, "nominatim", "resolved", cand.qid, cand.label, round(d, 3)))
                return cand
        if chosen:
            return self._nearest(level, variant, "nominatim", chosen, trace)
        if not passed_over:
            trace.append(Lookup(level, variant, "nominatim", "out-of-anchor" if named else "no-match"))
        return None

    @staticmethod
    def _nearest(level: str, variant: str, source: str, within: list[tuple[float, Candidate]],
                 trace: list[Lookup]) -> Candidate | None:
        """The ``nearest`` rule over the candidates ``within`` the radius (``(km from the anchor, candidate)``, search
        order): the nearest (the first of a tie), or None at the building level when they lie
        :data:`AMBIGUOUS_BUILDING_KM` or more apart (trace ``ambiguous``, naming the nearest)."""
        d, cand = min(within, key=lambda t: t[0])
        ambiguous = level == "building" and _spread_km([(c.lat, c.lon) for _d, c in within]) >= AMBIGUOUS_BUILDING_KM
        trace.append(Lookup(level, variant, source, "ambiguous" if ambiguous else "resolved", cand.qid, cand.label,
                            round(d, 3)))
        return None if ambiguous else cand

    @staticmethod
    def _is_anchor_place(p: NominatimPlace, anchor: Candidate) -> bool:
        """Whether a Nominatim place is the anchor city itself: same QID, or a city object of that name.

        The name test applies also when the OSM object carries a different ``wikidata`` tag: OSM tags lag
        behind Wikidata merges, so the city's own boundary can carry a merged-away QID."""
        if p.wikidata is not None and p.wikidata == anchor.qid:
            return True
        is_city = p.addresstype in ("city", "town", "municipality") or p.category == "boundary"
        return is_city and fold(p.name) == fold(anchor.label)

    def _from_entity(self, ent: Entity) -> Candidate:
        return Candidate(
            qid=ent.qid,
            label=ent.label(self.language),
            lat=float(ent.lat),  # type: ignore[arg-type]
            lon=float(ent.lon),  # type: ignore[arg-type]
            source="wikidata",
            linear=bool(set(ent.classes) & self.linear_classes),
        )

    @staticmethod
    def _from_place(p: NominatimPlace) -> Candidate:
        return Candidate(
            qid=p.wikidata or f"osm:{p.key}",
            label=label_text(p.name),  # parse_place cleans it; a place built elsewhere too (fixrev42 #3)
            lat=p.lat,
            lon=p.lon,
            source="nominatim",
            linear=p.is_linear,
        )

    @staticmethod
    def _finish(
        level: str,
        cand: Candidate | None,
        anchor: Candidate | None,
        trace: list[Lookup],
        true_lat: float | None,
        true_lon: float | None,
    ) -> LocatedAnswer:
        err = None
        if cand is not None and true_lat is not None and true_lon is not None:
            err = haversine_km(cand.lat, cand.lon, float(true_lat), float(true_lon))
        return LocatedAnswer(
            resolved_level=level,
            lat=None if cand is None else cand.lat,
            lon=None if cand is None else cand.lon,
            label=None if cand is None else cand.label,
            qid=None if cand is None else cand.qid,
            error_km=err,
            trace=trace,
            anchor_qid=None if anchor is None else anchor.qid,
            anchor_label=None if anchor is None else anchor.label,
            source=None if cand is None else cand.source,
            linear=False if cand is None else cand.linear,
        )


def __getattr__(name: str) -> Any:
    """Lazy re-export: ``geoagent.geohint.geocode.GeocodeStage`` is the stage of
    :mod:`geoagent.geohint.geocode_stage` (kept there so this module does not import the runtime)."""
    if name in ("GeocodeStage", "GeocoderSettings", "build_geocoder"):
        from geoagent.geohint import geocode_stage

        return getattr(geocode_stage, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
