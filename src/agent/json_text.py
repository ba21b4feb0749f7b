"""JSON text of plain trees through `json.JSONEncoder`'s public API only.

Kept for the trace recorder's import until it encodes with its encoder directly: `plain_encoder` is
``encoder.encode`` (it once called the private C encoder, ``json.encoder.c_make_encoder``, to save about a
microsecond per call; the bytes were and are the same, see tests/agent/test_json_text.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["plain_encoder"]


def plain_encoder(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode``: JSON text of ``value`` with ``encoder``'s own options."""
    return encoder.encode
