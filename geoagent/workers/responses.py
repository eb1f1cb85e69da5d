"""The answer text a parser stage reads from a ``responses`` message.

The model caller puts the answer ``text`` into the message, or only its ``request_key`` when the text
stays in the results store (service ``"store"``, :class:`geoagent.runtime.store.ResultStore`); the
GeoHint and GeoVerify parser stages both read it through :func:`response_text`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from geoagent.runtime.stage import PermanentFailure, StageContext


async def response_text(payload: Mapping[str, Any], ctx: StageContext) -> str | None:
    """The answer text of one ``responses`` message.

    Parameters
    ----------
    payload : mapping
        The message payload: ``text`` (str), or ``request_key`` naming the stored response.
    ctx : StageContext
        Its ``services["store"]`` is read when the payload carries no text.

    Returns
    -------
    str or None
        The payload's ``text``, else the stored response's text; None when the payload has neither
        (the caller decides whether that is a failed task or an empty answer).

    Raises
    ------
    PermanentFailure
        A ``request_key`` without text, and no store service or no stored response under that key.
    """
    text = payload.get("text")
    key = payload.get("request_key")
    if text is None and key:
        store = ctx.services.get("store")
        if store is None:
            raise PermanentFailure("response has no text and no store service to read it from")
        resp = await store.aget(key)
        if resp is None:
            raise PermanentFailure(f"no stored response for request key {key}")
        text = resp.text
    return text


def with_stored_finish_reason(row: dict[str, Any], store: Any) -> dict[str, Any]:
    """``row`` with ``finish_reason`` filled from the stored response when the row has no such field.

    Scored rows written before finish reasons were carried to the scorers lack the field; the response
    store keeps every answer's finish reason under its request key (``row["request_key"]``), so reports
    built from such rows still count cut-off answers. A row that has the field (even None) is returned as
    is; without a request key, a store or a stored response the field stays absent.

    Parameters
    ----------
    row : dict
        A scored row (GeoVerify, GeoHint ``extra``-less rows, generic results); modified in place.
    store : ResponseStore or None
        Read with its synchronous ``get(request_key)``.
    """
    key = row.get("request_key")
    if "finish_reason" not in row and key and store is not None and hasattr(store, "get"):
        resp = store.get(key)
        if resp is not None:
            row["finish_reason"] = resp.finish_reason
    return row
