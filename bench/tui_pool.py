"""Generated pools for bench/tui.py: big, small records, cached in a temp dir between runs."""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from agentworld import records
from agentworld.pool import Pool

AGENTS = ("coder", "searcher", "solver")
DATASETS = ("gsm8k", "swe-mini", "countdown")
STEPS_PER_TRAJECTORY = 4
GROUP_SIZE = 8


def bench_pool_path(n_steps: int) -> Path:
    """Where the cached pool of ``n_steps`` steps lives (reused across runs)."""
    return Path(tempfile.gettempdir()) / f"aw-bench-tui-{n_steps}"


def fake_step(tid: str, i: int, agent: str, dataset: str, group: str, t: float) -> dict:
    """A small but realistic step: two messages, a short answer, engine token ids."""
    prompt = [random.randrange(50_000) for _ in range(12 + 6 * i)]
    completion = [random.randrange(50_000) for _ in range(6)]
    return records.make_step(
        trajectory=tid,
        index=i,
        agent=agent,
        dataset=dataset,
        group=group,
        task=group,
        policy_version=int(t // 3600) % 5,
        timings={"started_at": t, "ended_at": t + 0.2},
        request={"messages": [{"role": "user", "content": f"task {group} turn {i}"}]},
        response={
            "message": {"role": "assistant", "content": f"answer {random.randrange(100)}"},
            "finish_reason": "stop",
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
        },
        tokens={
            "source": "engine",
            "prompt_ids": prompt,
            "completion_ids": completion,
            "completion_logprobs": [-random.random() for _ in completion],
        },
    )


def write_trajectories(pool: Pool, n_steps: int, *, rate_per_s: float | None = None) -> None:
    """Append ``n_steps`` steps (with end records) to the pool; throttled to ``rate_per_s``."""
    w = pool.writer(commit_records=4096, name="bench")
    start = time.time()
    written = 0
    g = 0
    try:
        while written < n_steps:
            agent, dataset = AGENTS[g % 3], DATASETS[(g // 3) % 3]
            group = f"g{g:07d}-{random.randrange(1 << 30):x}"
            for _ in range(GROUP_SIZE):
                tid = records.new_id("tr")
                t0 = time.time() if rate_per_s else start - (n_steps - written) * 0.01
                batch = [
                    fake_step(tid, i, agent, dataset, group, t0 + i * 0.01)
                    for i in range(STEPS_PER_TRAJECTORY)
                ]
                batch.append(
                    records.make_end(
                        trajectory=tid,
                        agent=agent,
                        dataset=dataset,
                        group=group,
                        status="done" if random.random() > 0.1 else "failed",
                        steps=STEPS_PER_TRAJECTORY,
                        reward=float(random.random() > 0.5),
                        ended_at=t0 + 0.05,
                    )
                )
                w.append_many(batch)
                written += STEPS_PER_TRAJECTORY
                if rate_per_s:
                    ahead_s = written / rate_per_s - (time.time() - start)
                    if ahead_s > 0:
                        time.sleep(ahead_s)
                if written >= n_steps:
                    break
            g += 1
    finally:
        w.close()


def ensure_pool(n_steps: int) -> tuple[Path, float, float]:
    """The cached pool, generating and indexing it if needed: (path, gen_s, index_s)."""
    path = bench_pool_path(n_steps)
    done = path / ".bench-complete"
    gen_s = index_s = 0.0
    if not done.exists():
        random.seed(1)
        t0 = time.perf_counter()
        pool = Pool.create(path)
        write_trajectories(pool, n_steps)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.index()
        index_s = time.perf_counter() - t0
        pool.close()
        done.write_text(f"{gen_s:.1f} {index_s:.1f}\n")
    else:
        gen_s, index_s = (float(x) for x in done.read_text().split())
    return path, gen_s, index_s


if __name__ == "__main__":
    if sys.argv[1:2] == ["live"]:  # live PATH STEPS RATE: a writer at RATE steps/s
        write_trajectories(Pool.open(sys.argv[2]), int(sys.argv[3]), rate_per_s=float(sys.argv[4]))
        sys.exit(0)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    p, g, i = ensure_pool(n)
    print(f"pool {p}: generated in {g:.1f} s, indexed in {i:.1f} s")
