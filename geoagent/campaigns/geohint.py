"""The ``geohint`` campaign kind (implemented in :mod:`geoagent.geohint.campaign`)."""

from geoagent.geohint.campaign import GeoHintCampaign  # noqa: F401
