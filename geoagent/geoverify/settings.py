"""``[geoverify]`` campaign settings (pydantic), registered with the config loader on import.

Every key with its default and a one-line comment: ``geoagent/configs/example.toml``.

Example::

    [geoverify]
    trials = "release"            # "release": the release's trial table; "build": new trials from its
                                  # images and candidate pools (Sec. 5.2), with control arms
    prompt_template = "my_claim.txt"   # optional; default geoagent/prompts/geoverify_claim.txt
    max_output_tokens = 512        # optional override of every model's [[models]] max_output_tokens
    n_per_band = 2                # build only: decoys per band per image
    n_control = 2                 # build only: candidates per image that get the two control arms
    image_root = "state/images"   # optional folder the trial table's `path` values are relative to (a crawl's
                                  # state/images holds <site>/<id>.jpg; a release copy streetview/<site>/<id>.jpg);
                                  # an image without a file there: see [images] missing (geoagent.image_files)
    report_interval_s = 5.0       # live report refresh
    n_boot = 1000                 # bootstrap replicates over sites for the 95 % CIs of the report (0 = none)
    boot_seed = 0                 # seed of those replicates (an integer >= 0; recorded in the report)
    live_n_boot = 200             # optional: replicates for the live refresh (default: n_boot; about 0.1 s
                                  # per 1000 replicates at 100 sites x 6 columns)

Bootstrap intervals resample sites (seed 000 Sec. 6: the site is the unit of resampling); see
:func:`geoagent.scoring.sdt.score`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from geoagent import constants as C
from geoagent.config import expand_home


class GeoVerifySettings(BaseModel):
    """Validated ``[geoverify]`` table (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # as the rest of the config: "6" is no number

    trials: Literal["release", "build"] = "release"
    release_dir: str | None = Field(None, description="release folder; default: the config's release_dir")
    prompt_template: str | None = None
    #: override of every model's ``max_output_tokens`` for this task (default: each model's own)
    max_output_tokens: int | None = Field(None, gt=0)
    #: claim tolerance in metres (paper: 150); at least 1 m, so kilometres typed here (0.15) are refused
    #: rather than rendered as "within 0 metres"; below 150 the nearest decoy band starts at it (``0.1-0.3km`` for 100)
    tau_m: float = Field(150.0, ge=1.0, description="claim tolerance tau in metres (Sec. 5.2: 150)")
    n_per_band: int | None = Field(2, ge=0)
    max_signal: int | None = Field(None, ge=0)
    n_control: int = Field(2, ge=0)
    build_seed: int | None = None
    image_root: str | None = None
    report_interval_s: float = Field(5.0, ge=0)
    n_boot: int = Field(1000, ge=0, le=100_000, description="site-bootstrap replicates for the final report's 95 % CIs")
    #: seed of those replicates (recorded in the report); an integer >= 0, as ``[geohint] boot_seed``: numpy's
    #: generator takes no negative seed, so a negative one is refused at load rather than at report time
    boot_seed: int = Field(0, ge=0, description="seed of the site-bootstrap replicates (an integer >= 0)")
    live_n_boot: int | None = Field(None, ge=0, le=100_000, description="replicates for the live refresh; None = n_boot")

    @field_validator("tau_m")
    @classmethod
    def _below_first_band_edge(cls, v: float) -> float:
        # fixverify41 #2: the decoy bands are the paper's (Sec. 5.2: 0.15-0.3, ..., 3-6 km; with another tau the nearest
        # starts at tau, fixverify42 #1, fixverify43 #1: geoagent.data.model.decoy_bands_km) and a candidate nearer than tau is signal, so a tau at or past the nearest band's upper edge (0.3 km) leaves that band empty of decoys (every
        # candidate in it is signal), and its d' undefined in every report; refused here, naming the key
        upper_m = C.GEOVERIFY_DECOY_BANDS_KM[0][1] * 1000
        if v >= upper_m:
            raise ValueError(
                f"a tolerance below {upper_m:g} (metres; the paper's is 150): at or past the upper edge of the nearest "
                f"decoy band ({C.GEOVERIFY_DECOY_BANDS_KM[0][0]:g}-{C.GEOVERIFY_DECOY_BANDS_KM[0][1]:g} km, Sec. 5.2) "
                "every candidate of that band is signal, so it would hold no decoy trial")
        return v

    @field_validator("release_dir", "prompt_template", "image_root")
    @classmethod
    def _home(cls, v: str | None) -> str | None:
        return expand_home(v)  # a leading "~" is the home folder, as in [paths]


def check_whole_metres(cfg: Any) -> None:
    """Refuse to plan a GeoVerify run of ``cfg`` whose ``[geoverify] tau_m`` is no whole number of metres.

    review43c #7: the claim names tau in whole metres (:func:`geoagent.geoverify.prompt.render_claim`), so 149.6 asked
    "150 metres" while truth and bands were labelled at 149.6 m (a candidate at 149.8 m a decoy of a true claim).
    Checked where a run plans (:func:`geoagent.geoverify.plan.plan_campaign`, and before anything is created by
    :meth:`geoagent.geoverify.campaign.GeoVerifyKind.check_config_change`), not at load (fixguard43 #2): ``status``,
    ``export`` and ``dead`` still read a campaign stored at such a tau (allowed before session 43).

    Raises
    ------
    geoagent.config.ConfigError
        Naming the config file, the key and the value (the CLI exits 2).
    """
    from geoagent.config import ConfigError

    sec = cfg.section("geoverify") if hasattr(cfg, "section") else None
    v = getattr(sec, "tau_m", None)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v != round(v):
        raise ConfigError(str(getattr(cfg, "source", None) or cfg.name), [
            f"geoverify.tau_m: expected a whole number of metres (the claim the model reads names tau in whole "
            f"metres), got {v:g}"])


def _register() -> None:
    try:
        from geoagent.config import register_section
    except ImportError:  # partial checkout
        return
    register_section("geoverify", GeoVerifySettings)


_register()
