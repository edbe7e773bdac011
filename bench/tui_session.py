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

    PYTHONPATH=. python bench/tui_session.py --message-kb 1000 [--rounds 3] [--checkout PATH]

``--message-kb`` measures instead the inspector on a step that adds one long
tool result (a file dump: lines of 200 characters) of that size, beside the
same keys on a step whose result is 1 KB: moving onto the step, the token
view and back, the whole conversation and back, the label target, a label.
``--checkout`` measures another checkout's inspector (a `git archive` of an
older commit, say) with this script.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # --checkout puts another one first

WORDS = ("the", "agent", "reads", "a", "file", "runs", "tests", "then", "edits", "code")
T0 = 1_790_000_000.0


def text(seed: int, n_words: int) -> str:
    return " ".join(WORDS[(seed * 7 + j) % len(WORDS)] for j in range(n_words))


def step(tid: str, i: int, msgs: list[dict], reply: dict, finish: str, tokens: dict) -> dict:
    """Step ``i`` of trajectory ``tid``: the conversation so far, and its reply."""
    from agentworld import records

    return records.make_step(
        id=f"st_{tid}_{i}",
        trajectory=tid,
        index=i,
        agent="coder",
        policy_version=1,
        timings={"started_at": T0 + i, "ended_at": T0 + i + 1},
        request={"model": "m", "messages": list(msgs)},
        response={"message": reply, "finish_reason": finish},
        status="ok",
        tokens=tokens,
    )


def make_session(path: Path, steps: int, result_words: int) -> int:
    """A pool holding one session of ``steps`` steps; the characters of its last request."""
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
        w.append(step("tr_session", i, msgs, reply, "tool_calls", {"source": "none"}))
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


def make_dump(path: Path, message_kb: int) -> None:
    """Two three-step trajectories: the middle step adds a tool result of ``message_kb`` KB
    (``tr_big``) or 1 KB (``tr_small``), with engine token ids (4 characters a token)."""
    from agentworld.pool import Pool

    pool = Pool.create(path)
    w = pool.writer(name="bench")
    for tid, kb in (("tr_big", message_kb), ("tr_small", 1)):
        dump = (text(kb, 36)[:200] + "\n") * (kb * 1000 // 201 + 1)
        call = {"id": "c0", "name": "bash", "arguments": '{"command": "cat big.txt"}'}
        turns = [
            ({"role": "assistant", "content": "Reading it.", "tool_calls": [call]}, None),
            ({"role": "assistant", "content": text(1, 60)}, "Thanks. Now the tests?"),
            ({"role": "assistant", "content": text(2, 30)}, None),
        ]
        msgs = [
            {"role": "system", "content": text(0, 200)},
            {"role": "user", "content": "Summarise big.txt."},
        ]
        for i, (reply, then) in enumerate(turns):
            chars = sum(len(m["content"]) for m in msgs)
            tokens = {
                "source": "engine",
                "prompt_ids": [j % 50_000 for j in range(chars // 4)],
                "completion_ids": list(range(len(reply["content"]) // 4)),
            }
            w.append(step(tid, i, msgs, reply, "stop", tokens))
            msgs.append(reply)
            if i == 0:
                msgs.append({"role": "tool", "tool_call_id": "c0", "content": dump})
            if then:
                msgs.append({"role": "user", "content": then})
    w.close()
    pool.index()
    pool.close()


# (key, what it does, whether it took effect: a test on the inspector and its old state)
DUMP_KEYS = (
    ("j", "onto the step", lambda s, old: s.step_i == 1),
    ("t", "token view", lambda s, old: s.show_tokens),
    ("t", "back to text", lambda s, old: not s.show_tokens),
    ("h", "whole conversation", lambda s, old: s.full_history),
    ("h", "what it added", lambda s, old: not s.full_history),
    ("full_stop", "label target", lambda s, old: s.target_step),
    ("full_stop", "back", lambda s, old: not s.target_step),
    ("1", "label good", lambda s, old: s.trajectory is not old),
)


async def _took_effect(app, key: str, done) -> float:  # type: ignore[no-untyped-def]
    """Seconds from a key reaching the app to the screen drawn with its effect."""
    from textual import events

    screen = app.screen
    old = screen.trajectory
    t = time.perf_counter()
    event = events.Key(key, {"full_stop": "."}.get(key, key))
    event.set_sender(app)
    app._driver.send_message(event)
    while not done(screen, old):
        await asyncio.sleep(0.001)
    drawn = asyncio.Event()
    app.call_after_refresh(drawn.set)
    await drawn.wait()
    return time.perf_counter() - t


async def measure_dump(pool: str, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per trajectory, per key: its latencies, the two trajectories taken in turn."""
    from tui import _wait

    from agentworld.tui.app import make_app
    from agentworld.tui.data import TuiConfig
    from agentworld.tui.inspector import InspectorScreen

    out: dict[str, dict[str, list[float]]] = {"tr_big": {}, "tr_small": {}}
    app = make_app(TuiConfig(pool, "bench"), start="trajectories", refresh_s=0)
    async with app.run_test(size=(120, 40)) as pilot:
        await _wait(pilot, lambda: getattr(app.screen, "page", None))
        for _ in range(rounds):
            for tid, got in out.items():
                t = time.perf_counter()
                app.inspect(tid)
                await _wait(
                    pilot, lambda: isinstance(app.screen, InspectorScreen) and app.screen.trajectory
                )
                drawn = asyncio.Event()
                app.call_after_refresh(drawn.set)
                await drawn.wait()
                got.setdefault("open", []).append(time.perf_counter() - t)
                await pilot.pause(0.2)
                for key, what, done in DUMP_KEYS:
                    got.setdefault(f"{key} ({what})", []).append(await _took_effect(app, key, done))
                    await pilot.pause(0.05)
                app.pop_screen()
                await pilot.pause(0.2)
    return out


def main_dump(message_kb: int, rounds: int) -> None:
    import agentworld

    work = Path(tempfile.mkdtemp(prefix="aw-bench-tui-dump-"))
    try:
        make_dump(work / "pool", message_kb)
        got = asyncio.run(measure_dump(str(work / "pool"), rounds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    print(f"# inspector of {Path(agentworld.__file__).parents[1]}, medians of {rounds} rounds")
    print(f"a step adding a {message_kb:,} KB tool result vs one adding 1 KB, key latency in ms:")
    big, small = got["tr_big"], got["tr_small"]
    for key in big:
        print(
            f"  {key:>26}: {med(big[key]) * 1000:8.1f} vs {med(small[key]) * 1000:6.1f}"
            f"  ({med(big[key]) / med(small[key]):.2f}x)"
        )
    worst = max(max(v) for k, v in big.items() if k != "open")
    print(f"  slowest key on the {message_kb:,} KB step: {worst * 1000:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--result-words", type=int, default=550, help="words in each tool result")
    ap.add_argument("--keys", type=int, default=20, help="key presses measured per mode")
    ap.add_argument("--message-kb", type=int, default=0, help="measure a step this long instead")
    ap.add_argument("--rounds", type=int, default=3, help="with --message-kb: rounds of keys")
    ap.add_argument("--checkout", type=Path, default=HERE.parent, help="whose inspector")
    a = ap.parse_args()
    if not (a.checkout / "agentworld" / "tui" / "inspector.py").is_file():
        ap.error(f"--checkout: {a.checkout} is not an AgentWorld checkout")
    sys.path.insert(0, str(a.checkout.resolve()))
    if a.message_kb:
        main_dump(a.message_kb, a.rounds)
        return
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
