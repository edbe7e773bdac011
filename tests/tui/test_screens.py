"""Every screen and every curation action, driven headless with Pilot."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static, TextArea

from agentworld import records
from agentworld.pool import Pool
from agentworld.tui.app import AgentWorldApp
from agentworld.tui.dialog import PromptDialog
from agentworld.tui.fulltext import FullTextScreen
from agentworld.tui.group import GroupScreen
from agentworld.tui.help import HelpScreen
from agentworld.tui.inspector import InspectorScreen
from agentworld.tui.monitor import MonitorScreen
from agentworld.tui.trajectories import TrajectoriesScreen

from .conftest import T0, app_for, write_pool

SIZE = (100, 30)


def static_text(widget: Static) -> str:
    """What a Static holds, as plain text, whether it was given Text or a table."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


async def until(pilot: Pilot, cond: Callable[[], object], wait_s: float = 30.0) -> None:
    """Let the app work until ``cond`` holds (bounded generously: a loaded CI box is slow;
    this is not a timing assertion)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition never became true")


def overlay(pool_path: Path) -> dict[str, dict]:
    eff = Pool.open(pool_path, recover=False).labels.effective()
    return {t: {f: e.value for f, e in fields.items()} for t, fields in eff.items()}


async def shown_inspector(pilot: Pilot) -> InspectorScreen:
    """The inspector, once it shows a trajectory."""
    screen = lambda: pilot.app.screen  # noqa: E731
    await until(pilot, lambda: isinstance(screen(), InspectorScreen) and screen().trajectory)
    return screen()


def list_screen(app: AgentWorldApp) -> TrajectoriesScreen:
    assert isinstance(app.screen, TrajectoriesScreen)
    return app.screen


async def loaded_list(pilot: Pilot) -> TrajectoriesScreen:
    await until(
        pilot, lambda: isinstance(pilot.app.screen, TrajectoriesScreen) and pilot.app.screen.page
    )
    return list_screen(pilot.app)


async def test_list_shows_pages_sorts_and_filters(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        assert screen.page.total == 6
        assert screen.current_id() == "tr_grp-b_2"  # newest first
        await pilot.press("S")
        await until(pilot, lambda: screen.current_id() == "tr_grp-a_0")
        await pilot.press("s")  # next sort key
        await until(pilot, lambda: screen.sort_key == "started")
        await pilot.press("slash")
        assert isinstance(app_focus := pilot.app.focused, Input), app_focus
        await pilot.press(*"agent:solver status:done", "enter")
        await until(pilot, lambda: screen.page.total == 2)
        assert {r["agent"] for r in screen.page.rows} == {"solver"}
        assert isinstance(pilot.app.focused, DataTable)
        await pilot.press("slash", "ctrl+u", *"reward:0.4..0.6", "enter")
        await until(pilot, lambda: screen.page.total == 2 and screen.selection.min_reward == 0.4)
        await pilot.press("slash", "ctrl+u", *"status:nope", "enter")
        await until(
            pilot, lambda: "unknown 'nope'" in str(screen.query_one("#status", Static).render())
        )


async def test_a_page_asked_before_a_new_sort_never_replaces_it(pool_path: Path) -> None:
    # An exclusive thread worker is not stopped when a newer one starts: the page of a
    # refresh asked just before "S" could arrive after the reversed one and undo it.
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        stale = screen.page
        asked_before = screen._asked
        await pilot.press("S")
        await until(pilot, lambda: screen.current_id() == "tr_grp-a_0")
        screen.show(stale, asked_before)  # the late page of the request before
        await pilot.pause()
        assert screen.current_id() == "tr_grp-a_0"
        assert screen._shown[0]["id"] == "tr_grp-a_0"


async def test_filter_line_completes_keys_and_values(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        await until(pilot, lambda: screen.suggester.values.get("agent"))
        await pilot.press("slash", *"ag")
        await until(pilot, lambda: screen.query_one("#filter", Input)._suggestion == "agent:")
        await pilot.press("right", *"so")
        await until(pilot, lambda: screen.query_one("#filter", Input)._suggestion == "agent:solver")
        await pilot.press("right", *" status:done,fa")
        await until(
            pilot,
            lambda: (
                screen.query_one("#filter", Input)._suggestion == "agent:solver status:done,failed"
            ),
        )
        await pilot.press("right", "enter")
        await until(pilot, lambda: screen.page.total == 3)


async def test_text_search_finds_words_in_messages(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("slash", *"not bold", "enter")
        await until(pilot, lambda: screen.page.total == 1)
        assert screen.page.rows[0]["id"] == "tr_grp-a_0"


async def test_label_keys_land_in_the_overlay_and_the_list(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        tid = screen.current_id()
        target = f"trajectory:{tid}"
        await pilot.press("x")
        await until(pilot, lambda: overlay(pool_path).get(target) == {"trainable": False})
        await until(pilot, lambda: screen.page.rows[0].get("label_trainable") is False)
        await pilot.press("1")
        await until(pilot, lambda: overlay(pool_path)[target].get("quality") == "good")
        await pilot.press("2", "3")
        await until(pilot, lambda: overlay(pool_path)[target].get("quality") == "unsure")
        await pilot.press("y")
        await until(pilot, lambda: overlay(pool_path)[target].get("trainable") is True)
        await pilot.press("number_sign")
        await until(pilot, lambda: isinstance(pilot.app.screen, PromptDialog))
        await pilot.press(*"hard, math", "enter")
        await until(pilot, lambda: overlay(pool_path)[target].get("tags") == ["hard", "math"])
        await pilot.press("n")
        await until(pilot, lambda: isinstance(pilot.app.screen, PromptDialog))
        await pilot.press(*"looks [b]fine", "enter")
        await until(pilot, lambda: overlay(pool_path)[target].get("note") == "looks [b]fine")
        await pilot.press("o")
        await until(pilot, lambda: isinstance(pilot.app.screen, PromptDialog))
        await pilot.press(*"0.25", "enter")
        await until(pilot, lambda: overlay(pool_path)[target].get("reward") == 0.25)
        await until(pilot, lambda: screen.page.rows[0]["effective_reward"] == 0.25)
        # filters see the labels at once
        await pilot.press("slash", *"label:unsure tag:hard", "enter")
        await until(pilot, lambda: screen.page.total == 1)
        # undo walks back one action at a time
        await pilot.press("u")
        await until(pilot, lambda: "reward" not in overlay(pool_path)[target])
        await pilot.press("u")
        await until(pilot, lambda: "note" not in overlay(pool_path)[target])
        entries = list(Pool.open(pool_path, recover=False).labels.entries())
        assert {e.author for e in entries} == {"tester"}


async def test_a_reward_override_that_is_not_finite_is_refused_in_words(pool_path: Path) -> None:
    """ "nan" passed float() and came back as the label check's field path."""
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        for typed in ("nan", "inf", "abc"):
            await pilot.press("o")
            await until(pilot, lambda: isinstance(pilot.app.screen, PromptDialog))
            await pilot.press(*typed, "enter")
            said = f"a reward is a finite number, not {typed!r}"
            await until(
                pilot, lambda said=said: any(said == n.message for n in pilot.app._notifications)
            )
        assert pilot.app.screen is screen
        assert not list(Pool.open(pool_path, recover=False).labels.entries())  # nothing written


async def test_label_every_matching_trajectory(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("slash", *"agent:coder", "enter")
        await until(pilot, lambda: screen.page.total == 3)
        await pilot.press("a")
        assert "ALL 3 matching" in str(screen.query_one("#status", Static).render())
        await pilot.press("x")
        expected = {f"trajectory:tr_grp-a_{k}" for k in range(3)}
        await until(pilot, lambda: set(overlay(pool_path)) == expected)
        assert not screen.all_armed
        await pilot.press("slash", "ctrl+u", *"label:trainable", "enter")
        await until(pilot, lambda: screen.page.total == 3)  # the three solver ones
        await pilot.press("u")
        await until(pilot, lambda: all(not v for v in overlay(pool_path).values()))


async def test_inspector_transcript_metadata_tokens_and_step_labels(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("slash", *"group:grp-b", "enter")
        await until(pilot, lambda: screen.page.total == 3)
        await pilot.press("down", "enter")
        await shown_inspector(pilot)
        ins = pilot.app.screen
        assert ins.trajectory.id == "tr_grp-b_1"
        body = lambda: str(ins.query_one("#body", Static).render())  # noqa: E731
        meta = lambda: static_text(ins.query_one("#meta", Static))  # noqa: E731
        assert "── system" in body() and "→ tool call calc" in body() and "reasoning" in body()
        assert "finish stop" in meta() and "first token" not in meta()  # folded to a line
        await pilot.press("i")
        await until(pilot, lambda: "first token 0.100 s" in meta())
        await pilot.press("j", "t")
        await until(pilot, lambda: "BREAK at prompt token 3" in body())
        assert "source: engine" in body()
        await pilot.press("k")
        await until(pilot, lambda: "BREAK" not in body() and "source: engine" in body())
        await pilot.press("j", "full_stop", "2")
        step_target = "step:st_tr_grp-b_1_1"
        await until(pilot, lambda: overlay(pool_path).get(step_target) == {"quality": "bad"})
        await until(pilot, lambda: "quality=bad" in meta())
        await pilot.press("full_stop", "1")
        await until(
            pilot, lambda: overlay(pool_path).get("trajectory:tr_grp-b_1") == {"quality": "good"}
        )
        # a step's label line tells its own labels from those its trajectory gives it
        labelbar = lambda: str(ins.query_one("#labelbar", Static).render())  # noqa: E731
        await pilot.press("full_stop", "k")
        await until(pilot, lambda: "labelling  step 0" in labelbar())
        assert "labels none  from the trajectory quality=good" in labelbar()
        await pilot.press("x")
        await until(
            pilot, lambda: "labels trainable=false  from the trajectory quality=good" in labelbar()
        )
        await pilot.press("u", "full_stop")
        await until(pilot, lambda: "labelling  trajectory" in labelbar())
        assert "from the trajectory" not in labelbar()
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(pilot.app.screen, TrajectoriesScreen))
        await until(pilot, lambda: screen.page.rows[1].get("label_quality") == "good")


async def test_inspector_shows_each_step_of_a_session_as_what_it_added(tmp_path: Path) -> None:
    """A long session's steps each resend the whole conversation: a step shows what it
    added to the one before (fast to lay out), ``h`` the whole of what it sent."""
    steps = []
    msgs: list[dict] = [
        {"role": "system", "content": "SYSTEM PROMPT"},
        {"role": "user", "content": "FIRST TASK"},
    ]
    for i in range(3):
        reply = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{i}", "name": "bash", "arguments": f'{{"n": {i}}}'}],
        }
        steps.append(
            records.make_step(
                id=f"st_s_{i}",
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
        msgs += [reply, {"role": "tool", "tool_call_id": f"c{i}", "content": f"RESULT {i}"}]
    async with app_for(write_pool(tmp_path / "pool", steps)).run_test(size=SIZE) as pilot:
        await loaded_list(pilot)
        pilot.app.inspect("tr_session")
        await shown_inspector(pilot)
        body = lambda: str(pilot.app.screen.query_one("#body", Static).render())  # noqa: E731
        assert "SYSTEM PROMPT" in body() and "FIRST TASK" in body()  # the first step: all of it
        await pilot.press("j", "j")
        await until(pilot, lambda: "RESULT 1" in body())
        assert "… 4 earlier messages (the step before sent them too; h: show)" in body()
        assert "SYSTEM PROMPT" not in body() and "RESULT 0" not in body()
        assert "bash [c1]" in body() and "bash [c2]" in body()  # the call answered, the next
        await pilot.press("h")
        await until(pilot, lambda: "SYSTEM PROMPT" in body())
        assert "RESULT 0" in body() and "earlier messages" not in body()
        await pilot.press("k")  # the whole history stays on while stepping
        await until(pilot, lambda: "RESULT 1" not in body() and "SYSTEM PROMPT" in body())


async def test_inspector_clips_a_long_message_and_keys_leave_the_body_alone(
    tmp_path: Path,
) -> None:
    """A tool result of a whole file shows its ends and a line naming the key that shows
    it all; keys that do not change what the body shows (labels, j/k at an end) leave it
    as it is, where each of them laid out the whole text again."""
    dump = "".join(f"line {i:05d} " + "x" * 90 + "\n" for i in range(2000))  # 200 KB
    asked = [{"role": "user", "content": "FIRST"}]
    steps = []
    for i, content in enumerate(("CALLING", "SUMMARY")):
        steps.append(
            records.make_step(
                id=f"st_dump_{i}",
                trajectory="tr_dump",
                index=i,
                agent="coder",
                timings={"started_at": T0 + i, "ended_at": T0 + i + 1},
                request={"model": "m", "messages": list(asked)},
                response={"message": {"role": "assistant", "content": content}},
            )
        )
        asked += [{"role": "assistant", "content": content}, {"role": "tool", "content": dump}]
    async with app_for(write_pool(tmp_path / "pool", steps)).run_test(size=SIZE) as pilot:
        await loaded_list(pilot)
        pilot.app.inspect("tr_dump")
        ins = await shown_inspector(pilot)
        body = ins.query_one("#body", Static)
        await pilot.press("j")  # the step the file came back to
        await until(pilot, lambda: "SUMMARY" in str(body.render()))
        shown = str(body.render())
        assert "line 00000" in shown and "line 01999" in shown
        assert "line 01000" not in shown and len(shown) < 10_000
        assert "lines (" in shown and "characters) not shown · v: the whole text" in shown
        content = body.content
        await pilot.press("j", "full_stop", "full_stop", "1")  # j: at the last step already
        meta = lambda: static_text(ins.query_one("#meta", Static))  # noqa: E731
        await until(pilot, lambda: "quality=good" in meta())
        await pilot.pause(0.1)
        assert body.content is content and ins.step_i == 1  # neither built nor laid out again
        await pilot.press("h", "h")  # a change of view does build it again
        await until(pilot, lambda: body.content is not content)
        await pilot.press("v")  # the whole text, in a view that scrolls it
        await until(pilot, lambda: isinstance(pilot.app.screen, FullTextScreen))
        text = pilot.app.screen.query_one(TextArea).text
        assert dump in text and "SUMMARY" in text and "not shown" not in text
        await pilot.press("escape")
        await until(pilot, lambda: pilot.app.screen is ins)


async def test_inspector_opens_the_trajectory_a_fork_branched_off(tmp_path: Path) -> None:
    asked = [{"role": "user", "content": "TASK"}]
    steps = [
        records.make_step(
            id=f"st_{tid}_{index}",
            trajectory=tid,
            index=index,
            agent="coder",
            timings={"started_at": T0 + index, "ended_at": T0 + index + 1},
            request={"model": "m", "messages": asked},
            response={"message": {"role": "assistant", "content": f"{tid} {index}"}},
            metadata=metadata,
        )
        for tid, index, metadata in (
            ("tr_main", 0, {"threading": "auto"}),
            ("tr_main", 1, {"threading": "auto"}),
            ("tr_fork", 0, {"forked_from": {"trajectory": "tr_main", "step": 1, "messages": 3}}),
        )
    ]
    async with app_for(write_pool(tmp_path / "pool", steps)).run_test(size=SIZE) as pilot:
        await loaded_list(pilot)
        pilot.app.inspect("tr_fork")
        fork = await shown_inspector(pilot)
        meta = str(fork.query_one("#meta", Static).render())
        assert "forked from tr_main step 1" in meta  # shown folded too: f opens it
        await pilot.press("f")
        await until(pilot, lambda: pilot.app.screen is not fork and pilot.app.screen.trajectory)
        main = pilot.app.screen
        assert main.trajectory.id == "tr_main" and main.step_i == 1  # the step it branched from
        assert "tr_main 1" in str(main.query_one("#body", Static).render())
        await pilot.press("f")  # tr_main branched off nothing: it says so and stays
        await pilot.pause(0.1)
        assert pilot.app.screen is main
        await pilot.press("escape")
        await until(pilot, lambda: pilot.app.screen is fork)


async def test_inspector_shows_failed_step_error(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        await loaded_list(pilot)
        pilot.app.inspect("tr_grp-b_2")
        await shown_inspector(pilot)
        await pilot.press("j")
        meta = str(pilot.app.screen.query_one("#meta", Static).render())
        assert "upstream: boom [red]x[/red]" in meta


async def test_group_view_rewards_advantages_and_labels(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("g")
        await until(
            pilot, lambda: isinstance(pilot.app.screen, GroupScreen) and pilot.app.screen.members
        )
        grp = pilot.app.screen
        assert [t.id for t in grp.members] == ["tr_grp-b_0", "tr_grp-b_1", "tr_grp-b_2"]
        assert grp.advantages[0] > 0 > grp.advantages[1] and grp.advantages[2] == 0
        # rewards 1, 0, 0.5: mean 0.5, sample std 0.5, as aw train computes it
        shown = [str(grp.query_one("#members", DataTable).get_row(t.id)[3]) for t in grp.members]
        assert shown == ["+1.000", "-1.000", "+0.000"]
        info = str(grp.query_one("#ginfo", Static).render())
        assert "shared prefix: 3 tokens" in info  # grp-b/1 breaks at token 3
        assert grp.current().id == "tr_grp-b_2"  # opened on the highlighted one
        await pilot.press("x")
        await until(
            pilot, lambda: overlay(pool_path).get("trajectory:tr_grp-b_2") == {"trainable": False}
        )
        await until(pilot, lambda: grp.members and grp.members[2].labels == {"trainable": False})
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, InspectorScreen))
        await pilot.press("escape", "escape")
        await until(pilot, lambda: pilot.app.screen is screen)


async def test_review_queue_walks_unlabelled_one_key_each(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        await loaded_list(pilot)
        await pilot.press("r")
        await shown_inspector(pilot)
        review = pilot.app.screen
        seen = [review.trajectory.id]
        assert seen == ["tr_grp-a_0"]  # oldest first
        await pilot.press("1")
        await until(pilot, lambda: review.trajectory and review.trajectory.id != seen[-1])
        seen.append(review.trajectory.id)
        await pilot.press("u")  # undo brings the one just labelled back
        await until(pilot, lambda: review.trajectory and review.trajectory.id == seen[0])
        assert (
            "trajectory:tr_grp-a_0" not in overlay(pool_path)
            or not overlay(pool_path)["trajectory:tr_grp-a_0"]
        )
        await pilot.press("1")
        await until(pilot, lambda: review.trajectory and review.trajectory.id == seen[1])
        await pilot.press("space")  # skip without labelling
        await until(pilot, lambda: review.trajectory and review.trajectory.id != seen[-1])
        seen.append(review.trajectory.id)
        for _ in range(4):
            current = review.trajectory.id if review.trajectory else None
            await pilot.press("x")
            await until(
                pilot, lambda c=current: review.trajectory is None or review.trajectory.id != c
            )
        assert review.trajectory is None
        assert "queue empty" in str(review.query_one("#info", Static).render())
        labelled = set(overlay(pool_path))
        assert f"trajectory:{seen[1]}" not in labelled and len(labelled) == 5


def spy_notices(app: AgentWorldApp) -> list[tuple[str, str]]:
    """(severity, message) of every notice the app shows from now on."""
    shown: list[tuple[str, str]] = []
    notify = app.notify

    def spy(message: str, *, severity: str = "information", **kw: object) -> None:
        shown.append((severity, message))
        notify(message, severity=severity, **kw)  # type: ignore[arg-type]

    app.notify = spy  # type: ignore[method-assign]
    return shown


async def test_a_label_file_gone_bad_meanwhile_is_a_notice_not_a_crash(pool_path: Path) -> None:
    """Another writer leaves a bad label line while the app runs: the screens keep their
    last good view, each action that needs the labels says why it cannot, the refresh
    says it once, and says so again when the file is fixed."""
    async with app_for(pool_path, refresh_s=0.05).run_test(size=SIZE) as pilot:
        listing = await loaded_list(pilot)
        shown = spy_notices(pilot.app)
        bad = pool_path / "labels" / "mallory" / "2026-01-01.jsonl"
        bad.parent.mkdir(parents=True)
        bad.write_text('{"author": "mallory", bad json\n')
        refresh = lambda: [m for _, m in shown if m.startswith("pool not refreshed")]  # noqa: E731
        await until(pilot, refresh)
        assert f"{bad}:1: bad label line" in refresh()[0]
        for keys in (["1"], ["u"], ["g"], ["escape", "r"], ["escape", "enter"]):
            before = len(shown)
            await pilot.press(*keys)  # label, undo, group view, review queue, inspector
            await until(pilot, lambda n=before: len(shown) > n)
        assert all(f"{bad}:1: bad label line" in m for _, m in shown)
        # A label and its undo are written all the same: said so, not reported as failed
        # (a user told "error" labels again)
        saved = [(s, m) for s, m in shown if "(saved; shown once the pool refreshes" in m]
        assert [s for s, _ in saved] == ["warning", "warning"]
        assert saved[0][1].startswith("labelled: ") and saved[1][1].startswith("undid: ")
        assert all(s == "error" for s, m in shown if (s, m) not in saved)
        entries = [ln for ln in pool_path.glob("labels/tester/*.jsonl")]
        assert entries and len(entries[0].read_text().splitlines()) == 2  # label and undo
        assert len(refresh()) == 1  # not repeated at every refresh
        assert pilot.app.is_running and listing.page.total == 6
        bad.write_text("")
        await until(pilot, lambda: any(m.startswith("pool readable again") for _, m in shown))


async def test_monitor_shows_counts_and_switching_modes(pool_path: Path) -> None:
    async with app_for(pool_path, start="monitor").run_test(size=SIZE) as pilot:
        await until(
            pilot, lambda: isinstance(pilot.app.screen, MonitorScreen) and pilot.app.screen.ready
        )
        mon = pilot.app.screen
        summary = str(mon.query_one("#summary", Static).render())
        assert "steps 12" in summary and "done 5" in summary and "failed 1" in summary
        assert "v1:12" in summary
        side = str(mon.query_one("#side", Static).render())
        assert "boom [red]x[/red]" in side
        assert "reward distribution" in str(mon.query_one("#rewards", Static).render())
        assert mon.query_one("#per-agent", DataTable).row_count == 2
        await pilot.press("l")
        await until(pilot, lambda: isinstance(pilot.app.screen, TrajectoriesScreen))
        await pilot.press("m")
        await until(pilot, lambda: pilot.app.screen is mon)


async def test_monitor_shows_proxy_stats_or_why_not(pool_path: Path) -> None:
    app = app_for(pool_path, start="monitor", proxy_url="http://127.0.0.1:9")
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot, lambda: isinstance(pilot.app.screen, MonitorScreen) and pilot.app.screen.ready
        )
        proxy = pilot.app.screen.query_one("#proxy", Static)  # drawn at its width: its lines
        text = lambda: "".join(proxy.render_line(y).text for y in range(proxy.size.height))  # noqa: E731
        await until(pilot, lambda: "unreachable" in text())  # drawn late on a loaded host
        assert text().startswith("proxy")


async def test_help_lists_every_key_and_palette_has_every_action(pool_path: Path) -> None:
    app = app_for(pool_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
        text = str(pilot.app.screen.query_one("#help", Static).render())
        for key in ("/", "#", "]", "[", "y", "x", "u", "a", "g", "s", "S", "r", "m", "l", "?"):
            assert f"  {key}  " in text, key
        # Contextual: the list's keys, not the inspector's, and none of Textual's internals.
        assert "Tokens" not in text and "filter line" in text
        for internal in ("help_quit", "question_mark", "ctrl+c", "Close", "focus_next"):
            assert internal not in text, internal
        await pilot.press("escape")
        await until(pilot, lambda: pilot.app.screen is screen)
        await pilot.press("enter")
        ins = await shown_inspector(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
        text = str(pilot.app.screen.query_one("#help", Static).render())
        assert text.startswith("inspector") and "filter line" not in text
        for key in (".", "t", "i", "h", "v", "j", "k", "PgDn", "PgUp", "esc", "l", "?"):
            assert f"  {key}  " in text, key
        await pilot.press("escape")
        await until(pilot, lambda: pilot.app.screen is ins)
        commands = {c.title: c.help for c in app.get_system_commands(ins)}
        for title, text in commands.items():  # names, not actions: no label_quality('bad')
            assert "('" not in title + text and "_" not in title + text, (title, text)
        assert commands["Label quality bad"] == "key 2"
        await pilot.press("escape")
        await until(pilot, lambda: pilot.app.screen is screen)
        titles = {c.title for c in app.get_system_commands(screen)}
        for title in (
            "Label trainable",
            "Label not trainable",
            "Label quality good",
            "Label quality bad",
            "Label quality unsure",
            "Edit the tags",
            "Write a note",
            "Override the reward",
            "Undo the last label",
            "The next label applies to every match",
            "Edit the filter line",
            "Sort by the next column",
            "Go to the monitor",
            "Go to the trajectory list",
            "Review unlabelled trajectories one by one",
            "Keys of this screen",
            "The trajectory's group, side by side",
            "Next page",
        ):
            assert title in titles, title


async def test_palette_entry_runs_its_action(pool_path: Path) -> None:
    app = app_for(pool_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        cmd = next(c for c in app.get_system_commands(screen) if c.title == "Label not trainable")
        await cmd.callback()
        tid = screen.current_id()
        await until(
            pilot, lambda: overlay(pool_path).get(f"trajectory:{tid}") == {"trainable": False}
        )


async def test_usable_at_80x24(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=(80, 24)) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("enter")
        await shown_inspector(pilot)
        await pilot.press("escape", "m")
        await until(
            pilot, lambda: isinstance(pilot.app.screen, MonitorScreen) and pilot.app.screen.ready
        )
        assert screen.query_one("#list", DataTable).row_count == 6


async def test_a_filter_that_does_not_parse_is_not_applied_and_says_what_the_list_shows(
    pool_path: Path,
) -> None:
    """The list kept the last filter's rows under a filter line showing the bad one, and
    `a` then labelled all of a selection no longer on screen."""
    async with app_for(pool_path).run_test(size=SIZE) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("slash", *"agent:solver status:done", "enter")
        await until(pilot, lambda: screen.page.total == 2)
        await pilot.press("slash", "ctrl+u", *"reward:abc", "enter")
        status = lambda: str(screen.query_one("#status", Static).render())  # noqa: E731
        await until(
            pilot,
            lambda: "not applied, the list still shows 'agent:solver status:done'" in status(),
        )
        assert screen.query_one("#filter", Input).value == "reward:abc"  # kept, to mend
        assert isinstance(pilot.app.focused, Input)
        await pilot.press("escape", "a")  # label ALL matching: refused, nothing armed
        assert not screen.all_armed
        await pilot.press("slash", "ctrl+u", *"reward:0..1", "enter", "a")
        await until(pilot, lambda: screen.all_armed)
        assert "ALL" in status()


async def test_full_text_wraps_long_lines_unless_one_is_huge_and_w_toggles(
    pool_path: Path,
) -> None:
    """A long system prompt was cut at the right edge with nothing saying it scrolls."""
    from agentworld.tui.fulltext import WRAP_MAX_CHARS

    async with app_for(pool_path).run_test(size=(80, 24)) as pilot:
        await loaded_list(pilot)
        await pilot.app.push_screen(FullTextScreen("step 0 · user", "word " * 100 + "\nend"))
        area = pilot.app.screen.query_one(TextArea)
        assert area.soft_wrap and area.wrapped_document.height > 5  # wrapped onto lines
        assert "wrapped (w)" in pilot.app.screen.sub_title
        await pilot.press("w")
        assert not area.soft_wrap and area.wrapped_document.height == 2
        assert "scroll sideways (w)" in pilot.app.screen.sub_title
        await pilot.press("escape")
        huge = "x" * (WRAP_MAX_CHARS + 1)  # wrapping it would be as slow as laying it out
        await pilot.app.push_screen(FullTextScreen("step 1 · tool", huge))
        assert not pilot.app.screen.query_one(TextArea).soft_wrap
