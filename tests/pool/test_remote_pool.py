"""Pools on object storage, against a local S3 server (moto): read, write by sealing, push/pull,
labels, fsck, and credentials that never reach the pool or stderr."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentworld.errors import PoolError
from agentworld.pool import Pool, Selection
from agentworld.pool.opener import open_pool
from agentworld.pool.remote_store import RemoteStore, remote_url
from agentworld.pool.remote_sync import ShardUploader, pull, push
from tests import s3_fixture
from tests.s3_fixture import SECRET
from tests.synth import conversation_step, fill_pool

pytest.importorskip("obstore", reason="obstore is not installed: pip install 'agentworld[remote]'")

s3_endpoint, s3_url = s3_fixture.s3_endpoint, s3_fixture.s3_url  # the fixtures, used here
ROOT = Path(__file__).resolve().parents[2]


def aw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentworld.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _all_bytes(*roots: Path) -> bytes:
    return b"".join(p.read_bytes() for r in roots for p in r.rglob("*") if p.is_file())


def test_remote_url_survives_a_path_typed_option() -> None:
    assert remote_url(Path("s3://bucket/pre/fix/")) == "s3://bucket/pre/fix"
    assert remote_url("gs://b/p") == "gs://b/p"
    assert remote_url(Path("file:///tmp/x")) == "file:///tmp/x"
    assert remote_url("pool") is None
    assert remote_url("./s3-data") is None


def test_push_then_list_reads_rows_objects_not_shards(pool: Pool, s3_url: str) -> None:
    ids = fill_pool(pool, trajectories=4, steps=3)
    report = push(pool.layout, s3_url)
    assert report.shards_copied == 1 and report.rows_objects == 1
    assert push(pool.layout, s3_url).shards_copied == 0  # idempotent

    remote = open_pool(s3_url)
    idx = remote.index()
    assert idx.stats()["trajectories"] == 4
    assert idx.stats()["steps"] == 12
    # Listing cost the rows objects only: no shard was downloaded yet.
    assert not list((remote.root / "objects").rglob("*.jsonl.zst"))
    t = remote.get_trajectory(ids[1])
    assert [s["id"] for s in t.steps] == [s["id"] for s in pool.get_trajectory(ids[1]).steps]
    assert len(list((remote.root / "objects").rglob("*.jsonl.zst"))) == 1  # fetched, by hash
    assert sorted(x.id for x in remote.iter_trajectories()) == sorted(ids)


def test_open_refuses_a_prefix_that_is_not_a_pool(s3_url: str) -> None:
    with pytest.raises(PoolError, match="not a pool"):
        open_pool(s3_url)
    with pytest.raises(PoolError, match="local disk"):
        Pool.create(s3_url)


def test_pool_open_names_the_opener_of_a_url(s3_url: str) -> None:
    # The base class does not import its remote subclass (no import cycle): a URL given
    # to it says where URLs are opened.
    with pytest.raises(PoolError, match="open_pool"):
        Pool.open(s3_url)


def test_writer_uploads_each_shard_when_sealed(tmp_path: Path, s3_url: str) -> None:
    local = Pool.create(tmp_path / "node")
    uploader = ShardUploader(local.layout, s3_url, interval_s=0.05).start()
    with local.writer(name="node") as w:
        w.append(conversation_step("tr_a", 0))
    # The journal is sealed on close; the uploader's next tick sends it without a stop.
    store = RemoteStore(s3_url)
    for _ in range(100):
        if store.list("objects/"):
            break
        import time

        time.sleep(0.05)
    assert len(store.list("objects/")) == 1
    with local.writer(name="node") as w:
        w.append(conversation_step("tr_b", 0))
    uploader.stop()
    assert uploader.last_error is None
    assert len(store.list("objects/")) == 2
    assert open_pool(s3_url).index().stats()["trajectories"] == 2


def test_pull_copies_what_is_missing_verified(pool: Pool, tmp_path: Path, s3_url: str) -> None:
    fill_pool(pool, trajectories=2)
    pool.labels.set(["trajectory:tr_0000"], {"quality": "good"}, author="ann")
    push(pool.layout, s3_url)
    dest = Pool.create(tmp_path / "copy")
    first = pull(dest.layout, s3_url)
    assert (first.shards_copied, first.label_objects) == (1, 1)
    assert pull(dest.layout, s3_url).shards_copied == 0
    assert dest.get_trajectory("tr_0000").labels["quality"] == "good"

    # A shard whose bytes do not match its name is refused, never installed.
    store = RemoteStore(s3_url)
    bogus = "0" * 64
    store.put_if_absent(f"objects/00/{bogus}.jsonl.zst", b"not what the name says")
    with pytest.raises(PoolError, match="does not match"):
        pull(dest.layout, s3_url)
    assert not dest.layout.shard_path(bogus).exists()


def test_labels_go_up_as_new_objects_never_rewritten(pool: Pool, s3_url: str) -> None:
    fill_pool(pool, trajectories=2)
    push(pool.layout, s3_url)
    remote = open_pool(s3_url)
    store = RemoteStore(s3_url)
    remote.labels.set(["trajectory:tr_0000"], {"quality": "bad"}, author="bob")
    first = store.list("labels/")
    assert len(first) == 1
    before = {k: store.get_bytes(k) for k in first}
    remote.labels.set(["trajectory:tr_0000"], {"quality": "good"}, author="bob")
    after = store.list("labels/")
    assert len(after) == 2 and {k: store.get_bytes(k) for k in first} == before
    # A reader elsewhere (a fresh mirror) sees the last label win.
    other = remote_pool_fresh(s3_url, pool.root.parent / "elsewhere")
    assert other.get_trajectory("tr_0000").labels["quality"] == "good"
    # And a push of a pool that pulled them does not upload them again.
    assert push(pool.layout, s3_url).label_objects == 0


def remote_pool_fresh(url: str, cache: Path) -> Pool:
    from agentworld.pool.remote_pool import RemotePool

    return RemotePool.open_url(url, cache_root=cache)


@pytest.mark.slow  # seven `aw` processes
def test_reading_commands_take_a_url_and_fsck_names_a_bad_object(pool: Pool, s3_url: str) -> None:
    fill_pool(pool, trajectories=3)
    push(pool.layout, s3_url)
    stats = aw("pool", "stats", "--pool", s3_url, "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["trajectories"] == 3
    ls = aw("pool", "ls", "--pool", s3_url, "--json")
    assert ls.returncode == 0, ls.stderr
    assert len(json.loads(ls.stdout)) == 3
    show = aw("pool", "show", "tr_0001", "--pool", s3_url, "--json")
    assert show.returncode == 0, show.stderr
    label = aw("pool", "label", "tr_0001", "--quality", "good", "--pool", s3_url)
    assert label.returncode == 0, label.stderr
    ok = aw("pool", "fsck", "--pool", s3_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    RemoteStore(s3_url).put_if_absent(f"objects/ab/{'ab' * 32}.jsonl.zst", b"garbage")
    bad = aw("pool", "fsck", "--pool", s3_url)
    assert bad.returncode == 6
    assert f"{'ab' * 32}.jsonl.zst" in bad.stdout
    for res in (stats, ls, show, label, ok, bad):
        assert SECRET not in res.stdout + res.stderr


def test_push_pull_cli_and_credentials_stay_out(pool: Pool, tmp_path: Path, s3_url: str) -> None:
    fill_pool(pool, trajectories=2)
    pushed = aw("pool", "push", s3_url, "--pool", str(pool.root))
    assert pushed.returncode == 0, pushed.stderr
    assert "1 shard" in pushed.stderr
    pulled = aw("pool", "pull", s3_url, "--pool", str(tmp_path / "copy"))
    assert pulled.returncode == 0, pulled.stderr
    assert Pool.open(tmp_path / "copy").index().stats()["trajectories"] == 2
    # A store that refuses the request: one line naming the URL, no secret.
    denied = aw("pool", "push", "s3://no-such-bucket-aw/p", "--pool", str(pool.root))
    assert denied.returncode == 4
    assert "no-such-bucket-aw" in denied.stderr
    for res in (pushed, pulled, denied):
        assert SECRET not in res.stdout + res.stderr
    home = Path(os.environ["AW_HOME"])
    assert SECRET.encode() not in _all_bytes(pool.root, tmp_path / "copy", home)


def test_remote_named_in_pool_toml(pool: Pool, s3_url: str) -> None:
    from agentworld.pool.remote_sync import remote_of

    assert remote_of(pool.layout) is None
    with open(pool.layout.meta, "a") as f:
        f.write(f'remote = "{s3_url}"\n')
    assert remote_of(pool.layout) == s3_url
    with open(pool.layout.meta, "a") as f:
        f.write("[x]\n")
    data = pool.layout.meta.read_text().replace(f'remote = "{s3_url}"', "remote = 3")
    pool.layout.meta.write_text(data)
    with pytest.raises(PoolError, match="remote"):
        remote_of(pool.layout)


def test_shard_cache_is_named_by_hash(pool: Pool, s3_url: str) -> None:
    fill_pool(pool, trajectories=1)
    push(pool.layout, s3_url)
    remote = open_pool(s3_url)
    remote.fetch_all()
    for p in (remote.root / "objects").rglob("*.jsonl.zst"):
        assert hashlib.sha256(p.read_bytes()).hexdigest() == p.name[:64]


@pytest.mark.slow  # two `aw export` processes
def test_export_and_tui_read_a_remote_pool(pool: Pool, tmp_path: Path, s3_url: str) -> None:
    fill_pool(pool, trajectories=2)
    push(pool.layout, s3_url)
    out = tmp_path / "sft.jsonl"
    res = aw("export", "-f", "openai-jsonl", "-o", str(out), "--pool", s3_url)
    assert res.returncode == 0, res.stderr
    local = tmp_path / "local.jsonl"
    assert (
        aw("export", "-f", "openai-jsonl", "-o", str(local), "--pool", str(pool.root)).returncode
        == 0
    )
    assert out.read_text() == local.read_text() and out.read_text()

    from agentworld.pool.remote_pool import RemotePool
    from agentworld.tui.data import PoolData, TuiConfig, open_pool

    remote = open_pool(s3_url)
    assert isinstance(remote, RemotePool)
    data = PoolData(remote, TuiConfig(s3_url, "ann"))
    data.refresh()
    assert len(data.trajectory_ids(Selection())) == 2
    # The TUI's refresher lists the store again: a shard pushed later shows up.
    with pool.writer() as w:
        w.append(conversation_step("tr_late", 0))
    push(pool.layout, s3_url)
    remote.layout.mirror.sync(max_age_s=0)
    data.refresh()
    assert "tr_late" in data.trajectory_ids(Selection())
    assert data.trajectory("tr_late").steps[0]["trajectory"] == "tr_late"
    data.close()


def test_diff_takes_a_url(pool: Pool, tmp_path: Path, s3_url: str) -> None:
    from typer.testing import CliRunner

    from agentworld.cli import app

    fill_pool(pool, trajectories=2)
    push(pool.layout, s3_url)
    with pool.writer() as w:
        w.append(conversation_step("tr_new", 0))
    res = CliRunner().invoke(app, ["pool", "diff", s3_url, str(pool.root), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["added_trajectories"] == ["tr_new"] and not d["removed_trajectories"]


@pytest.mark.slow  # two `aw proxy` processes
def test_proxy_remote_flag_fails_fast_on_a_wrong_store(tmp_path: Path, s3_url: str) -> None:
    bad = aw(
        "proxy", "--pool", str(tmp_path / "pool"), "--remote", "s3://no-such-bucket-aw/p",
        "-u", "http://127.0.0.1:9", "--port", "0",
    )  # fmt: skip
    assert bad.returncode == 4
    assert "no-such-bucket-aw" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert SECRET not in bad.stderr
    wrong = aw(
        "proxy",
        "--pool",
        str(tmp_path / "pool"),
        "--remote",
        "/srv/pool",
        "-u",
        "http://127.0.0.1:9",
        "--port",
        "0",  # not the default 4000, which a proxy on this machine may hold
    )
    assert wrong.returncode == 2 and "--remote" in wrong.stderr


def test_a_label_object_that_does_not_match_its_name_is_refused(pool: Pool, s3_url: str) -> None:
    fill_pool(pool, trajectories=1)
    push(pool.layout, s3_url)
    RemoteStore(s3_url).put_if_absent("labels/eve/2026-12-01.0123456789abcdef.jsonl", b"{}\n")
    with pytest.raises(PoolError, match="does not match the hash"):
        open_pool(s3_url)


async def test_the_tui_lists_a_remote_pool(pool: Pool, s3_url: str) -> None:
    pytest.importorskip("textual")
    from agentworld.tui.app import make_app
    from agentworld.tui.data import TuiConfig
    from agentworld.tui.trajectories import TrajectoriesScreen
    from tests.tui.test_screens import until

    fill_pool(pool, trajectories=3)
    push(pool.layout, s3_url)
    app = make_app(
        TuiConfig(str(Path(s3_url)), "ann"), start="trajectories"
    )  # as `aw tui` passes it
    async with app.run_test(size=(120, 40)) as pilot:

        def listed() -> int | None:
            screen = pilot.app.screen
            if isinstance(screen, TrajectoriesScreen) and screen.page:
                return screen.page.total
            return None

        await until(pilot, lambda: listed() == 3)
        assert pilot.app.title == f"AgentWorld · {s3_url}"  # not its cache folder's hash


def test_stats_of_a_remote_pool_names_its_url_not_the_cache(pool: Pool, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentworld.cli import app

    fill_pool(pool, trajectories=1)
    url = (tmp_path / "store").as_uri()
    push(pool.layout, url)
    res = CliRunner().invoke(
        app, ["pool", "stats", "-p", url], env={"AW_HOME": str(tmp_path / "home"), "COLUMNS": "400"}
    )
    assert res.exit_code == 0, res.output
    (line,) = [line for line in res.stdout.splitlines() if line.startswith("pool ")]
    assert line.split() == ["pool", url]


def test_an_export_manifest_names_a_remote_pool_by_its_url(pool: Pool, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentworld.cli import app

    fill_pool(pool, trajectories=2)
    url = (tmp_path / "store").as_uri()
    push(pool.layout, url)
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(
        app,
        ["export", "-p", url, "-f", "openai-jsonl", "-o", str(out)],
        env={"AW_HOME": str(tmp_path / "home")},
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert manifest["pool"] == url  # where the data came from, not the local cache
