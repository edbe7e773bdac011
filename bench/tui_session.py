"""Bench the `aw tui` inspector on one long agent session: key latency stepping through it.

    PYTHONPATH=. python bench/tui_session.py [--steps 120] [--result-words 550] [--keys 20]

A coding agent resends its whole conversation on every call, so step N of a
long session holds the N steps before it: here a ~20 KB system prompt, then
per step a shell call and a ~4 KB tool result, ~360,000 characters (~90,000
tokens) by step 120. The pool is generated into a temporary directory. The
inspector opens the session, moves to step 100 and measures key-to-screen
latency over the next steps, first as it shows a step (what the step added to
the conversation) and then, as the baseline in the same run, with ``h`` (the
step's whole conversation, as every step was shown before).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

WORDS = ("the", "agent", "reads", "a", "file", "runs", "tests", "then", "edits", "code")
T0 = 1_790_000_000.0


def text(seed: int, n_words: int) -> str:
    return " ".join(WORDS[(seed * 7 + j) % len(WORDS)] for j in range(n_words))


def make_session(path: Path, steps: int, result_words: int) -> int:
    """A pool holding one session of ``steps`` steps; the characters of its last request."""
    from agentworld import records
    from agentworld.pool import Pool

    pool = Pool.create(path)
    w = pool.writer(name="bench")
    msgs = [
        {"role": "system", "content": text(0, 2000)},
        {"role": "user", "content": "Fix the failing test in the repository."},
    ]
    for i in range(steps):
        call = {"id": f"c{i}", "name": "bash", "arguments": f'{{"command": "cat src/m{i}.py"}}'}
        reply = {"role": "assistant", "content": text(i, 40), "tool_calls": [call]}
        w.append(
            records.make_step(
                id=f"st_session_{i}",
                trajectory="tr_session",
                index=i,
                agent="coder",
                policy_version=1,
                timings={"started_at": T0 + i, "ended_at": T0 + i + 1},
                request={"model": "m", "messages": list(msgs)},
                response={"message": reply, "finish_reason": "tool_calls"},
                status="ok",
                tokens={"source": "none"},
            )
        )
        msgs += [
            reply,
            {"role": "tool", "tool_call_id": f"c{i}", "content": text(i + 1, result_words)},
        ]
    w.close()
    pool.index()
    pool.close()
    return sum(len(m["content"]) for m in msgs[:-2])


async def measure(pool: str, start: int, keys: int) -> dict[str, list[float]]:
    from textual.widgets import DataTable
    from tui import _key_to_screen, _wait

    from agentworld.tui.app import make_app
    from agentworld.tui.data import TuiConfig
    from agentworld.tui.inspector import InspectorScreen

    out: dict[str, list[float]] = {}
    app = make_app(TuiConfig(pool, "bench"), start="trajectories")
    async with app.run_test(size=(120, 40)) as pilot:
        await _wait(pilot, lambda: getattr(app.screen, "page", None))
        app.inspect("tr_session")
        await _wait(
            pilot, lambda: isinstance(app.screen, InspectorScreen) and app.screen.trajectory
        )
        screen = app.screen
        table = screen.query_one("#steps", DataTable)
        for mode in ("added", "whole"):
            if mode == "whole":
                await pilot.press("h")
            table.move_cursor(row=start)
            await pilot.pause(1.0)
            samples = []
            for k in range(keys):
                samples.append(await _key_to_screen(app, table, "down" if k < keys // 2 else "up"))
                await asyncio.sleep(0.05)
            out[mode] = samples
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--result-words", type=int, default=550, help="words in each tool result")
    ap.add_argument("--keys", type=int, default=20, help="key presses measured per mode")
    a = ap.parse_args()
    if a.steps < 2 or a.keys < 2:
        ap.error("--steps and --keys must be at least 2")
    work = Path(tempfile.mkdtemp(prefix="aw-bench-tui-session-"))
    try:
        chars = make_session(work / "pool", a.steps, a.result_words)
        start = max(0, a.steps - 1 - a.keys // 2 - 10)
        got = asyncio.run(measure(str(work / "pool"), start, a.keys))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"one session of {a.steps} steps, its last request {chars:,} characters; from step {start}:"
    )
    added, whole = (statistics.median(got[m]) * 1000 for m in ("added", "whole"))
    for mode, label in (("added", "what each step added"), ("whole", "whole conversation (h)")):
        s = got[mode]
        print(
            f"  {label:>24}: key latency p50 {statistics.median(s) * 1000:6.1f} ms, max {max(s) * 1000:6.1f} ms"
        )
    print(f"  p50 ratio (added / whole): {added / whole:.2f}")


if __name__ == "__main__":
    main()
