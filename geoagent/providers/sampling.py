"""Which sampling parameters each provider's current models accept, and how much output room thinking takes.

A request the API refuses with HTTP 400 is a fail-fast 4xx for our runtime: every request of that model is
dead-lettered at its first delivery. So the providers leave out what a model rejects, and the config loader
(:func:`geoagent.config.config_from_dict`) refuses a campaign that explicitly sets a value the model rejects,
naming the key. What was confirmed, and where (checked 2026-12-01):

OpenAI reasoning models (``o1``, ``o3``, ``o4-mini``, ``gpt-5``, ``gpt-5-mini``, ``gpt-5-nano``, ...)
    * We send them no ``temperature`` and no ``top_p`` at all (:func:`openai_sampling`: 1, the only value
      api.openai.com accepts, is their default, and Azure OpenAI refuses the parameter itself).
    * Reasoning guide, "Limitations" (https://platform.openai.com/docs/guides/reasoning#limitations, cited by
      the Vercel AI SDK when it strips them, https://github.com/vercel/ai/issues/10932): ``temperature``,
      ``top_p``, ``presence_penalty``, ``frequency_penalty``, ``logprobs`` / ``top_logprobs`` and
      ``logit_bias`` are not supported. A temperature other than the default 1 is refused with HTTP 400
      ``{"error": {"message": "Unsupported value: 'temperature' does not support 0 with this model. Only the
      default (1) value is supported.", "type": "invalid_request_error", "param": "temperature", "code":
      "unsupported_value"}}`` (reports for o1-mini, https://github.com/OpenHands/OpenHands/issues/4131, and
      gpt-5-mini on api.openai.com, https://github.com/QwenLM/qwen-code/issues/921). ``gpt-5-chat-latest``
      is not a reasoning model and takes a temperature (https://learnku.com/articles/90544, secondary).
    * ``reasoning_effort`` (API reference, ReasoningEffort, mirrored at
      https://learn.microsoft.com/en-us/javascript/api/@azure/ai-projects/reasoningeffort): models before
      ``gpt-5.1`` default to ``medium`` and do not support ``none``; ``gpt-5.1`` defaults to ``none``, and
      with effort ``none`` it accepts ``temperature`` / ``top_p`` / ``logprobs`` (vercel/ai#10932). We send
      no ``reasoning_effort``, and treat the whole ``gpt-5*`` family as reasoning models (leaving the
      temperature out is never refused); ``reasoning_model = false`` in ``[[models]]`` sends it anyway.
    * ``max_completion_tokens`` bounds visible output **and reasoning tokens** together ("You can limit the
      total number of tokens the model generates (including both reasoning and final output tokens)",
      reasoning guide, quoted at https://community.openai.com/t/limiting-maximum-number-of-reasoning-tokens/1285430);
      when reasoning uses it all the answer is ``content: ""`` with ``finish_reason: "length"`` and
      ``usage.completion_tokens_details.reasoning_tokens`` = ``completion_tokens`` (observed:
      https://community.openai.com/t/o1-preview-empty-response-content/1108948). The guide recommends
      reserving at least 25,000 tokens for reasoning and outputs when starting out
      (:data:`OPENAI_REASONING_MIN_OUTPUT`; quoted by https://www.onceonly.tech/blog/gpt5-mini-empty-responses,
      secondary).

OpenAI models under a name of their own (Azure OpenAI deployments)
    * Azure OpenAI's v1 API takes the plain OpenAI client with ``base_url =
      "https://<resource>.openai.azure.com/openai/v1/"`` and ``model`` = the deployment name ("Replace with your
      model deployment name", https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle), a name
      the user chose, so no id rule above can tell which model answers. ``[[models]] model_family`` (an OpenAI
      model id: ``o1-mini``, ``o3-mini``, ``gpt-4o``) names it; every rule here then reads the family instead of
      ``model``, on any host (``family`` arguments; :attr:`geoagent.config.ModelConfig.openai_rules_id`).
      Azure applies the reasoning rules of the model a deployment serves: "Unsupported parameter: 'max_tokens' is
      not supported with this model. Use 'max_completion_tokens' instead." for an o3-mini deployment
      (https://learn.microsoft.com/en-us/answers/a/2014879).

Anthropic Messages
    * Claude Opus 4.1 and the 4.5 models refuse ``temperature`` and ``top_p`` together: HTTP 400
      ``invalid_request_error`` "`temperature` and `top_p` cannot both be specified for this model. Please
      use only one." (https://github.com/BerriAI/litellm/issues/15097 for claude-sonnet-4-5-20250929,
      https://github.com/SalesforceAIResearch/MCP-Universe/issues/49 for claude-opus-4-5, opencode#1644 for
      Opus 4.1). The API reference has long said "You should either alter temperature or top_p, but not both".
    * Claude Opus 4.7 and later models refuse ``temperature``, ``top_p`` and ``top_k`` at any value: HTTP 400
      "`temperature` is deprecated for this model." (Anthropic, "Migrating to Claude Opus 4.7",
      https://platform.claude.com/docs/en/about-claude/models/migration-guide#migrating-to-claude-opus-4-7,
      summarised at https://openrouter.ai/docs/guides/evaluate-and-optimize/model-migrations/claude-4-7;
      reports https://github.com/sipeed/picoclaw/issues/2939 and Comfy-Org/ComfyUI#13923).
    * Extended thinking (``thinking: {"type": "enabled", "budget_tokens": N}``,
      https://platform.claude.com/en/docs/build-with-claude/extended-thinking): ``budget_tokens`` >= 1024 and
      < ``max_tokens`` (thinking tokens are output tokens counted against ``max_tokens``); with thinking on,
      temperature / top_k modifications are not allowed (only the default). Claude 4.7+ rejects
      ``budget_tokens`` (adaptive thinking only). We never send ``thinking`` (no key of ours maps to it), so
      no thinking tokens are spent and none of these rules is hit.

Google Gemini ``generateContent``
    * Gemini 2.5 Pro / Flash think by default (dynamic budget, ``thinkingBudget = -1``); thinking tokens
      count against ``maxOutputTokens`` and are billed as output (``usageMetadata.thoughtsTokenCount``); a
      candidate can stop on ``MAX_TOKENS`` with no text part when the thoughts used the cap
      (https://firebase.google.com/docs/ai-logic/thinking, https://dev.to/multigrid/geminis-thinking-budget-parameter-24l4,
      /work/shared/api-notes.md section 9). ``generationConfig.thinkingConfig.thinkingBudget``: Flash 0 to
      24,576 (0 turns thinking off), Pro 128 to 32,768 (cannot be turned off) (Gemini API "thinking" guide, as
      mirrored at https://share.apidog.com/apidoc/docs-site/750674/api-16240710). Flash-Lite does not think
      unless asked. Gemini 3 uses ``thinkingLevel`` instead (high by default); its token range is not
      documented, so its cap check uses the Pro figure (:data:`GEMINI_THINKING_BUDGET_MAX`, an assumption).
      Thinking cannot be turned off on Gemini 3 Pro, and Gemini 3 Flash does not turn it off fully: a
      ``thinking_budget`` 0 is refused at load for Gemini 3 Pro (as for 2.5 Pro) and, for Flash, warned of and
      not counted as "thinking off" (:func:`gemini_refuses_thinking_off`, :func:`gemini_budget_zero_thinks`;
      prov46 #4).
    * No Gemini model refuses our ``temperature`` / ``topP`` / ``seed`` (none found).
    * Gemini 3 models (``gemini-3*``: ``gemini-3-pro-preview``, ``gemini-3-flash-preview``, ``gemini-3.1-pro-preview``)
      are sent no ``temperature`` (:func:`gemini_sampling`; ``topP`` and ``seed`` still go as set). Google AI for
      Developers, "Gemini 3 developer guide", temperature section (https://ai.google.dev/gemini-api/docs/gemini-3;
      the Vertex AI "Gemini 3 prompting guide", "Temperature tuning", says the same), paraphrased: Google strongly
      recommends keeping the temperature at its default 1.0, for which Gemini 3's reasoning is tuned; a temperature
      below 1.0 may cause unexpected behaviour, looping or degraded performance, above all in complex mathematical
      or reasoning tasks. A loop runs to ``maxOutputTokens``, billed. Our default temperature 0.0 would be exactly
      that, so, as for Claude 4.7+, the temperature is left out whatever the config holds (the provider
      cannot tell the default from a written value; the request key still hashes the configured one), and the
      loader warns when a ``[[models]]`` entry writes a temperature other than 1 for such a model
      (:func:`geoagent.config.gemini_temperature_warnings`): it is not sent, the model samples at 1.0 (prov39 #3).

Anthropic's temperature range
    * The Messages API takes ``temperature`` from 0.0 to 1.0 (API reference, "Create a Message": "Defaults to 1.0.
      Ranges from 0.0 to 1.0"; :data:`ANTHROPIC_TEMPERATURE_MAX`), not OpenAI's and Gemini's 0 to 2: a request with
      more is refused with HTTP 400 ``invalid_request_error``, so the loader refuses a written temperature above 1
      for a ``provider = "anthropic"`` model (:func:`geoagent.config.sampling_problems`, prov39 #6). ``top_p`` is
      0 to 1 on every provider, which the loader checks for all.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

#: Host on which OpenAI's own reasoning-model rules apply (other OpenAI-compatible servers have their own); its
#: regional data-residency hosts (``eu.api.openai.com``, ``us.api.openai.com``) are OpenAI too (:func:`is_openai_host`).
OPENAI_HOST = "api.openai.com"
#: Documented OpenAI reasoning families (optionally behind ``ft:`` for fine-tunes): ``o1``, ``o3``, ``o4-mini``,
#: ... (``o<digit>``), the ``gpt-5`` family except the non-reasoning ``gpt-5-chat*``, and ``codex-mini``. Some of
#: them (``o3-pro``, ``gpt-5-pro``, ``codex-mini``, ``gpt-5-codex``) are served on the Responses API only
#: (:func:`openai_responses_only`): refused at load on api.openai.com, they keep the reasoning rules elsewhere (a
#: gateway that bridges Chat Completions to them, e.g. LiteLLM, OpenRouter's ``openai/o3-pro``).
_OPENAI_REASONING = re.compile(r"^(?:ft:)?(?:o\d+(?:[-.:_]|$)|gpt-5(?!-chat)|codex-mini)", re.IGNORECASE)
#: OpenAI's recommended room for reasoning + answer when starting with a reasoning model (tokens).
OPENAI_REASONING_MIN_OUTPUT = 25_000
#: Claude ids of the current scheme: ``claude-<tier>-<major>[-<minor>][-<date>]`` (e.g. ``claude-opus-4-1-20250805``,
#: ``claude-sonnet-4-5``, ``claude-opus-4-7``, ``claude-sonnet-5``); a minor has 1-2 digits, a date 8.
#: An OpenRouter variant suffix (``anthropic/claude-opus-4.7:thinking``, ``:beta``) ends the version as a date does
#: (review46b #6: without ``:`` there, ``claude-opus-4.7:thinking`` read as Opus 4.0).
_CLAUDE_ID = re.compile(r"^(?:anthropic/)?claude-(?P<tier>[a-z]+)-(?P<major>\d+)(?:[-.](?P<minor>\d{1,2}))?"
                        r"(?:[-@.:]|$)", re.IGNORECASE)
#: Highest ``temperature`` the Anthropic Messages API accepts ("Ranges from 0.0 to 1.0", API reference "Create a
#: Message"; OpenAI and Gemini take up to 2)
ANTHROPIC_TEMPERATURE_MAX = 1.0
#: Gemini 3 ids (``gemini-3-pro-preview``, ``gemini-3-flash-preview``, ``gemini-3.1-pro-preview``), after any
#: ``models/`` or ``google/`` prefix; not ``gemini-30...`` (no such model; a guard against a prefix match)
_GEMINI_3 = re.compile(r"^gemini-3(?:[-.]|$)", re.IGNORECASE)
#: Highest thinking budget a Gemini model may spend under dynamic thinking (tokens): Flash 24,576, Pro 32,768.
GEMINI_THINKING_BUDGET_MAX = {"flash": 24_576, "pro": 32_768}


def is_openai_host(host: str | None) -> bool:
    """Whether ``host`` (a hostname, any case; None or "" is not one) is OpenAI's own API: ``api.openai.com`` or a
    regional data-residency host under it (``eu.api.openai.com``, ``us.api.openai.com``: the same API and model
    rules, data kept in the region). Where a host decides "OpenAI's rules" it is decided here (review46b #7)."""
    h = (host or "").lower().rstrip(".")
    return h == OPENAI_HOST or h.endswith("." + OPENAI_HOST)


def openai_base_host(base_url: str | None) -> str:
    """The lower-case hostname ``base_url`` posts to; no ``base_url`` means the OpenAI provider's default host,
    :data:`OPENAI_HOST`."""
    return ((urlsplit(base_url).hostname or "") if base_url else OPENAI_HOST).lower()


def bare_model_id(model: str) -> str:
    """``model`` after any ``vendor/`` prefix (OpenRouter's ``openai/o3``, ``anthropic/claude-opus-4.7``)."""
    return model.strip().rsplit("/", 1)[-1]


def is_gemini_3(model: str) -> bool:
    """Whether ``model`` is a Gemini 3 id (``gemini-3-pro-preview``, ``gemini-3.1-pro-preview``,
    ``gemini-3-flash-preview``; not ``gemini-30...``), after any ``models/``, ``google/`` or other ``vendor/``
    prefix: the one reading behind :func:`gemini_keeps_default_temperature` and :func:`gemini_budget_zero_thinks`."""
    return bool(_GEMINI_3.match(bare_model_id(model).lower()))


def is_openai_reasoning_id(model: str) -> bool:
    """Whether an OpenAI model id belongs to a documented reasoning family (``o1``, ``o3-mini``, ``o4-mini``,
    ``gpt-5``, ``gpt-5-nano``, ``gpt-5.1``, ``codex-mini-latest``, ``ft:o4-mini:...``; not ``gpt-5-chat-latest``,
    ``gpt-4o``)."""
    return bool(_OPENAI_REASONING.match(model.strip()))


#: OpenAI's first reasoning previews, which take only user and assistant messages (no system, no developer)
_OPENAI_NO_SYSTEM = re.compile(r"^(?:ft:)?o1-(?:mini|preview)(?:[-.:_]|$)", re.IGNORECASE)


def openai_rejects_system(model: str) -> bool:
    """Whether an OpenAI model id refuses a ``system`` (and a ``developer``) message: ``o1-mini`` and
    ``o1-preview`` with their dated snapshots (``o1-mini-2024-09-12``). The o1 beta limitations read "Message
    types: user and assistant messages only, system messages are not supported"; the API answers HTTP 400
    ``unsupported_value`` "Unsupported value: 'messages[0].role' does not support 'system' with this model."
    (https://community.openai.com/t/o1-models-do-not-support-system-role-in-chat-completion/953880). ``o1``
    (2024-12-17 and later), ``o3-mini`` and later take one (a system message is read as a developer message;
    https://community.openai.com/t/how-is-developer-message-better-than-system-prompt/1062784, OpenAI staff; the
    per-model table at https://community.openai.com/t/developer-role-not-accepted-for-o1-o1-mini-o3-mini/1110750/7).
    Decided by the id on any host: putting the text in the user message instead is accepted everywhere."""
    return bool(_OPENAI_NO_SYSTEM.match(model.strip()))


#: OpenAI models that take no image input: ``o1-mini``, ``o1-preview`` and ``o3-mini`` (with dated snapshots and
#: fine-tunes). Per-model table of what api.openai.com accepts ("messages/user-images": No for o3-mini, o1-preview
#: and o1-mini, Yes for o1), https://community.openai.com/t/developer-role-not-accepted-for-o1-o1-mini-o3-mini/1110750/7,
#: and the 400s those three answer to an image while o1 describes it,
#: https://community.openai.com/t/api-reasoning-models-without-image-support-returning-bad-validation-error-message/1110985;
#: o3 and o4-mini take images (https://community.openai.com/t/responses-api-image-upload-error-worked-before/1289584)
_OPENAI_NO_IMAGES = re.compile(r"^(?:ft:)?(?:o1-(?:mini|preview)|o3-mini)(?:[-.:_]|$)", re.IGNORECASE)
#: OpenAI models that refuse ``response_format`` (JSON mode and Structured Outputs): ``o1-mini`` and ``o1-preview``
#: (the same per-model table: "response_format-object" / "-schema" No for both, Yes for o3-mini and o1; the
#: Structured Outputs 400 reported for o1-mini, https://github.com/dzhng/deep-research/issues/96)
_OPENAI_NO_RESPONSE_FORMAT = _OPENAI_NO_SYSTEM
#: what an OpenAI model id (or a ``[[models]] model_family``) looks like: ``o1``..``o4-mini``, ``gpt-3.5-turbo``,
#: ``gpt-4o``, ``gpt-4.1-mini``, ``gpt-5*``, ``chatgpt-4o-latest``, ``codex-mini-latest``, fine-tunes ``ft:...``
_OPENAI_ID = re.compile(r"^(?:ft:)?(?:o\d+(?:[-.:_]|$)|gpt-\d|chatgpt-|codex-mini)", re.IGNORECASE)


def is_openai_model_id(model: str) -> bool:
    """Whether ``model`` names an OpenAI model (family) whose rules we know how to read: ``o1-mini``,
    ``o3-mini-2025-01-31``, ``gpt-4o``, ``gpt-5-mini``, ``chatgpt-4o-latest``, ``codex-mini-latest``, ``ft:o4-mini:...``;
    not ``llama-3``, ``my-deployment``. The config loader accepts ``[[models]] model_family`` only in this form."""
    return bool(_OPENAI_ID.match(model.strip()))


#: OpenAI models served only on the Responses API (``POST /v1/responses``), never on Chat Completions: ``o1-pro``,
#: ``o3-pro``, the deep-research models (``o3-deep-research``, ``o4-mini-deep-research``), ``gpt-5-pro`` /
#: ``gpt-5.x-pro``, ``codex-mini`` (``codex-mini-latest``), ``gpt-5-codex`` / ``gpt-5.x-codex`` (``-mini``, ``-max``)
#: and ``computer-use-preview``, with dated snapshots. api.openai.com answers their Chat Completions call HTTP 404
#: ``{"error": {"message": "This model is only supported in v1/responses and not in v1/chat/completions.", "type":
#: "invalid_request_error", "param": "model", "code": null}}`` (reported for codex-mini-latest, openai/codex#1306 and
#: continuedev/continue#5758; gpt-5-codex, alvinunreal/tmuxai#82; o1-pro / o3-pro, sigoden/aichat#1318; the
#: gpt-5-codex prompting guide: "only supported with the Responses API"); Azure OpenAI answers 400
#: ``OperationNotSupported`` "The chatCompletion operation does not work with the specified model"
#: (langgenius/dify-plugin-sdks#264). Checked 2026-12-06 (prov46 #1)
_OPENAI_RESPONSES_ONLY = re.compile(
    r"^(?:ft:)?(?:o1-pro|o3-pro|o\d+(?:-mini)?-deep-research|gpt-5(?:\.\d+)?-(?:pro|codex)|codex-mini"
    r"|computer-use-preview)(?:[-.:_]|$)", re.IGNORECASE)


def openai_responses_only(model: str) -> bool:
    """Whether an OpenAI model id (or ``[[models]] model_family``) is served only on the Responses API
    (:data:`_OPENAI_RESPONSES_ONLY`: ``o3-pro``, ``o3-deep-research``, ``gpt-5-pro``, ``gpt-5.2-pro``,
    ``codex-mini-latest``, ``gpt-5.1-codex-max``, ``computer-use-preview``, ...; not ``o3``, ``gpt-5``,
    ``gpt-5-chat-latest``). geoagent speaks Chat Completions only, so the config loader refuses such a model (or
    ``model_family``) on api.openai.com and its regional hosts, and such a ``model_family`` on Azure OpenAI
    (:func:`geoagent.config.responses_only_problems`)."""
    return bool(_OPENAI_RESPONSES_ONLY.match(model.strip()))


def openai_rejects_images(model: str) -> bool:
    """Whether an OpenAI model id (or family) takes no image input: ``o1-mini``, ``o1-preview``, ``o3-mini`` and
    their snapshots. The API answers an image part with HTTP 400 ``invalid_request_error`` "Invalid content type.
    image_url is only supported by certain models." (``param`` ``messages.[0].content.[1].type``, ``code`` null;
    quoted at https://community.openai.com/t/responses-api-image-upload-error-worked-before/1289584), or, for an
    https image URL, "Invalid image URL: ... Expected a base64-encoded data URL" (the 1110985 thread above). The
    config loader refuses a campaign that would send such a model a photo (:func:`geoagent.config.image_problems`)."""
    return bool(_OPENAI_NO_IMAGES.match(model.strip()))


def openai_rejects_response_format(model: str) -> bool:
    """Whether an OpenAI model id (or family) refuses ``response_format`` (``o1-mini``, ``o1-preview``): HTTP 400
    "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model." as reported
    for o1-mini (dzhng/deep-research#96); the ``json_object`` wording and ``param: "response_format"`` are those
    reported for other models that lack JSON mode (mrwadams/stride-gpt#19; unconfirmed for o1-mini itself). The
    provider leaves the field out for them; the answer's JSON is read from its text as for any model."""
    return bool(_OPENAI_NO_RESPONSE_FORMAT.match(model.strip()))


def openai_reasoning(model: str, base_url: str | None, override: bool | None = None, family: str | None = None) -> bool:
    """Whether requests to ``model`` at ``base_url`` follow OpenAI's reasoning-model rules (no temperature, no
    top_p, ``max_completion_tokens``): ``override`` when set (``[[models]] reasoning_model``), else, when
    ``family`` is given (``[[models]] model_family``: the OpenAI model a deployment such as Azure OpenAI's serves
    under a name of its own), whether that family is a reasoning one on any host, else a documented reasoning id on
    ``api.openai.com`` (no ``base_url`` means that host)."""
    if override is not None:
        return bool(override)
    if family:
        return is_openai_reasoning_id(family)
    return is_openai_host(openai_base_host(base_url)) and is_openai_reasoning_id(model)


def _claude_version(model: str) -> tuple[str, int, int] | None:
    m = _CLAUDE_ID.match(model.strip())
    if m is None:
        return None
    return m["tier"].lower(), int(m["major"]), int(m["minor"] or 0)


def claude_rejects_sampling(model: str) -> bool:
    """Whether a Claude model refuses ``temperature`` / ``top_p`` / ``top_k`` at any value (Opus 4.7 and
    every Claude model of version 4.7 or later, e.g. ``claude-opus-4-7``, ``claude-sonnet-5``)."""
    v = _claude_version(model)
    return v is not None and (v[1], v[2]) >= (4, 7)


def claude_one_sampler(model: str) -> bool:
    """Whether a Claude model refuses ``temperature`` and ``top_p`` in one request (Opus 4.1 and later,
    every 4.5+ model; older ids such as ``claude-3-5-sonnet-20241022`` or ``claude-sonnet-4-20250514`` take
    both)."""
    v = _claude_version(model)
    if v is None:
        return False
    tier, major, minor = v
    return (major, minor) >= (4, 5) or (tier == "opus" and (major, minor) >= (4, 1))


def gemini_thinking_budget_max(model: str) -> int | None:
    """Most thinking tokens a Gemini model may spend by default (tokens), or None for a model that does not
    think unless asked (Flash-Lite, 2.0 and older, unknown ids). ``gemini-2.5-flash*`` -> 24,576;
    ``gemini-2.5-pro*`` and ``gemini-3*`` -> 32,768 (for Gemini 3 an assumption: see the module docstring)."""
    mid = model.strip().lower().removeprefix("models/").removeprefix("google/")
    if "lite" in mid:
        return None
    if mid.startswith("gemini-2.5-flash"):
        return GEMINI_THINKING_BUDGET_MAX["flash"]
    if mid.startswith("gemini-2.5-pro") or mid.startswith("gemini-3"):
        return GEMINI_THINKING_BUDGET_MAX["pro"]
    return None


#: Gemini 3 Pro ids (``gemini-3-pro-preview``, ``gemini-3.1-pro-preview``), after any ``models/`` or ``vendor/`` prefix
_GEMINI_3_PRO = re.compile(r"^gemini-3(?:\.\d+)?-pro(?:[-.]|$)", re.IGNORECASE)
#: the smallest ``thinkingBudget`` a Gemini model that cannot turn thinking off takes (Gemini 2.5 Pro: 128 to 32,768)
GEMINI_ALWAYS_THINKING_MIN_BUDGET = 128


def gemini_refuses_thinking_off(model: str) -> bool:
    """Whether a Gemini model cannot turn thinking off and refuses ``thinkingBudget`` 0 to 127 with HTTP 400 ("Budget
    0 is invalid. This model only works in thinking mode."): Gemini 2.5 Pro (128 to 32,768) and Gemini 3 Pro
    (``gemini-3-pro-preview``, ``gemini-3.1-pro-preview``): Google's thinking guide (https://ai.google.dev/gemini-api/
    docs/thinking, as quoted in enricoros/big-AGI#893 and spring-projects/spring-ai#4983) says thinking cannot be
    turned off for Gemini 3 Pro, which takes ``thinkingLevel`` low or high; its budget range is assumed to be 2.5
    Pro's (prov46 #4)."""
    mid = bare_model_id(model).lower()
    return mid.startswith("gemini-2.5-pro") or bool(_GEMINI_3_PRO.match(mid))


def gemini_budget_zero_thinks(model: str) -> bool:
    """Whether ``thinkingBudget = 0`` leaves a Gemini model thinking: every Gemini 3 model (``gemini-3*``). Pro
    refuses it (:func:`gemini_refuses_thinking_off`); Flash takes it, but Google's thinking guide says Gemini 3 Flash
    does not support turning thinking off fully (its lowest ``thinkingLevel``, minimal, "does not guarantee that
    thinking is off"), and clients report 3.x Flash models that accept a zero budget and think anyway
    (maragudk/gai#369). So 0 is not counted as "thinking off" for them (prov46 #4); on Gemini 2.5 Flash and
    Flash-Lite it is."""
    return is_gemini_3(model)


def gemini_thinks_when_asked(model: str) -> bool:
    """Whether a Gemini model that does not think by default thinks when ``thinkingBudget`` > 0 asks it to
    (``gemini-2.5-flash-lite*``: off by default, 512 to 24,576 tokens when set; Gemini thinking guide, mirrored
    at https://share.apidog.com/apidoc/docs-site/750674/api-16240710). Its thinking tokens then count against
    ``maxOutputTokens`` as on the other 2.5 models."""
    mid = model.strip().lower().removeprefix("models/").removeprefix("google/")
    return mid.startswith("gemini-2.5-flash-lite")


#: Azure OpenAI's host suffixes: its reasoning models refuse the temperature parameter itself (OpenAI's, on
#: :func:`is_openai_host`, take only 1; :func:`openai_sampling`)
_AZURE_HOST_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def is_azure_openai_host(host: str | None) -> bool:
    """Whether ``host`` (a hostname, any case) is an Azure OpenAI resource (``<resource>.openai.azure.com`` and the
    other :data:`_AZURE_HOST_SUFFIXES`): OpenAI's models, served under deployment names of the user's own."""
    return (host or "").lower().rstrip(".").endswith(_AZURE_HOST_SUFFIXES)


def openai_keeps_unit_temperature(base_url: str | None, reasoning_model: bool | None = None,
                                  family: str | None = None) -> bool:
    """Whether a reasoning-rules request still carries an explicit ``temperature`` of 1 (:func:`openai_sampling`):
    only when the reasoning rules come from ``[[models]] reasoning_model = true`` on a server that is neither
    api.openai.com nor Azure OpenAI and no ``model_family`` is declared, e.g. a self-hosted reasoning model on
    vLLM, whose default temperature is its own (DeepSeek-R1's generation config: 0.6), so leaving out a
    configured 1 would change the sampling. On OpenAI 1 is the default and the only value accepted; Azure
    refuses the parameter at any value."""
    if reasoning_model is not True or family:
        return False
    host = openai_base_host(base_url)
    return not is_openai_host(host) and not is_azure_openai_host(host)


def openai_sampling(params: dict[str, Any], reasoning: bool, *, keep_unit_temperature: bool = False
                    ) -> dict[str, Any]:
    """The ``temperature`` / ``top_p`` / ``seed`` body fields for one OpenAI-compatible request.

    A reasoning model is sent neither ``temperature`` nor ``top_p``: it samples at its default temperature 1
    whatever is configured (api.openai.com refuses any other value; the loader refuses an explicit one, so a
    configured value is the default 0.0 or 1). Leaving out 1 as well changes no answer (1 is the default) and
    keeps the request valid where the parameter itself is refused: Azure OpenAI deployments of o1 and o3-mini
    answer HTTP 400 "Unsupported parameter: 'temperature' is not supported with this model." at any value
    (cline/cline#2643, langchain4j/langchain4j#2699; Azure's reasoning guide lists temperature among the
    unsupported parameters, learn.microsoft.com/azure/ai-services/openai/how-to/reasoning). It also means two
    configurations differing only in that unsent temperature made the same requests (:mod:`geoagent.runtime.drift`).
    Other models get every value that is set. ``keep_unit_temperature``
    (:func:`openai_keeps_unit_temperature`: ``reasoning_model = true`` on a server of its own) keeps a configured
    temperature of exactly 1, as such a server's default may differ.
    """
    out = {name: params[name] for name in ("temperature", "top_p", "seed") if params.get(name) is not None}
    if reasoning:
        out.pop("top_p", None)
        if not (keep_unit_temperature and out.get("temperature") == 1):
            out.pop("temperature", None)
    return out


def anthropic_sampling(params: dict[str, Any], model: str) -> dict[str, Any]:
    """The ``temperature`` / ``top_p`` body fields for one Messages request to ``model``: none for a model
    that refuses sampling parameters (:func:`claude_rejects_sampling`); only ``top_p`` when both are set for a
    model that refuses the pair (:func:`claude_one_sampler`: the temperature then is the config's default,
    since the loader refuses both set explicitly); else each one set."""
    out = {name: params[name] for name in ("temperature", "top_p") if params.get(name) is not None}
    if claude_rejects_sampling(model):
        return {}
    if "top_p" in out and "temperature" in out and claude_one_sampler(model):
        out.pop("temperature")
    return out


#: the sampling settings of a request's params that a provider may or may not put in the body (same names as
#: the params: ``temperature``, ``top_p``, ``seed``)
SAMPLING_PARAMS = ("temperature", "top_p", "seed")


def gemini_keeps_default_temperature(model: str) -> bool:
    """Whether a Gemini model is sent no ``temperature``, so that it samples at its default 1.0: the Gemini 3 family
    (``gemini-3-pro-preview``, ``models/gemini-3-flash-preview``, ``gemini-3.1-pro-preview``; not ``gemini-2.5-pro``),
    whose developer guide strongly recommends keeping the default (module docstring, prov39 #3)."""
    return is_gemini_3(model)


def gemini_sampling(params: dict[str, Any], model: str) -> dict[str, Any]:
    """The ``temperature`` / ``top_p`` / ``seed`` settings of ``params`` (under the params' names) that one
    ``generateContent`` request to ``model`` carries in ``generationConfig`` (as ``temperature``, ``topP``,
    ``seed``): each one set, except the temperature for a Gemini 3 model (:func:`gemini_keeps_default_temperature`),
    written or the config's default 0.0 alike, as Claude 4.7+ models get none."""
    out = {name: params[name] for name in SAMPLING_PARAMS if params.get(name) is not None}
    if gemini_keeps_default_temperature(model):
        out.pop("temperature", None)
    return out


def openai_prefixed_reasoning(model: str, base_url: str | None, override: bool | None = None,
                              family: str | None = None) -> bool:
    """Whether ``model`` is an OpenAI reasoning id behind OpenAI's vendor prefix (``openai/o3``, ``openai/gpt-5-mini``
    on OpenRouter or a LiteLLM proxy) that :func:`openai_reasoning` does not already cover (neither
    ``reasoning_model`` nor ``model_family`` set). Such a model samples at its default temperature 1 whatever is
    asked: OpenRouter ignores the parameters a model does not support, a proxy refuses them. Its requests are sent
    no ``temperature`` and no ``top_p`` (:func:`openai_compat_sampling`), so the record says what the model used;
    the output-cap field and the other rules are left to the host (prov46 #2)."""
    # only OpenAI's own vendor prefix: a Hugging Face id such as someorg/o1-like-distill on vLLM is another model
    if override is not None or family or not model.strip().lower().startswith("openai/"):
        return False
    return not is_openai_host(openai_base_host(base_url)) and is_openai_reasoning_id(bare_model_id(model))


def claude_compat_sampling(sent: dict[str, Any], model: str) -> dict[str, Any]:
    """``sent`` (sampling body fields of an OpenAI-compatible request) less what a Claude model refuses, by the
    rules :func:`anthropic_sampling` applies on the Messages API, read on the id after any ``vendor/`` prefix
    (``anthropic/claude-opus-4.7`` on OpenRouter, ``claude-opus-4-7`` on Anthropic's own OpenAI-compatible
    endpoint ``https://api.anthropic.com/v1``): no ``temperature`` and no ``top_p`` for Claude 4.7+
    (:func:`claude_rejects_sampling`), only ``top_p`` when both are set for Opus 4.1 / 4.5+ (:func:`claude_one_sampler`).
    Both refusals are HTTP 400 on every route (prov46 #2: they were sent, and recorded as sent)."""
    bare = bare_model_id(model)
    if _claude_version(bare) is None:
        return sent
    out = dict(sent)
    if claude_rejects_sampling(bare):
        out.pop("temperature", None)
        out.pop("top_p", None)
    elif "temperature" in out and "top_p" in out and claude_one_sampler(bare):
        out.pop("temperature")
    return out


def openai_compat_sampling(params: dict[str, Any], model: str, base_url: str | None, *,
                           reasoning_model: bool | None = None, family: str | None = None) -> dict[str, Any]:
    """The ``temperature`` / ``top_p`` / ``seed`` body fields of one OpenAI-compatible (Chat Completions) request
    for ``model`` at ``base_url``: :func:`openai_sampling` under OpenAI's reasoning rules when
    :func:`openai_reasoning` or :func:`openai_prefixed_reasoning` says they apply, then no temperature for a
    Gemini 3 id (:func:`gemini_keeps_default_temperature`) and Claude's refusals (:func:`claude_compat_sampling`).
    The one reading of both the provider's body (:meth:`geoagent.providers.openai_compat.OpenAICompatProvider.build`)
    and the record of what was sent (:func:`sent_sampling`)."""
    reasoning = (openai_reasoning(model, base_url, reasoning_model, family)
                 or openai_prefixed_reasoning(model, base_url, reasoning_model, family))
    out = openai_sampling(params, reasoning,
                          keep_unit_temperature=openai_keeps_unit_temperature(base_url, reasoning_model, family))
    if gemini_keeps_default_temperature(model):  # Gemini 3 behind an OpenAI-compatible route (review39b #7)
        out.pop("temperature", None)
    return claude_compat_sampling(out, model)


def sent_sampling(provider: str, model: str, params: dict[str, Any], *, base_url: str | None = None,
                  reasoning_model: bool | None = None, family: str | None = None) -> dict[str, Any]:
    """The sampling settings of ``params`` (:data:`SAMPLING_PARAMS`) that the provider of kind ``provider`` puts
    in the request body for ``model``, under the names of the params: :func:`openai_compat_sampling` for ``openai``
    (``base_url``, ``reasoning_model``, ``family`` as in :func:`openai_reasoning`), :func:`anthropic_sampling` for
    ``anthropic`` (the Messages API has no seed), :func:`gemini_sampling` for ``gemini`` (no temperature for
    Gemini 3), every one set for ``simulated``, none for
    ``replay`` (its answers are read from a file; no request is sent). The request key hashes the params as
    configured, whatever is sent (:meth:`geoagent.providers.base.ModelRequest.key`)."""
    if provider == "openai":
        return openai_compat_sampling(params, model, base_url, reasoning_model=reasoning_model, family=family)
    if provider == "anthropic":
        return anthropic_sampling(params, model)
    if provider == "gemini":
        return gemini_sampling(params, model)
    if provider == "replay":
        return {}
    return {name: params[name] for name in SAMPLING_PARAMS if params.get(name) is not None}


def _openai_documents_seed(base_url: str | None) -> bool:
    """Whether ``base_url`` (None: the provider's default, api.openai.com) is OpenAI's own API or Azure OpenAI,
    where OpenAI's documentation of ``seed`` (best effort: "system_fingerprint" changes with the backend) is the
    host's rule (review46b #5)."""
    host = openai_base_host(base_url)
    return is_openai_host(host) or is_azure_openai_host(host)


#: why a sampling field was not sent, one clause per rule (:func:`sampling_record`; the same words on every provider)
_WHY_CLAUDE_NONE = ("Claude 4.7 and later models refuse temperature, top_p and top_k at any value, so the model "
                    "samples at its own default")
_WHY_CLAUDE_ONE = "this Claude model refuses temperature and top_p together: only top_p is sent"
_WHY_GEMINI_3 = ("Gemini 3 models are sent no temperature: Google's Gemini 3 developer guide strongly recommends "
                 "their default 1.0 (lower values can loop or degrade reasoning), so the model samples at 1.0")


def sampling_record(provider: str, model: str, params: dict[str, Any], *, base_url: str | None = None,
                    reasoning_model: bool | None = None, family: str | None = None) -> dict[str, Any]:
    """What the manifest records of one model's sampling settings: ``{"sent": {...}, "not_sent": {...}}``, the
    settings of ``params`` put in the body (:func:`sent_sampling`) and those set but left out, with ``"why"``
    (one sentence naming the rule) when any is left out. Arguments as for :func:`sent_sampling`."""
    sent = sent_sampling(provider, model, params, base_url=base_url, reasoning_model=reasoning_model, family=family)
    not_sent = {n: params[n] for n in SAMPLING_PARAMS if params.get(n) is not None and n not in sent}
    out: dict[str, Any] = {"sent": sent, "not_sent": not_sent}
    # a seed sent to OpenAI or Azure OpenAI is best effort by OpenAI's own documentation: said even when nothing is
    # left out (prov46 #5). Not on other hosts (Ollama, vLLM, a gateway, the sandbox fake): how their seed behaves
    # is theirs, and an unchanged config's manifest stays as it was (review46b #5)
    best_effort = provider == "openai" and "seed" in sent and _openai_documents_seed(base_url)
    if not not_sent and not best_effort:
        return out
    whys = []
    if provider == "openai":
        whys += _openai_whys(model, not_sent, base_url, reasoning_model, family)
        if best_effort:
            whys.append("the seed is sent, but OpenAI documents it as best effort (the same seed and parameters "
                        "usually, not always, give the same answer; system_fingerprint changes with the backend), so "
                        "repeated requests may differ")
    elif provider == "anthropic":
        if claude_rejects_sampling(model):
            whys.append(_WHY_CLAUDE_NONE)
        elif "temperature" in not_sent:
            whys.append(_WHY_CLAUDE_ONE)
        if "seed" in not_sent:
            whys.append("the Messages API has no seed")
    elif provider == "gemini":
        whys.append(_WHY_GEMINI_3)
    elif provider == "replay":
        whys.append("replayed answers: no request is sent")
    out["why"] = "; ".join(whys)
    return out


def _openai_whys(model: str, not_sent: dict[str, Any], base_url: str | None, reasoning_model: bool | None,
                 family: str | None) -> list[str]:
    """The rules (one clause each) that left ``not_sent`` out of an OpenAI-compatible request for ``model``
    (:func:`openai_compat_sampling`)."""
    if not not_sent:
        return []
    bare = bare_model_id(model)
    if openai_reasoning(model, base_url, reasoning_model, family):
        return ["an OpenAI reasoning model is sent no temperature and no top_p (it accepts none but its default "
                "temperature 1), so the model samples at its own default"]
    if openai_prefixed_reasoning(model, base_url, reasoning_model, family):
        return [f"{bare} is an OpenAI reasoning model (behind the prefix of {model}), sent no temperature and no top_p: "
                "it samples at its default temperature 1 whatever is asked (a gateway ignores or refuses the values)"]
    if claude_rejects_sampling(bare):
        return [_WHY_CLAUDE_NONE]
    whys = []
    if gemini_keeps_default_temperature(model) and "temperature" in not_sent:
        whys.append(_WHY_GEMINI_3)
    elif "temperature" in not_sent and claude_one_sampler(bare):
        whys.append(_WHY_CLAUDE_ONE)
    return whys


def azure_deployment_problem(name: str) -> str | None:
    """Why ``name`` cannot be an Azure OpenAI deployment name in the classic route's path
    (``/openai/deployments/{name}/chat/completions``), or None. The provider percent-encodes the name as one path
    segment (``/``, ``?``, ``#``, spaces and non-ASCII letters stay inside it), but ``.`` and ``..`` are unreserved
    characters that stay as they are, and an HTTP client resolves them as dot segments (RFC 3986 section 5.2.4):
    ``..`` would post to ``/openai/chat/completions``, no deployment. Control characters are refused too (no
    deployment name holds one: a pasted line break or tab)."""
    if name in (".", ".."):
        return (f"{name!r} is a dot segment, which the URL resolves away (the call would not reach a deployment); "
                "use the deployment's name as Azure shows it")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "it holds a control character (a line break or tab pasted with it?)"
    return None
