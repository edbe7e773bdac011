"""The request fuzzer (bench/chaos_fuzz.py), short: malformed and hostile requests on every
route never get a 5xx of the proxy's own, an error body out of its protocol's shape, a 200
whose step is not in the pool, or a traceback in the log; the proxy goes on serving."""

from __future__ import annotations

import pytest

from bench.chaos_fuzz import FAILURES, run


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
async def test_fuzzing_every_route_breaks_nothing(seed):
    out = await run(seconds=5.0, seed=seed, big_mb=2.0)
    assert out["requests"] > 40 and out["answered_200_recorded"] > 5, out
    assert {k: out[k] for k in FAILURES} == dict.fromkeys(FAILURES, 0), out["examples"]
    assert out["stall"]["big_status"] == 200
