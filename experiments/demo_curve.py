"""Draw `aw demo`'s training-reward curve and print its markdown tables, from results.json files.

Each `aw demo` run writes `<dir>/results.json` (settings, held-out before/after,
one row per GRPO iteration, CPU and wall time). This turns one or more of them
(one per seed) into the per-iteration curve in docs/ and the tables of
docs/experiment.md:

    python experiments/demo_curve.py /tmp/demo-s7/results.json /tmp/demo-s8/results.json \\
        --png docs/demo-curve.png
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any


def _se(k: int, n: int) -> float:
    p = k / n
    return math.sqrt(p * (1 - p) / n)


def before_after_table(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """One row per run: held-out before/after with standard errors, the lift, CPU time."""
    lines = [
        "| run | seed | held-out n | before | after | lift ± SE (z) | CPU s | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs:
        b, a = r["before"], r["after"]
        pb, pa = b["successes"] / b["n"], a["successes"] / a["n"]
        se = math.hypot(_se(b["successes"], b["n"]), _se(a["successes"], a["n"]))
        z = (pa - pb) / se if se else math.inf
        lines.append(
            f"| {name} | {r['settings']['seed']} | {b['n']} "
            f"| {b['successes']}/{b['n']} = {pb:.3f} ± {_se(b['successes'], b['n']):.3f} "
            f"| {a['successes']}/{a['n']} = {pa:.3f} ± {_se(a['successes'], a['n']):.3f} "
            f"| {pa - pb:+.3f} ± {se:.3f} ({z:.1f}) | {r['cpu_s']:.0f} | {r['wall_s']:.0f} |"
        )
    return "\n".join(lines)


def curve_table(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """Training reward (rollouts at the sampling temperature) by iteration, one column per run."""
    names = [n for n, _ in runs]
    lines = ["| iteration | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    longest = max(len(r["iterations"]) for _, r in runs)
    for i in range(longest):
        cells = []
        for _, r in runs:
            rows = r["iterations"]
            cells.append(
                f"{rows[i]['successes']}/{rows[i]['rollouts']} (v{rows[i]['policy_version']})"
                if i < len(rows)
                else "-"
            )
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def misses_table(runs: list[tuple[str, Path, dict[str, Any]]]) -> str:
    """Held-out episodes by outcome: right, wrong number, or cut off at max_tokens (from the pool).

    A reply that hits the token limit is usually one that had not reached its number
    yet; GRPO on a binary reward learns to answer sooner as well as to add right.
    """
    from agentworld.pool import Pool, Selection

    lines = [
        "| run | policy | right | wrong, cut at max_tokens | wrong, finished | mean completion tokens |",
        "|---|---|---|---|---|---|",
    ]
    for name, folder, r in runs:
        cap = r["settings"]["max_tokens"]
        pool = Pool.open(folder / "pool")
        rows = pool.index().trajectories(Selection(agent="solver-greedy"), limit=None)
        pool.close()
        for label, v in (
            ("before", r["before"]["policy_version"]),
            ("after", r["after"]["policy_version"]),
        ):
            ev = [t for t in rows if t["policy_min"] == v]
            right = sum(1 for t in ev if (t["reward"] or 0) >= 1)
            cut = sum(1 for t in ev if (t["reward"] or 0) < 1 and t["completion_tokens"] >= cap)
            toks = sum(t["completion_tokens"] for t in ev) / max(1, len(ev))
            lines.append(
                f"| {name} | {label} (v{v}) | {right}/{len(ev)} | {cut} | {len(ev) - right - cut} | {toks:.1f} |"
            )
    return "\n".join(lines)


def draw(runs: list[tuple[str, dict[str, Any]]], png: Path) -> None:
    """Training reward per iteration, with each run's held-out before/after as markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for name, r in runs:
        rows = r["iterations"]
        xs = [row["iteration"] for row in rows]
        (line,) = ax.plot(
            xs, [row["reward_mean"] for row in rows], marker="o", label=f"{name}: training reward"
        )
        b, a = r["before"], r["after"]
        ax.errorbar(
            [0, len(rows) + 1],
            [b["successes"] / b["n"], a["successes"] / a["n"]],
            yerr=[_se(b["successes"], b["n"]), _se(a["successes"], a["n"])],
            fmt="s",
            color=line.get_color(),
            alpha=0.6,
            capsize=4,
            label=f"{name}: held-out before / after (± SE)",
        )
    ax.set_xlabel("GRPO iteration (0: before, last+1: after)")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title("aw demo: SmolLM2-135M-Instruct, 1-digit + and -, on-policy GRPO")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="results.json files of aw demo runs")
    p.add_argument("--png", type=Path, default=None, help="write the curve here")
    args = p.parse_args(argv)
    loaded = [json.loads(path.read_text()) for path in args.results]
    runs = [(f"seed {r['settings']['seed']}", r) for r in loaded]
    print(before_after_table(runs))
    print()
    print(curve_table(runs))
    print()
    print(
        misses_table([(n, path.parent, r) for (n, r), path in zip(runs, args.results, strict=True)])
    )
    if args.png:
        draw(runs, args.png)
        print(f"\ncurve: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
