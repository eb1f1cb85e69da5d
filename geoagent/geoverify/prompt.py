"""Render the GeoVerify claim prompt from an editable template (seed 000 Sec. 5.2, Appendix A.2).

The template is plain text with two placeholders, ``{candidate}`` (the candidate's name, the only thing
the model learns about it: no coordinates, city or description) and ``{tau_m}`` (the tolerance in
metres). Placeholders are replaced literally (no ``str.format``), so JSON braces in the template need
no escaping. A campaign can point at its own template with config key ``geoverify.prompt_template``.
"""

from __future__ import annotations

import re
from pathlib import Path

from geoagent import constants as C
from geoagent.textfmt import label_text

DEFAULT_TEMPLATE_PATH = Path(__file__).resolve().parents[1] / "prompts" / "geoverify_claim.txt"
CONFIG_KEY = "prompt_template"  # under the campaign config's ``geoverify`` section


#: the placeholders a claim template may use (:func:`render_claim` fills them in)
PLACEHOLDERS = ("candidate", "tau_m")
#: a placeholder-shaped word in braces, ``{tau}``; JSON braces (``{"verdict": ...}``) do not match
_PLACEHOLDER = re.compile(r"\{([A-Za-z_0-9][A-Za-z0-9_]*)\}")
#: a placeholder written with a field, an index, a conversion or a format spec (``{candidate.upper}``,
#: ``{candidate[0]}``, ``{candidate!r}``, ``{tau_m:>5}``): the template is filled by plain replacement, so such a
#: form would reach the model as written
_PLACEHOLDER_FORM = re.compile(r"\{(candidate|tau_m)[.\[!:][^{}]*\}")


class TemplateError(ValueError):
    """The template file is missing, lacks the ``{candidate}`` placeholder or has one GeoVerify does not fill."""


def load_template(path: str | Path | None = None, *, source: str | None = None) -> str:
    """Read a claim template (default: ``geoagent/prompts/geoverify_claim.txt``).

    ``path`` is the configured ``geoverify.prompt_template``: a relative one is taken from the working
    directory, as every path of a campaign file (docs/campaigns.md, "Paths in a config"). ``source`` names the
    config file in the error (:attr:`geoagent.config.CampaignConfig.source`).

    Raises
    ------
    TemplateError
        The file cannot be read (the message names the key, the config file and the folder a relative path
        was taken from, :func:`geoagent.paths.config_path_problem`), is not UTF-8 text (the key, the config
        file and the file), has no ``{candidate}`` placeholder, or has a placeholder other than ``{candidate}``
        and ``{tau_m}`` (a ``{word}`` in braces, e.g. ``{tau}``: it would reach the model as written).
    """
    p = Path(path) if path else DEFAULT_TEMPLATE_PATH
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        if not path:
            raise TemplateError(f"cannot read GeoVerify prompt template {p}: {exc}") from None
        from geoagent.paths import config_path_problem

        why = exc.strerror or type(exc).__name__
        raise TemplateError(f"cannot read GeoVerify prompt template {path} ({why}): "
                            f"{config_path_problem('geoverify.' + CONFIG_KEY, path, source)}") from None
    except UnicodeDecodeError as exc:  # saved as UTF-16 or Latin-1: the key and the file, not the codec's words only
        where = f"geoverify.{CONFIG_KEY} in {source}" if source and not str(source).startswith("<") else \
            f"geoverify.{CONFIG_KEY}"
        raise TemplateError(f"GeoVerify prompt template {p} is not UTF-8 text ({exc.reason} at byte {exc.start}): "
                            f"{where}; save it as UTF-8") from None
    forms = sorted({m.group(0) for m in _PLACEHOLDER_FORM.finditer(text)})
    if forms:  # break34 config #9: called "no {candidate} placeholder" before
        raise TemplateError(f"GeoVerify prompt template {p} writes a placeholder with a field, index, conversion or "
                            f"format ({', '.join(forms)}): write {{candidate}} or {{tau_m}} alone (the template is "
                            "filled by plain replacement: the name goes in as written)")
    unknown = sorted({m for m in _PLACEHOLDER.findall(text) if m not in PLACEHOLDERS})
    named = ", ".join("{" + m + "}" for m in unknown)
    known = "its placeholders are {candidate} (the place's name) and {tau_m} (the tolerance in metres)"
    if "{candidate}" not in text:
        raise TemplateError(f"GeoVerify prompt template {p} has no {{candidate}} placeholder"
                            + (f" (it has {named}, which is not one)" if unknown else "") + f"; {known}")
    if unknown:
        # the text would go to the model as written, "{tau}" and all, on every request
        raise TemplateError(f"GeoVerify prompt template {p} has unknown placeholder(s) {named}: {known}")
    return text


def render_claim(candidate: str, template: str | None = None, tau_km: float = C.GEOVERIFY_TAU_KM) -> str:
    """The claim prompt for one candidate name.

    Parameters
    ----------
    candidate : str
        The candidate's name (e.g. ``"Schreierstoren"``); surrounding whitespace is stripped, control and
        bidirectional formatting characters dropped, line breaks and tabs made spaces.
    template : str, optional
        Template text (default: the packaged template).
    tau_km : float
        Tolerance in km; written as whole metres.

    Raises
    ------
    ValueError
        Empty candidate name.
    """
    # no control or bidi character of a hostile label reaches the prompt (crawl38 #2); inner spaces are kept, so the
    # prompt and request key of a name without such characters stay as they were (one with a tab, a line break or a
    # control character gets another prompt, and key, than before session 38: review38 #4)
    name = label_text(candidate, collapse=False)
    if not name:
        raise ValueError("candidate name is empty")
    text = template if template is not None else load_template()
    return text.replace("{tau_m}", f"{round(tau_km * 1000):d}").replace("{candidate}", name)
