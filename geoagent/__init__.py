"""geoagent: crawl open map/photo APIs and run resumable, cost-capped VLM geolocation campaigns.

Built from GeoContext (seed 000): GeoHint (open-ended localization with a coarse hint) and GeoVerify
(claim verification scored with signal detection theory).
"""

__version__ = "0.1.0"
