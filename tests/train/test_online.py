"""The online loop: complete groups consumed exactly once across restarts, weights published."""

from __future__ import annotations

import io
import json
import resource
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agentworld.errors import CorruptDataError, UpstreamError
from agentworld.train.config import TrainConfig
from agentworld.train.loop import train
from agentworld.train.online import Cursor, CursorState, complete_groups, post_json, split_rows
from agentworld.train.sequences import Row


@pytest.fixture(autouse=True)
def _fresh_accelerate_state() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture
def upstream():
    """A stand-in for `aw serve` and the proxy that records what it is told, and answers
    which policy version each is at (the served checkpoint's, the one last stamped)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    at = {"/aw/version": 0, "/aw/policy": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append((self.path, body))
            if self.path == "/aw/reload":
                meta = json.loads((Path(body["path"]) / "meta.json").read_text())
                at["/aw/version"] = meta["policy_version"]
            elif self.path == "/aw/policy":
                at["/aw/policy"] = body["version"]
            code = 500 if self.path == "/broken/aw/reload" else 200
            self._answer(code, {"ok": True})

        def do_GET(self) -> None:
            self._answer(200, {"policy_version": at[self.path]})

        def _answer(self, code: int, body: dict[str, Any]) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", calls
    server.shutdown()
    server.server_close()


def test_cursor_round_trip_and_corruption(tmp_path: Path) -> None:
    cur = Cursor(tmp_path, "c")
    assert cur.load() == CursorState()
    cur.save(CursorState({"g2", "g1"}, "/x/ckpt", 3, 7))
    assert cur.load() == CursorState({"g1", "g2"}, "/x/ckpt", 3, 7)
    assert json.loads(cur.path.read_text())["groups"] == ["g1", "g2"]
    assert [p.name for p in cur.path.parent.iterdir()] == ["c.json"]  # no temp files left
    cur.path.write_text("{not json")
    with pytest.raises(CorruptDataError, match=r"c\.json"):
        cur.load()


def test_a_group_is_complete_when_group_size_trajectories_ended(builder) -> None:
    g1, _ = builder.group([1.0, 0.0])
    builder.group([1.0])  # one of two: incomplete
    _, recs = builder.trajectory(group="g3")
    builder.write(recs[:-1])  # steps without an end: still open
    cfg = TrainConfig(model="m", online=True, group_size=2)
    assert [g for g, _ in complete_groups(builder.pool, cfg, set())] == [g1]
    assert complete_groups(builder.pool, cfg, {g1}) == []


def test_split_rows_gives_exactly_k_parts() -> None:
    rows = [Row([1] * n, [1] * n, [0.0] * n, "t", "g") for n in (5, 1, 3)]
    parts = split_rows(rows, 2)
    assert [[len(r) for r in p] for p in parts] == [[1, 3], [5]]
    assert [len(p) for p in split_rows(rows[:1], 3)] == [1, 0, 0]


def run_online(
    builder, tiny_model: Path, out: Path, url: str, console: Console | None = None, **kw: Any
) -> dict[str, Any]:
    cfg = TrainConfig(
        model=str(tiny_model),
        pool=str(builder.pool.root),
        output_dir=str(out),
        online=True,
        algo="grpo",
        group_size=2,
        groups_per_update=1,
        reload_every=1,
        poll_interval_s=0.05,
        idle_exit_s=0.3,
        lr=1e-3,
        batch_tokens=256,
        max_seq_len=128,
        **{"progress": False, "serve_url": url, "proxy_url": url, **kw},
    )
    return train(cfg, console=console or Console(file=open("/dev/null", "w")))


def trained_groups(out: Path) -> list[list[str]]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["groups"] for r in rows]


def test_groups_are_consumed_exactly_once_across_a_restart(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    url, calls = upstream
    groups = [builder.group([1.0, 0.0], turns=2)[0] for _ in range(3)]
    g4 = "g4-late"
    _, first_half = builder.trajectory(group=g4, reward=1.0)
    builder.write(first_half)  # one of two: the group is not complete yet
    out = tmp_path / "run"

    s1 = run_online(builder, tiny_model, out, url, max_steps=2)
    assert s1["updates"] == 2 and s1["policy_version"] == 2
    cursor = Cursor(builder.pool.root, "train").load()
    assert cursor.groups == set(groups[:2]) and cursor.policy_version == 2
    assert cursor.checkpoint == str((out / "ckpt-000002").resolve())
    assert [c for c in calls if c[0] == "/aw/policy"] == [
        ("/aw/policy", {"version": 1}),
        ("/aw/policy", {"version": 2}),
    ]
    reloads = [c[1]["path"] for c in calls if c[0] == "/aw/reload"]
    assert reloads == [str((out / f"ckpt-00000{i}").resolve()) for i in (1, 2)]
    meta = json.loads((out / "ckpt-000002" / "meta.json").read_text())
    assert meta["policy_version"] == 2

    _, second_half = builder.trajectory(group=g4, reward=0.0)
    builder.write(second_half)  # now g4 is complete
    s2 = run_online(builder, tiny_model, out, url, max_steps=10)  # restart: same consumer
    assert s2["updates"] == 2 and s2["step"] == 4 and s2["policy_version"] == 4
    per_update = trained_groups(out)
    flat = [g for u in per_update for g in u]
    assert sorted(flat) == sorted([*groups, g4])  # every group once, none twice
    assert Cursor(builder.pool.root, "train").load().groups == {*groups, g4}
    assert [c[1]["version"] for c in calls if c[0] == "/aw/policy"] == [1, 2, 3, 4]


def test_off_a_terminal_an_online_run_says_what_it_waits_for_and_each_update(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    """In a log file (no bar is drawn there until the end): a line per update, and, when
    it waits, for which groups and how many it took without signal (a silent trainer that
    drops flat groups looks hung)."""
    url, _ = upstream
    builder.group([0.0, 0.0], turns=1)  # flat: no signal
    builder.group([1.0, 0.0], turns=1)
    log = io.StringIO()
    console = Console(file=log, width=200)
    assert not console.is_terminal
    summary = run_online(
        builder, tiny_model, tmp_path / "run", url, console, max_steps=5, progress=True, agent="a"
    )
    text = log.getvalue()
    assert summary["updates"] == 1
    assert "train 1/5  loss " in text and "reward 0.500" in text
    assert (
        "waiting for complete groups of 2 (agent a); 1 taken so far had nothing to train "
        "on (equal rewards, no reward, or failed), skipped" in text
    ), text
    assert "train ━" not in text  # no bar drawn at the end of a log


def test_a_lost_cursor_commit_replays_from_the_checkpoint_it_names(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    url, _ = upstream
    g1 = builder.group([1.0, 0.0], turns=2)[0]
    g2 = builder.group([1.0, 0.0], turns=2)[0]
    out = tmp_path / "run"
    run_online(builder, tiny_model, out, url, max_steps=2)
    # Crash after ckpt-000002 was written but before the cursor named it.
    Cursor(builder.pool.root, "train").save(
        CursorState({g1}, str((out / "ckpt-000001").resolve()), 1, 1)
    )
    s = run_online(builder, tiny_model, out, url, max_steps=5)
    assert s["step"] == 2 and s["updates"] == 1  # resumed at update 1, redid g2 only
    assert trained_groups(out)[-1] == [g2]
    # The update that was lost and trained again is one row, not two.
    assert [r["step"] for r in metrics_rows(out)] == [1, 2]


def test_a_resume_of_a_checkpoint_whose_cursor_commit_was_lost_trains_no_group_twice(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    """`--resume latest` names the newest checkpoint, which a kill before its cursor commit
    left uncommitted: its groups are in its weights, not in the cursor."""
    url, calls = upstream
    g1, g2, g3 = (builder.group([1.0, 0.0], turns=2)[0] for _ in range(3))
    out = tmp_path / "run"
    run_online(builder, tiny_model, out, url, max_steps=2)
    # Killed after ckpt-000002 was written, before the cursor named it and the reload.
    ckpt1 = str((out / "ckpt-000001").resolve())
    Cursor(builder.pool.root, "train").save(CursorState({g1}, ckpt1, 1, 1))
    post_json(url + "/aw/reload", {"path": ckpt1})
    post_json(url + "/aw/policy", {"version": 1})
    del calls[:]
    log = Console(file=io.StringIO(), width=200)
    s = run_online(builder, tiny_model, out, url, console=log, max_steps=5, resume="latest")
    assert s["step"] == 3 and s["updates"] == 1
    assert trained_groups(out) == [[g1], [g2], [g3]]  # g2 once, in ckpt-000002's weights
    assert "resume: cursor 'train' now names ckpt-000002 (2 groups)" in log.file.getvalue()
    ckpt2 = str((out / "ckpt-000002").resolve())
    assert calls[:2] == [("/aw/reload", {"path": ckpt2}), ("/aw/policy", {"version": 2})]
    cursor = Cursor(builder.pool.root, "train").load()
    assert cursor == CursorState({g1, g2, g3}, str((out / "ckpt-000003").resolve()), 3, 3)


@contextmanager
def disk_full_past(size_bytes: int) -> Iterator[None]:
    """Writes past ``size_bytes`` in one file fail (EFBIG: Python ignores SIGXFSZ), as on a
    full disk."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_resume_latest_passes_over_a_checkpoint_a_full_disk_left_half_rewritten(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    """A replay rewrites the uncommitted checkpoint in place (its meta.json unlinked first):
    cut short, ``latest`` still names it, and the newest complete one is resumed instead."""
    url, _ = upstream
    g1, g2, g3 = (builder.group([1.0, 0.0], turns=2)[0] for _ in range(3))
    out = tmp_path / "run"
    run_online(builder, tiny_model, out, url, max_steps=2)
    ckpt1 = str((out / "ckpt-000001").resolve())
    Cursor(builder.pool.root, "train").save(CursorState({g1}, ckpt1, 1, 1))  # commit lost
    # An OSError naming the folder, which `aw` prints in a line (safetensors raised its own).
    with disk_full_past(200_000), pytest.raises(OSError, match="File too large") as exc:
        run_online(builder, tiny_model, out, url, max_steps=5)  # the replay's weights: 549 kB
    assert exc.value.filename == str(out / "ckpt-000002")
    assert not (out / "ckpt-000002" / "meta.json").exists()
    assert (out / "latest").read_text().strip() == "ckpt-000002"
    s = run_online(builder, tiny_model, out, url, max_steps=5, resume="latest")
    assert s["step"] == 3 and trained_groups(out) == [[g1], [g2], [g3]]


def metrics_rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_resumed_run_drops_the_metrics_its_checkpoint_does_not_hold(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    url, _ = upstream
    for _ in range(2):
        builder.group([1.0, 0.0], turns=2)
    out = tmp_path / "run"
    run_online(builder, tiny_model, out, url, max_steps=1)
    # Killed mid-update 2: its row written, no checkpoint, and a row torn by the kill.
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "loss": 9.0}) + "\n" + '{"step": 3, "lo')
    log = Console(file=io.StringIO(), width=200)
    run_online(builder, tiny_model, out, url, console=log, max_steps=5)
    rows = metrics_rows(out)
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["loss"] != 9.0
    assert "dropped 2 row(s) past update 1" in log.file.getvalue()


def test_a_restart_brings_the_server_and_proxy_to_the_trainers_version(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    url, calls = upstream
    for _ in range(2):
        builder.group([1.0, 0.0], turns=2)
    out = tmp_path / "run"
    run_online(builder, tiny_model, out, url, max_steps=2)
    # Killed after ckpt-000002 and its cursor commit, before the reload: both still at v1.
    post_json(url + "/aw/reload", {"path": str(out / "ckpt-000001")})
    post_json(url + "/aw/policy", {"version": 1})
    del calls[:]
    s = run_online(builder, tiny_model, out, url, max_steps=5)  # nothing new to train
    assert s["updates"] == 0
    assert calls == [
        ("/aw/reload", {"path": str((out / "ckpt-000002").resolve())}),
        ("/aw/policy", {"version": 2}),
    ]
    del calls[:]
    run_online(builder, tiny_model, out, url, max_steps=5)  # already there: nothing sent
    assert calls == []


def test_checkpoints_keep_the_last_k_weights_once_and_optimizer_state_every_n(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    url, calls = upstream
    for _ in range(5):
        builder.group([1.0, 0.0], turns=2)
    out = tmp_path / "run"
    s = run_online(builder, tiny_model, out, url, max_steps=20, keep_checkpoints=3, state_every=2)
    assert s["updates"] == 5
    assert sorted(p.name for p in out.glob("ckpt-*")) == [f"ckpt-00000{i}" for i in (3, 4, 5)]
    # The weights sit beside the tokenizer only: never again in train_state/.
    assert not list(out.glob("ckpt-*/train_state/*.safetensors"))
    assert not (out / "ckpt-000003" / "train_state").exists()  # update 3: weights only
    for kept in ("ckpt-000004", "ckpt-000005"):  # every 2nd, and the last of the run
        assert list((out / kept / "train_state").glob("optimizer*")), kept
    assert s["checkpoints"].startswith(
        "kept ckpt-000003, ckpt-000004, ckpt-000005; optimizer state in ckpt-000005; "
        "deleted 2 older ("
    )
    # Every update was still served: weights for the reload each time.
    assert [c[1]["version"] for c in calls if c[0] == "/aw/policy"] == [1, 2, 3, 4, 5]
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_resume_from_weights_without_optimizer_state_takes_the_newest_older_state(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    url, _ = upstream
    groups = [builder.group([1.0, 0.0], turns=2)[0] for _ in range(4)]
    out = tmp_path / "run"
    run_online(builder, tiny_model, out, url, max_steps=3, keep_checkpoints=0, state_every=2)
    assert not (out / "ckpt-000001" / "train_state").exists()
    # Killed right after update 3's checkpoint would have been its last: no state in it yet.
    import shutil

    shutil.rmtree(out / "ckpt-000003" / "train_state")
    meta = json.loads((out / "ckpt-000003" / "meta.json").read_text())
    (out / "ckpt-000003" / "meta.json").write_text(json.dumps({**meta, "train_state": False}))
    log = Console(file=io.StringIO(), width=200)
    s = run_online(builder, tiny_model, out, url, console=log, max_steps=5)
    assert s["step"] == 4 and trained_groups(out)[-1] == [groups[3]]
    text = log.file.getvalue()
    assert (
        "resume: weights of ckpt-000003, optimizer state of ckpt-000002 (1 updates older)" in text
    )
    # The trainer is at version 3, the group was sampled by version 0: the fidelity check
    # names the lag, not a template mismatch.
    fid = s["fidelity"]
    assert fid.trainer_version == 3 and fid.rollout_versions == (0,)
    # And every update's row says it: the versions that sampled its rows, and the lag.
    last = metrics_rows(out)[-1]
    assert (last["policy_version"], last["rollout_version_min"], last["policy_lag"]) == (3, 0, 3)
    assert last["rollout_version_max"] == 0


def test_a_server_down_at_the_reload_stops_the_run_saying_nothing_is_lost(
    builder, tiny_model: Path, tmp_path: Path, upstream
) -> None:
    url, calls = upstream
    g1 = builder.group([1.0, 0.0], turns=2)[0]
    out = tmp_path / "run"
    with pytest.raises(UpstreamError) as err:
        run_online(
            builder, tiny_model, out, url, max_steps=5, serve_url="http://127.0.0.1:9",
            reload_retry_s=0.3,
        )  # fmt: skip
    assert "127.0.0.1:9/aw/reload" in str(err.value)
    assert (
        "; ckpt-000001 (policy version 1) is saved and its groups committed: restarting "
        "`aw train --online` brings the server and proxy to it" in str(err.value)
    )
    ckpt1 = str((out / "ckpt-000001").resolve())
    assert Cursor(builder.pool.root, "train").load() == CursorState({g1}, ckpt1, 1, 1)
    s = run_online(builder, tiny_model, out, url, max_steps=5)  # the server is back
    assert s["updates"] == 0
    assert calls == [("/aw/reload", {"path": ckpt1}), ("/aw/policy", {"version": 1})]


def test_publish_failure_is_an_upstream_error(upstream) -> None:
    url, _ = upstream
    with pytest.raises(UpstreamError, match="HTTP 500"):
        post_json(url + "/broken/aw/reload", {"path": "x"})
    with pytest.raises(UpstreamError, match=r"127\.0\.0\.1:9"):
        post_json("http://127.0.0.1:9/aw/reload", {"path": "x"}, timeout_s=2)


def test_a_reload_refused_while_the_server_restarts_is_sent_again() -> None:
    """`aw serve` restarting at the moment of a reload refused the connection, and the
    run stopped; the reload is tried again for ``reload_retry_s``, and arrives."""
    import socket
    import time

    with socket.socket() as probe:  # a free port, nothing listening on it yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    got: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    servers: list[ThreadingHTTPServer] = []

    def start_late() -> None:
        time.sleep(1.0)  # the restart
        servers.append(ThreadingHTTPServer(("127.0.0.1", port), Handler))
        servers[0].serve_forever()

    threading.Thread(target=start_late, daemon=True).start()
    try:
        post_json(f"http://127.0.0.1:{port}/aw/reload", {"path": "x"}, refused_retry_s=20)
    finally:
        if servers:
            servers[0].shutdown()
            servers[0].server_close()
    assert got == ["/aw/reload"]
    with pytest.raises(UpstreamError, match="Connection refused"):  # a server that stays down
        post_json(f"http://127.0.0.1:{port}/aw/reload", {"path": "x"}, refused_retry_s=0.2)
