"""Data model (sites, images, reference points, ladders, GeoVerify trials), store and release importer."""

from geoagent.data.model import (  # noqa: F401
    ARM_BLANK,
    ARM_MAIN,
    ARM_MISMATCH,
    ARMS,
    BLANK_IMAGE_REF,
    DECOY_BAND_LABELS,
    ContextLadder,
    Image,
    RawVerifyResponse,
    ReferencePoint,
    Site,
    VerifyTrial,
    tier_of,
    decoy_band_labels,
    decoy_bands_km,
    verify_band,
)
