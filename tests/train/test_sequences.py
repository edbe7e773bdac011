"""Steps -> rows: masks only on sampled tokens, merging and breaks, rendering when no engine ids."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentworld import records
from agentworld.train.sequences import stop_ids_of, trajectory_rows


def rows_of(steps: list[dict[str, Any]], tok: Any, **kw: Any):
    return trajectory_rows(steps, tok, trajectory="t", group="g", stop_ids=stop_ids_of(tok), **kw)


def sampled_ids(row) -> list[int]:
    return [t for t, s in zip(row.ids, row.sampled, strict=True) if s]


def test_engine_steps_merge_into_one_row_with_loss_only_on_completions(builder) -> None:
    _, recs = builder.trajectory(turns=3)
    steps = recs[:-1]
    rows, stats = rows_of(steps, builder.tok)
    assert (len(rows), stats.merged, stats.breaks, stats.rendered) == (1, 2, 0, 0)
    row = rows[0]
    last = steps[-1]["tokens"]
    assert row.ids == last["prompt_ids"] + last["completion_ids"]
    want = [t for s in steps for t in s["tokens"]["completion_ids"]]
    assert sampled_ids(row) == want
    # prompt and tool-result tokens carry no loss and no rollout log-prob
    for s in steps:
        p = s["tokens"]["prompt_ids"]
        n = len(p)
        assert row.sampled[n : n + len(s["tokens"]["completion_ids"])] == [1] * 6
        assert row.logprobs[n : n + 6] == s["tokens"]["completion_logprobs"]
    assert row.sampled[: len(steps[0]["tokens"]["prompt_ids"])] == [0] * 6
    n_tool = len(steps[1]["tokens"]["prompt_ids"]) - len(row.ids[: 6 + 6])
    assert n_tool == 3 and row.sampled[12:15] == [0, 0, 0]
    assert all(math.isnan(x) for x, s in zip(row.logprobs, row.sampled, strict=True) if not s)
    assert row.steps == 3


def test_a_prompt_that_does_not_continue_breaks_the_row(builder) -> None:
    _, recs = builder.trajectory(turns=3, break_at=1)
    rows, stats = rows_of(recs[:-1], builder.tok)
    assert (len(rows), stats.merged, stats.breaks) == (2, 1, 1)
    assert [r.steps for r in rows] == [1, 2]


def test_merge_off_gives_one_row_per_step(builder) -> None:
    _, recs = builder.trajectory(turns=3)
    rows, stats = rows_of(recs[:-1], builder.tok, merge=False)
    assert len(rows) == 3 and stats.merged == 0 and stats.breaks == 0
    assert sum(len(r) for r in rows) > len(rows_of(recs[:-1], builder.tok)[0][0])


def test_untrainable_step_stays_as_context_without_loss(builder) -> None:
    _, recs = builder.trajectory(turns=3)
    steps = recs[:-1]
    steps[1]["_labels"] = {"trainable": False}
    rows, stats = rows_of(steps, builder.tok)
    assert len(rows) == 1 and stats.untrainable == 1
    want = steps[0]["tokens"]["completion_ids"] + steps[2]["tokens"]["completion_ids"]
    assert sampled_ids(rows[0]) == want


def test_error_steps_are_skipped_and_too_long_steps_dropped(builder) -> None:
    _, recs = builder.trajectory(turns=2)
    err = records.make_step(
        trajectory=recs[0]["trajectory"],
        index=1,
        agent="a",
        request={"messages": [{"role": "user", "content": "x"}]},
        response=None,
        status="error",
        error={"type": "upstream", "message": "boom"},
    )
    rows, stats = rows_of([recs[0], err, recs[1]], builder.tok)
    assert stats.skipped == 1 and stats.merged == 1 and len(rows) == 1
    rows, stats = rows_of(recs[:-1], builder.tok, max_seq_len=13)
    assert stats.too_long == 1 and len(rows) == 1 and stats.breaks == 1


def chat_step(i: int, messages: list[dict[str, Any]], reply: dict[str, Any], **resp: Any):
    return records.make_step(
        trajectory="tr_x",
        index=i,
        agent="a",
        request={"messages": messages},
        response={"message": {"role": "assistant", **reply}, **resp},
    )


def test_rendered_steps_mask_only_the_reply_and_its_end_of_turn(tiny) -> None:
    _, tok = tiny
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "add 1 and 2"}]
    s0 = chat_step(0, msgs, {"content": "the sum is 3"})
    rows, stats = rows_of([s0], tok)
    assert stats.rendered == 1 and stats.render_mismatch == 0
    assert tok.decode(sampled_ids(rows[0])) == "the sum is 3<|im_end|>"
    prompt_text = tok.decode(
        [t for t, s in zip(rows[0].ids, rows[0].sampled, strict=True) if not s]
    )
    assert prompt_text.endswith("<|im_start|>assistant\n")
    assert "the sum" not in prompt_text

    # The next turn re-renders the whole conversation: ChatML keeps the prefix, so it merges;
    # the "\n" after <|im_end|> and the tool result are template/prompt, not sampled.
    call = {"id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'}
    msgs1 = [
        *msgs,
        {"role": "assistant", "content": "the sum is 3"},
        {"role": "user", "content": "check with the tool"},
    ]
    s1 = chat_step(1, msgs1, {"content": None, "tool_calls": [call]})
    msgs2 = [
        *msgs1,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    s2 = chat_step(2, msgs2, {"content": "it is 3"}, finish_reason="length")
    rows, stats = rows_of([s0, s1, s2], tok)
    assert (len(rows), stats.merged, stats.breaks, stats.rendered) == (1, 2, 0, 3)
    text = tok.decode(sampled_ids(rows[0]))
    assert text == (
        'the sum is 3<|im_end|><tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n'
        "</tool_call><|im_end|>it is 3"
    )  # a reply cut by max_tokens ends without the end-of-turn the template would add
    unsampled = tok.decode([t for t, s in zip(rows[0].ids, rows[0].sampled, strict=True) if not s])
    assert "<tool_response>\n3\n</tool_response>" in unsampled
    assert "check with the tool" in unsampled


def test_completions_prompt_is_tokenized_directly(tiny) -> None:
    _, tok = tiny
    step = records.make_step(
        trajectory="tr_x",
        index=0,
        agent="a",
        protocol="openai.completions",
        request={"prompt": "what is the sum"},
        response={"text": " 3", "finish_reason": "stop"},
    )
    rows, _ = rows_of([step], tok)
    assert tok.decode(sampled_ids(rows[0])) == " 3<|im_end|>"
    assert tok.decode(rows[0].ids) == "what is the sum 3<|im_end|>"


@pytest.mark.parametrize("source", ["engine", "rendered"])
def test_rows_without_any_sampled_token_are_dropped(builder, source) -> None:
    if source == "engine":
        step = builder.trajectory(turns=1)[1][0]
    else:
        step = chat_step(0, [{"role": "user", "content": "hi"}], {"content": "hello"})
    assert len(rows_of([step], builder.tok)[0]) == 1
    step["_labels"] = {"trainable": False}
    assert rows_of([step], builder.tok)[0] == []
