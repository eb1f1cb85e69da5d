"""The ``geoverify`` campaign kind (implemented in :mod:`geoagent.geoverify.campaign`)."""

from geoagent.geoverify.campaign import GeoVerifyCampaign  # noqa: F401
