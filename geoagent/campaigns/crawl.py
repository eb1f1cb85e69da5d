"""The ``crawl`` campaign kind (implemented in :mod:`geoagent.crawl.campaign`)."""

from geoagent.crawl.campaign import CrawlCampaign  # noqa: F401
