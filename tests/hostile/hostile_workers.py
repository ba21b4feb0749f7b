"""Functions the guarded worker process runs (see ``hostile_kit.Guarded``): one payload in, a plain summary out.

A documented error comes back as ``{"outcome": "error", "type": ...}``; anything else raised escapes to the
worker loop and is reported as a crash by the test.
"""

from __future__ import annotations

import json
import random
from typing import Any

_VOCAB = None


def _byte_vocabulary() -> Any:
    """256 single-byte tokens + an EOS: every DFA over bytes is spellable, and indexing is cheap."""
    global _VOCAB
    if _VOCAB is None:
        from constrained.vocabulary import Vocabulary

        _VOCAB = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"</s>"], eos_token_ids=[256],
                                        special_ids_by_name={"</s>": 256}, normal_ids=range(256), name="bytes")
    return _VOCAB


def _walk(dfa: Any, rng: random.Random, hop: Any) -> bytes:
    """A random accepted byte string: random moves for a while, then the canonical shortest completion."""
    import numpy as np

    state, out = int(dfa.initial), bytearray()
    for _ in range(rng.randrange(0, 200)):
        if dfa.accepting[state] and rng.random() < 0.15:
            return bytes(out)
        row = dfa.transitions[state, :256]
        live = np.flatnonzero(row >= 0)
        if live.size == 0:
            break
        symbol = int(live[rng.randrange(live.size)])
        out.append(symbol)
        state = int(row[symbol])
    while not dfa.accepting[state]:
        symbol = int(hop[state])
        out.append(symbol)
        state = int(dfa.transitions[state, symbol])
    return bytes(out)


def compile_schema(payload: tuple[Any, str, int]) -> dict[str, Any]:
    """Compile a schema to its pattern and byte DFA (the grammar the index is built on); check a few accepted documents against the schema."""
    schema, whitespace, seed = payload
    from constrained import fsm
    from constrained.errors import ConstrainedError
    from constrained.schema import schema_to_pattern

    try:
        pattern = schema_to_pattern(schema, whitespace=whitespace)  # type: ignore[arg-type]
        dfa = fsm.compile_dfa(pattern)
    except ConstrainedError as exc:
        return {"outcome": "error", "type": type(exc).__name__, "message": str(exc)[:200]}
    hop = fsm.next_hop(dfa)
    rng = random.Random(seed)
    docs = [_walk(dfa, rng, hop) for _ in range(4)]
    unsound = []
    validator = _validator(schema)
    for doc in docs:
        try:
            value = json.loads(doc.decode("utf-8"))
        except ValueError as exc:
            unsound.append((doc[:200], f"not JSON: {exc}"))
            continue
        if validator is not None:
            errors = [e.message for e in validator.iter_errors(value)]
            if errors:
                unsound.append((doc[:200], errors[0][:200]))
    return {"outcome": "grammar", "states": dfa.n_states, "docs": [d[:100] for d in docs], "unsound": unsound}


def _validator(schema: Any) -> Any:
    """A Draft 2020-12 validator for the schema, or None when jsonschema cannot judge it (then only JSON-ness is
    checked). OpenAPI ``nullable`` is honoured by the compiler and unknown to jsonschema: skip those."""
    import jsonschema

    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None
    if not isinstance(schema, (dict, bool)) or "nullable" in json.dumps(schema, default=str):
        return None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(schema)
        validator.is_valid(None)  # resolves refs lazily: a schema jsonschema itself cannot evaluate is skipped
        return validator
    except Exception:
        return None


def parse_turn(payload: tuple[str, str]) -> str:
    """Parse one model output with a codec (by family) and return the action's type name."""
    from agent.protocol import codec_for

    family, text = payload
    action = codec_for(family).parse(text)
    return type(action).__name__
