"""Sampling: pick one token id from (already masked) logits — greedy, or temperature + top-p with a seeded RNG.

Owns the choice of a token only. Masking happens before (the matcher writes -inf), so a masked token has
probability exactly zero here and can never be drawn. Refuses NaN logits and an all -inf vector (nothing
allowed) with a ``MaskError`` instead of returning an arbitrary id.

    logits (masked) ──► temperature == 0 ? argmax
                                         : softmax(logits / T) ──► top-p nucleus ──► draw with Generator(seed)

Determinism: for the same seed and the same sequence of logits, the same ids come out (numpy ``Generator``,
PCG64). ``seed=None`` draws fresh OS entropy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import MaskError

__all__ = ["SamplingParams", "Sampler"]


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to turn logits into a token."""

    temperature: float = 0.0
    """0 = greedy (argmax, deterministic without a seed); > 0 = sample from softmax(logits / temperature)."""
    top_p: float = 1.0
    """Nucleus: keep the smallest set of most likely tokens whose probability reaches top_p (1.0 = all)."""
    seed: int | None = None
    """Seed of the random generator; None = nondeterministic. Ignored when greedy."""

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def is_greedy(self) -> bool:
        """Whether sampling reduces to argmax."""
        return self.temperature == 0.0


class Sampler:
    """Stateful token picker for one generation (owns the random generator)."""

    def __init__(self, params: SamplingParams = SamplingParams()) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)

    def sample(self, logits: np.ndarray) -> int:
        """Return the chosen token id; never one whose logit is -inf.

        Raises:
            MaskError: every logit is -inf (nothing allowed) or some logit is NaN.
        """
        best = int(np.argmax(logits))  # numpy's argmax returns the first NaN if there is one,
        top = logits[best]              # so checking the chosen value covers the whole vector
        if np.isnan(top):
            raise MaskError("logits contain NaN; refusing to sample")
        if top == -np.inf:
            raise MaskError("every token is masked out (all logits are -inf); nothing can be sampled")
        if self.params.is_greedy:
            return best
        return self._draw(logits, float(top))

    def _draw(self, logits: np.ndarray, top: float) -> int:
        candidates = np.flatnonzero(logits > -np.inf)
        scaled = (logits[candidates].astype(np.float64) - top) / self.params.temperature
        probs = np.exp(scaled)
        if self.params.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cumulative = np.cumsum(probs[order])
            keep = int(np.searchsorted(cumulative, self.params.top_p * cumulative[-1])) + 1
            chosen = order[:keep]
            candidates, probs = candidates[chosen], probs[chosen]
        cumulative = np.cumsum(probs)
        index = int(np.searchsorted(cumulative, self._rng.random() * cumulative[-1], side="right"))
        return int(candidates[min(index, len(candidates) - 1)])
