"""``[geohint]`` campaign settings (pydantic), registered with the config loader on import.

Every key with its default and a one-line comment: ``geoagent/configs/example.toml``.

Example::

    [geohint]
    conditions = ["baseline", "forced", "forced_warn", "forced_chain", "v1"]   # order = plan order
    baseline_repeats = 1          # no-context requests per image x model (the paper's median of 5 per site is 1 image x
                                  # 1 repeat x its 5 models, not 5 repeats)
    context_repeats = 1
    images_per_site = 3           # optional cap for small runs
    points_per_cell = 2           # optional: at most this many reference points per band x tier cell of a
                                  # site (a seeded draw; the paper's design draws 2, Sec. 3.3; the released
                                  # ladders hold up to 4); default: every point
    sites = ["tokyo_shibuya"]     # optional subset of the release's site ids
    prompts_dir = "my_prompts"    # optional edited copy of geoagent/prompts/geohint_*.txt
    image_root = "state/images"   # optional folder the trial table's `path` values are relative to (a crawl's
                                  # state/images holds <site>/<id>.jpg; a release copy streetview/<site>/<id>.jpg);
                                  # an image without a file there: see [images] missing (geoagent.image_files)
    max_output_tokens = 1024       # optional override of every model's [[models]] max_output_tokens
    sample_rates = { "claude-opus-5" = 0.3333 }   # per-model override of models[].sampling_rate; or by the
                                  # site's selection_method (sites.csv), the paper's "one third on the automatic
                                  # batch" (Sec. 6): { "claude-opus-5" = { algorithm = 0.3333 } } ("default" =
                                  # the other sites; unset: the model's own rate)
    regime_threshold = 0.5        # no-context hit rate that splits legible from illegible sites
    n_flips = 10000               # permutation sign flips (Tables 8-10)
    n_splits = 200                # split-half correction splits (Table 3)
    n_boot = 1000                 # site-bootstrap resamples of the 95 % intervals of Table 1 and Fig. 2
                                  # (0 = no intervals)
    boot_seed = 0                 # optional seed of those resamples (an integer >= 0; default: the
                                  # [campaign] seed, as before the key; named in the captions)
    report_interval_s = 5.0       # live report refresh
    images = "auto"               # "release": the release's images; "synthetic": placeholders per site;
                                  # "auto": release images where a site has them, placeholders elsewhere
    echo_rule = "name"            # "name": area/building contains a whole name of the reference point
                                  # (Sec. 6.2.1 read literally; default); "release_first_word": the
                                  # GeoContext release scripts' rule (first word of the English name or
                                  # first 4 characters of the Chinese name, anywhere in area + building),
                                  # for comparing with the paper's echo figures (Tables 1, 2, 4)
    p_reference = "normal"        # slope p-values (Tables 6-7, SEs clustered by site): "normal" (statsmodels'
                                  # default, as the release's scripts) or "t" (Student's t with G - 1 df,
                                  # G = site clusters; statsmodels use_t=True; safer with few sites)

    [geohint.geocoder]            # validated by geoagent.geohint.geocode_stage.GeocoderSettings
    contact = "ops@example.org"
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from geoagent.config import ConfigProblem, expand_home
from geoagent.geohint.conditions import DEFAULT_CONDITIONS, get_condition
from geoagent.geohint.echo import DEFAULT_ECHO_RULE


class GeoHintSettings(BaseModel):
    """Validated ``[geohint]`` table (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # as the rest of the config: "6" is no number

    conditions: list[str] = Field(default_factory=lambda: list(DEFAULT_CONDITIONS))
    baseline_repeats: int = Field(1, ge=1, le=1000)
    context_repeats: int = Field(1, ge=1, le=1000)
    images_per_site: int | None = Field(None, ge=1)
    #: at most this many reference points per ladder cell (band x tier) of a site, a seeded draw
    #: (:func:`geoagent.geohint.plan.cell_draw`); the paper's design: 2 (Sec. 3.3); default: every point
    points_per_cell: int | None = Field(None, ge=1, le=1000)
    #: plan only these site ids (default: every site of the release)
    sites: list[str] | None = None
    prompts_dir: str | None = None
    image_root: str | None = None
    release_dir: str | None = None
    #: override of every model's ``max_output_tokens`` for this task (default: each model's own)
    max_output_tokens: int | None = Field(None, gt=0)
    #: per model name: a rate, or a table of rates by the site's ``selection_method`` (sites.csv; "default": the
    #: other sites), e.g. { "claude-opus-5" = { algorithm = 0.3333 } } (seed 000 Sec. 6)
    sample_rates: dict[str, float | dict[str, float]] = Field(default_factory=dict)
    regime_threshold: float = Field(0.5, gt=0, lt=1)
    n_flips: int = Field(10_000, ge=1, le=1_000_000)
    n_splits: int = Field(200, ge=1, le=100_000)
    #: site-bootstrap resamples of the report's 95 % intervals (Table 1, Fig. 2; seeded by ``[campaign] seed``;
    #: 0 = no intervals), as ``[geoverify] n_boot``; a scoring setting, recorded in the manifest and named in
    #: the captions. 1000 (as GeoVerify's) since session 22: with 200 a percentile interval's ends moved by up to 5
    #: points between seeds on a 1,332-answer campaign (a walkthrough), more than a citation can carry
    n_boot: int = Field(1000, ge=0, le=100_000, description="site-bootstrap resamples for the report's 95 % CIs (0 = none)")
    #: seed of those resamples, as ``[geoverify] boot_seed`` (an integer >= 0: numpy's generator takes no negative
    #: seed); None (default) = the ``[campaign] seed``, which seeded them before this key, so results stay the
    #: same. It seeds only the bootstrap (Table 3's splits and Tables 8-10's flips keep the campaign seed); a
    #: scoring setting, recorded in the manifest and named in the captions
    boot_seed: int | None = Field(None, ge=0, description="seed of the site-bootstrap resamples; None = [campaign] seed")
    report_interval_s: float = Field(5.0, ge=0)
    images: Literal["auto", "release", "synthetic"] = "auto"
    #: echo rule (:data:`geoagent.geohint.echo.ECHO_RULES`); recorded in the manifest and named in the report
    echo_rule: Literal["name", "release_first_word"] = DEFAULT_ECHO_RULE
    #: reference distribution of the slope p-values (Tables 6-7): normal, or t with G - 1 df (G = site
    #: clusters); a scoring setting, recorded in the manifest and named in the report
    p_reference: Literal["normal", "t"] = "normal"
    #: ``[geohint.geocoder]``: the geocoder worker's table (checked by its GeocoderSettings)
    geocoder: dict[str, Any] = Field(default_factory=dict)

    @field_validator("prompts_dir", "image_root", "release_dir")
    @classmethod
    def _home(cls, v: str | None) -> str | None:
        return expand_home(v)  # a leading "~" is the home folder, as in [paths]

    @field_validator("geocoder")
    @classmethod
    def _geocoder_table(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            from geoagent.geohint.geocode_stage import GeocoderSettings
        except ImportError:  # partial checkout: accept the table as is
            return v
        where = "[geohint.geocoder]"
        try:
            GeocoderSettings.from_mapping(v, where=where)  # ValueError names the unknown key
        except ValueError as exc:  # the key path (geohint.geocoder) precedes the message already
            msg = str(exc)
            raise ConfigProblem(msg[len(where):].lstrip(":. ") if msg.startswith(where) else msg) from None
        return v

    @field_validator("conditions")
    @classmethod
    def _known_conditions(cls, v: list[str]) -> list[str]:
        names = []
        for n in v:
            try:
                c = get_condition(n)
            except KeyError as exc:
                raise ConfigProblem(exc.args[0]) from None
            if c.name in names:
                raise ConfigProblem(f"condition {c.name!r} listed twice")
            names.append(c.name)
        if not names:
            raise ValueError("at least one condition")
        return v

    @field_validator("sample_rates")
    @classmethod
    def _rates(cls, v: dict[str, float | dict[str, float]]) -> dict[str, float | dict[str, float]]:
        for k, r in v.items():
            table = r if isinstance(r, dict) else {None: r}
            if isinstance(r, dict) and not r:
                raise ConfigProblem(f"sample_rates[{k!r}]: an empty table; give a rate, or rates by selection_method")
            for method, rate in table.items():
                where = f"sample_rates[{k!r}]" + (f"[{method!r}]" if method is not None else "")
                if not 0 < rate <= 1:
                    raise ConfigProblem(f"{where} must be in (0, 1], got {rate}")
        return v


def _register() -> None:
    try:
        from geoagent.config import register_section
    except ImportError:  # partial checkout
        return
    register_section("geohint", GeoHintSettings)


_register()
