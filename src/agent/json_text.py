"""JSON text of plain trees, without `json.JSONEncoder.encode` rebuilding its C encoder on every call.

Shared by the trace recorder (one line per event) and the argument hasher (`canonical_json` of every validated
call): both encode small acyclic dicts many times per run with one fixed encoder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["plain_encoder"]


def plain_encoder(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` for acyclic values, calling the C encoder built once from ``encoder``'s own options.

    Without circular-reference markers, so a cycle ends in ``RecursionError`` instead of ``ValueError`` (callers
    encode trees they built, or report either). Where the C encoder is unavailable, or ``encoder`` indents, this is
    ``encoder.encode`` itself.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or encoder.indent is not None:
        return encoder.encode
    string = json.encoder.encode_basestring_ascii if encoder.ensure_ascii else json.encoder.encode_basestring
    chunks = make(None, encoder.default, string, None, encoder.key_separator, encoder.item_separator,
                  encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
    return lambda value: "".join(chunks(value, 0))
