"""The TUI's pure parts: filter parsing, GRPO advantages, prefixes, token view, literal text, undo."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from agentworld.errors import ConfigError
from agentworld.literal import literal, one_line
from agentworld.pool import Pool
from agentworld.tui.curation import Curator
from agentworld.tui.filters import parse_filter
from agentworld.tui.grouping import common_prefix_len, grpo_advantages, shared_prefix
from agentworld.tui.tokens import BREAK_CONTEXT, prefix_break, shown_windows, token_view
from agentworld.tui.transcript import (
    Clip,
    clipped,
    message_text,
    metadata_rows,
    new_from,
    step_metadata,
    step_transcript,
)

from .conftest import MARKUP


def test_filter_line_parses_every_field() -> None:
    sel = parse_filter(
        "agent:coder dataset:gsm8k group:g1 status:done,failed reward:0.5..1 policy:2..3 "
        "label:good,none tag:hard since:1h until:2026-01-31 find this",
        now=10_000.0,
    )
    assert (sel.agent, sel.dataset, sel.group, sel.tag) == ("coder", "gsm8k", "g1", "hard")
    assert sel.status == ("done", "failed")
    assert (sel.min_reward, sel.max_reward) == (0.5, 1.0)
    assert (sel.min_policy, sel.max_policy) == (2, 3)
    assert sel.quality == ("good",) and sel.labelled is False
    assert sel.since == 10_000.0 - 3600
    assert sel.until is not None and sel.text == "find this"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("status:bogus", "status"),
        ("reward:x..1", "reward"),
        ("since:yesterday", "since"),
        ("label:shiny", "label"),
        ('"unclosed', "filter"),
    ],
)
def test_bad_filter_terms_name_the_term(text: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        parse_filter(text)


def test_grpo_advantages_by_hand() -> None:
    # rewards 1, 0, 0.5: mean 0.5, sample std sqrt((0.25 + 0.25 + 0) / 2) = 0.5
    assert grpo_advantages([1.0, 0.0, 0.5]) == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)
    # rewards 1, 0: mean 0.5, sample std sqrt(0.5) = 0.7071 (the population std, 0.5,
    # made the group view show +-1.00 where training used +-0.71)
    assert grpo_advantages([1.0, 0.0]) == pytest.approx([0.7071, -0.7071], abs=1e-4)
    assert grpo_advantages([1.0, 1.0]) == [0.0, 0.0]
    assert grpo_advantages([None, 2.0, 0.0]) == pytest.approx([None, 0.7071, -0.7071], abs=1e-4)
    assert grpo_advantages([None, 3.0]) == [None, 0.0]  # one reward: no baseline


def test_group_view_advantages_are_the_trainers() -> None:
    from agentworld.train.advantages import group_advantages

    for rewards in ([1.0, 0.0], [1.0, 0.0, 0.5], [0.2, 0.9, 0.9, 0.1], [3.0], [1.0, 1.0]):
        trained = group_advantages(rewards, ["g"] * len(rewards))
        assert grpo_advantages(rewards) == trained
    # members without a reward are left out of the group, as the trainer never sees them
    assert grpo_advantages([1.0, None, 0.0]) == [
        group_advantages([1.0, 0.0], ["g", "g"])[0],
        None,
        group_advantages([1.0, 0.0], ["g", "g"])[1],
    ]


def test_shared_prefix() -> None:
    assert common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    n, fractions = shared_prefix([[1, 2, 3, 4], [1, 2]])
    assert n == 2 and fractions == [0.5, 1.0]


def _tok(prompt: list[int], completion: list[int]) -> dict:
    return {
        "tokens": {
            "source": "engine",
            "prompt_ids": prompt,
            "completion_ids": completion,
            "completion_logprobs": [-0.1] * len(completion),
        }
    }


def test_prefix_break_found_where_the_prompt_diverges() -> None:
    prev = _tok([1, 2, 3], [4, 5])
    assert prefix_break(prev, _tok([1, 2, 3, 4, 5, 6], [7])) is None
    assert prefix_break(prev, _tok([1, 2, 9, 4, 5, 6], [7])) == 2
    assert prefix_break(prev, _tok([1, 2], [7])) == 2  # shorter than what came before
    assert prefix_break(None, _tok([1], [2])) is None
    shown = token_view(_tok([1, 2, 9, 4, 5, 6], [7]), prev).plain
    assert "BREAK at prompt token 2" in shown and "⟂BREAK⟂ 9" in shown


def _asked(*messages: dict) -> dict:
    return {"request": {"messages": list(messages)}}


def test_a_step_shows_what_it_added_to_the_previous_steps_conversation() -> None:
    system, user = {"role": "system", "content": "s"}, {"role": "user", "content": "fix it"}
    said = {
        "role": "assistant",
        "content": None,
        "reasoning": "look first",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": '{"cmd": "ls"}'}],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "a.py"}
    first = _asked(system, user)
    assert new_from(_asked(system, user, said, result), first) == 2
    # Sent back without its reasoning, its arguments re-serialised: still the same turn.
    resent = {
        **said,
        "reasoning": None,
        "tool_calls": [{**said["tool_calls"][0], "arguments": '{"cmd":"ls"}'}],
    }
    assert new_from(_asked(system, user, resent, result), _asked(system, user, said)) == 3
    assert new_from(_asked(system, {"role": "user", "content": "other"}, said), first) == 0
    other_call = {**said, "tool_calls": [{**said["tool_calls"][0], "name": "edit"}]}
    assert new_from(_asked(system, user, other_call, result), _asked(system, user, said)) == 0
    assert new_from(_asked(system, user), first) == 0  # nothing new: a retry shows it all
    assert new_from(_asked(system, user, said), None) == 0
    shown = step_transcript(
        {
            **_asked(system, user, said, result),
            "response": {"message": {"role": "assistant", "content": "done"}},
        },
        only_new_from=2,
        earlier_note=" (h)",
    ).plain
    assert shown.startswith("… 2 earlier messages (h)\n")
    assert (
        "fix it" not in shown
        and "→ tool call bash" in shown
        and "a.py" in shown
        and "done" in shown
    )


def test_token_view_decodes_with_a_tokenizer_and_marks_source() -> None:
    step = _tok([1, 2], [3])
    step["tokens"]["source"] = "rendered"
    text = token_view(step, decode=lambda i: f"<w{i}>").plain
    assert "<w1> <w2>" in text and "<w3>" in text and "source: rendered" in text


def test_literal_keeps_markup_and_neutralises_escapes() -> None:
    t = literal(MARKUP)
    assert "[bold]not bold[/bold]" in t.plain and "[link=http://x]" in t.plain
    assert "\x1b" not in t.plain and "\\x1b[31m" in t.plain
    assert not t.spans  # nothing was interpreted as style
    # bidirectional and zero-width controls are shown, not obeyed; ZWJ (emoji) stays
    t = literal("a\u202eb\u2066c\u2069\u200bd \U0001f468\u200d\U0001f469")
    assert t.plain == "a\\u202eb\\u2066c\\u2069\\u200bd \U0001f468\u200d\U0001f469"
    assert "\n" not in one_line("a\nb").plain
    msg = message_text(
        {
            "role": "assistant",
            "content": MARKUP,
            "tool_calls": [{"id": "1", "name": "[b]x", "arguments": "[i]{}"}],
        }
    )
    assert "[b]x" in msg.plain and "[i]{}" in msg.plain and "[bold]not bold" in msg.plain


def test_step_metadata_shows_what_the_proxy_left_out_and_why() -> None:
    """A step whose engine ids the proxy could not keep says so where it is inspected."""
    from tests.synth import conversation_step

    step = conversation_step("tr_1", 0)
    step["tokens"] = {"source": "none"}
    step["metadata"] = {
        "threading": "auto",
        "upstream_failed": ["http://a"],
        "upstream_invalid": {"tokens.completion_ids[0]": "token ids are integers"},
    }
    rows = dict(metadata_rows(step))
    assert rows["left out"].plain == "tokens.completion_ids[0]: token ids are integers"
    assert rows["left out"].style == "red"
    assert rows["metadata"].plain == 'threading=auto upstream_failed=["http://a"]'
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(step_metadata(step))
    assert "    left out tokens.completion_ids[0]: token ids are integers" in console.export_text()
    assert "left out" not in dict(metadata_rows(conversation_step("tr_1", 0)))


def test_nested_usage_is_shown_as_dotted_keys_not_a_python_dict() -> None:
    from agentworld.tui.transcript import usage_text

    usage = {
        "prompt_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": None},
        "completion_tokens_details": {},
    }
    assert usage_text(usage) == "prompt_tokens=7 prompt_tokens_details.cached_tokens=0"


def test_curator_undo_restores_previous_values(tmp_path: Path) -> None:
    pool = Pool.create(tmp_path / "pool")
    labels = pool.labels

    def current(targets):  # own values straight from the overlay
        eff = labels.effective()
        return {t: {f: e.value for f, e in eff.get(t, {}).items()} for t in targets}

    cur = Curator(labels, current, "alice")
    cur.label(["trajectory:a"], {"quality": "good"})
    cur.label(["trajectory:a", "trajectory:b"], {"quality": "bad", "trainable": False})
    assert current(["trajectory:a", "trajectory:b"]) == {
        "trajectory:a": {"quality": "bad", "trainable": False},
        "trajectory:b": {"quality": "bad", "trainable": False},
    }
    cur.undo()
    assert current(["trajectory:a", "trajectory:b"]) == {
        "trajectory:a": {"quality": "good"},
        "trajectory:b": {},
    }
    cur.undo()
    assert current(["trajectory:a"]) == {"trajectory:a": {}}
    assert cur.undo() is None
    assert {e.author for e in labels.entries()} == {"alice"}


def test_a_long_text_shows_its_head_and_tail_and_counts_the_rest() -> None:
    clip = Clip(note=" · v: all")
    dump = "".join(f"line {i:05d} " + "x" * 190 + "\n" for i in range(5000))  # ~1 MB
    start, end = clip.cut(dump)
    assert 0 < start <= clip.head_chars and len(dump) - end <= clip.tail_chars
    line = f"… {dump.count(chr(10), start, end):,} lines ({end - start:,} characters) not shown"
    shown = clipped(dump, clip).plain  # the ends as they are, a line between
    assert shown == f"{dump[:start]}\n{line} · v: all\n{dump[end:]}"
    head, tail = dump[:start], dump[end:]
    assert "line 00000" in head and "line 04999" in tail and "line 02500" not in shown
    one_line = "y" * 300_000  # a minified file: cut inside the line, counted in characters
    shown = clipped(one_line, clip).plain
    assert f"… {300_000 - clip.head_chars - clip.tail_chars:,} characters not shown" in shown
    short = "z\n" * (clip.max_lines - 1)
    assert clipped(short, clip).plain == short and clipped(short, None).plain == short
    assert clipped(dump, None).plain == dump
    step = {"request": {"messages": [{"role": "tool", "content": dump}]}}
    assert "not shown · v: all" in step_transcript(step, clip=clip).plain
    assert step_transcript(step).plain.count("line ") == 5000  # unclipped without one


def test_token_view_shows_a_bounded_window_around_a_break_and_the_end() -> None:
    assert shown_windows(10, 20, None) == [(0, 10)]
    assert shown_windows(100, 20, None) == [(80, 100)]
    assert shown_windows(100, 20, 90) == [(80, 100)]  # the break is in the last 20
    assert shown_windows(100, 20, 30) == [(25, 35), (90, 100)]  # the break, a little before
    assert shown_windows(10_000, 2000, 300) == [(300 - BREAK_CONTEXT, 1280), (9000, 10_000)]
    prev = _tok(list(range(300)), [7])
    step = _tok([*range(250), *range(1000, 250_000)], list(range(5000)))
    shown = token_view(step, prev, max_prompt_tokens=100, max_completion_tokens=40).plain
    assert "BREAK at prompt token 250" in shown and "⟂BREAK⟂ 1000 " in shown
    assert f"… {250 - BREAK_CONTEXT} earlier tokens" in shown
    assert f"… {249_250 - 100 - (250 - BREAK_CONTEXT)} tokens not shown\n" in shown
    assert " 249999 \n── completion (sampled)\n0 1 2 " in shown
    assert "… 4960 tokens not shown\n4980 " in shown and shown.endswith("4999 \n")
    assert len(shown) < 2_000
