"""Sampling seeds derived from a run's seed: one per episode, one per call of an episode.

`aw run --seed S` gives each episode ``derive(S, task, rollout)``; the proxy gives
each call of that episode's trajectory ``derive(episode seed, step index)`` as its
``seed`` (OpenAI's and vLLM's per-request field). Rollouts are then the same run to
run, whatever the batch they were sampled in (`aw serve` draws a seeded request's
tokens from its own generator), and the calls of a run draw from different random
streams (31-bit seeds: among 100,000 calls a pair or so may share one).
"""

from __future__ import annotations

import hashlib

# Seeds stay below 2**31: every engine takes them (vLLM's and OpenAI's ``seed`` is an int).
SEED_BITS = 31


def derive(*parts: object) -> int:
    """A seed in [0, 2**31) that depends on every part, stable across runs and machines."""
    text = "\x1f".join(str(p) for p in parts).encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def check_seed(value: object, where: str) -> int:
    """``value`` as a seed (an int in [0, 2**63)), or ValueError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"{where} must be an integer in [0, 2**63), got {value!r}")
    return value
