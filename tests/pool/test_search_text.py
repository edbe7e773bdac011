"""Free-text search means one thing with and without the index (pool/search_text.py)."""

from __future__ import annotations

from agentworld import records
from agentworld.pool import Pool, Selection


def msg(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def two_steps(tid: str, system: str, tool_result: str) -> list[dict]:
    """A tool-using trajectory: the system prompt on step 0, a tool result on step 1."""
    first = [msg("system", system), msg("user", "list the files")]
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "name": "ls", "arguments": "{}"}],
    }
    out = []
    for i, msgs in enumerate(
        (first, [*first, call, {"role": "tool", "tool_call_id": "c1", "content": tool_result}])
    ):
        out.append(
            records.make_step(
                trajectory=tid,
                index=i,
                agent="coder",
                request={"model": "tiny", "messages": msgs},
                response={"message": call if i == 0 else msg("assistant", "done")},
            )
        )
    return out


def test_indexed_and_unindexed_search_agree(pool: Pool) -> None:
    w = pool.writer(name="t")
    for rec in (
        two_steps("tr_sys", "You have a CALCULATOR tool.", "a.txt b.txt")
        + two_steps("tr_tool", "You list files.", "calculator.py 100%_done.txt")
        + two_steps("tr_none", "You list files.", "nothing here")
    ):
        w.append(rec)
    w.close()
    cases = {
        "calculator": {"tr_sys", "tr_tool"},  # a system prompt (either case), a tool result
        "calculator tool": {"tr_sys"},
        "calculator.py": {"tr_tool"},
        "100%_done": {"tr_tool"},  # LIKE's wildcards are literal characters here
        "0%_d": {"tr_tool"},
        "1%done": set(),  # ... so `%` is no wildcard
        "list the files": {"tr_sys", "tr_tool", "tr_none"},
        "zebra": set(),
    }
    index = pool.index()
    for words, wanted in cases.items():
        sel = Selection(text=words)
        indexed = set(index.trajectory_ids(sel))
        unindexed = {t.id for t in pool.iter_trajectories(sel)}
        assert indexed == wanted, words
        assert unindexed == wanted, words
