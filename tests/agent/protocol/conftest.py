"""Reference rendering for the codec tests: the official chat templates run exactly as Hugging Face transformers runs
them (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its ``tojson``,
``raise_exception`` and ``strftime_now``), plus a minimal GGUF metadata reader for the default model's template.

Templates come from the model store (``agent.models.model_path``) when it has them, else from /tmp/ember/models.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TEMPLATE_SHA256 = {
    "qwen2.5": "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
    "llama3.1": "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
    "llama3.2": "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4",
}
FALLBACK_DIR = Path("/tmp/ember/models")
FIXED_NOW = datetime.datetime(2025, 3, 7, 12, 0, 0)


def store_file(name: str, ext: str) -> Path:
    """A store artifact without fetching: the store's verified copy, else the lead's raw copy, else skip."""
    try:
        from agent.models import model_path

        return model_path(name, fetch=False)
    except Exception:  # store absent, or file not pulled yet: fall back to the raw copy
        path = FALLBACK_DIR / f"{name}.{ext}"
        if not path.is_file():
            pytest.skip(f"{name} is neither in the model store nor at {path}")
        return path


def template_source(family: str) -> str:
    source = store_file(f"{family}-template", "jinja").read_text(encoding="utf-8")
    assert hashlib.sha256(source.encode()).hexdigest() == TEMPLATE_SHA256[family], f"{family} template changed"
    return source


def _environment(now: datetime.datetime | None) -> Any:
    jinja2 = pytest.importorskip("jinja2")
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return (now or datetime.datetime.now()).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_SPECIAL_TOKENS = {
    "qwen2.5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "llama3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
}


def reference_render(family: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                     add_generation_prompt: bool = True, *, now: datetime.datetime | None = FIXED_NOW,
                     **template_vars: Any) -> str:
    """What ``tokenizer.apply_chat_template(messages, tools=..., tokenize=False, ...)`` returns for ``family``."""
    template_family = "llama3.1" if family == "llama3.3" else family
    template = _compiled(template_family, now)
    return template.render(messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt,
                           **{**_SPECIAL_TOKENS[template_family], **template_vars})


@functools.lru_cache(maxsize=None)
def _compiled(family: str, now: datetime.datetime | None) -> Any:
    return _environment(now).from_string(template_source(family))


@pytest.fixture(scope="session")
def reference() -> Callable[..., str]:
    return reference_render


# -- GGUF metadata ---------------------------------------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata_string(path: Path, key: str) -> str | None:
    """One string value from a GGUF header (arrays are skipped without decoding)."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        (version,) = struct.unpack("<I", f.read(4))
        assert version >= 2
        _n_tensors, n_kv = struct.unpack("<QQ", f.read(16))

        def string() -> bytes:
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def skip(kind: int) -> None:
            if kind == 8:
                (n,) = struct.unpack("<Q", f.read(8))
                f.seek(n, 1)
            elif kind == 9:
                item, count = struct.unpack("<IQ", f.read(12))
                if item in _SCALARS:
                    f.seek(struct.calcsize(_SCALARS[item]) * count, 1)
                else:
                    for _ in range(count):
                        skip(item)
            else:
                f.seek(struct.calcsize(_SCALARS[kind]), 1)

        for _ in range(n_kv):
            name = string().decode()
            (kind,) = struct.unpack("<I", f.read(4))
            if name == key and kind == 8:
                return string().decode("utf-8")
            skip(kind)
    return None


@pytest.fixture(scope="session")
def gguf_string() -> Callable[[Path, str], str | None]:
    return gguf_metadata_string


@pytest.fixture(scope="session")
def official_template() -> Callable[[str], str]:
    return template_source


@pytest.fixture(scope="session")
def local_store_file() -> Callable[[str, str], Path]:
    """``local_store_file(name, ext)``: a store artifact already on disk (never fetched), else skip."""
    return store_file
