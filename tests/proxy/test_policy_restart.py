"""A restarted proxy stamps the policy version it had: kept in the pool, per proxy, and a
--policy-version given at start still wins (policy_store.py)."""

from __future__ import annotations

import errno
import json
import logging
from typing import Any

import aiohttp
import openai
import pytest
import typer
from typer.testing import CliRunner

from agentworld.errors import ConfigError, CorruptDataError
from agentworld.proxy import policy_store
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from agentworld.proxy.inprocess import ProxyServer
from tests.proxy.conftest import steps_of


async def ask(proxy: ProxyServer, text: str) -> None:
    c = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    await c.close()


async def set_version(proxy: ProxyServer, version: int) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/aw/policy", json={"version": version}) as r,
    ):
        assert r.status == 200
        return await r.json()


async def policy_of(proxy: ProxyServer) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/aw/policy") as r:
        assert r.status == 200
        return await r.json()


def stamped(pool: Any) -> dict[str, int]:
    """Each step's policy version, by the text the agent sent."""
    return {s["request"]["messages"][0]["content"]: s["policy_version"] for s in steps_of(pool)}


async def test_a_restarted_proxy_stamps_the_version_the_trainer_set(make_proxy, pool):
    """In front of plain vLLM (no X-AW-Policy-Version), the trainer's last publish is the
    only source: a restart came back at 0 until the next one."""
    first = await make_proxy()
    await ask(first, "before")
    posted = await set_version(first, 7)
    await ask(first, "at 7")
    await first.stop()

    second = await make_proxy()
    await ask(second, "after the restart")
    got = await policy_of(second)
    await second.stop()
    assert stamped(pool) == {"before": 0, "at 7": 7, "after the restart": 7}
    assert posted == {"policy_version": 7, "saved": True}
    assert got["policy_version"] == 7 and got["source"] == "restored"
    assert got["file"] == str(pool.root / "state" / "policy" / "proxy.json")
    assert got["restored"]["policy_version"] == 7
    assert got["restored"]["set_by"] == "POST /aw/policy"


async def test_a_version_set_backwards_survives_a_restart(make_proxy, pool):
    """A trainer's catch-up takes the proxy back (9 -> 3): the restart keeps 3, not the
    highest version its steps carry."""
    first = await make_proxy()
    await set_version(first, 9)
    await ask(first, "at 9")
    await set_version(first, 3)
    await first.stop()

    second = await make_proxy()
    await ask(second, "after the restart")
    await second.stop()
    assert stamped(pool) == {"at 9": 9, "after the restart": 3}


async def test_a_version_an_answer_moved_survives_a_restart(make_proxy, pool, fake):
    """`aw serve` says its version in a header; the proxy's version it moved is kept too, for
    the calls before the first answer after a restart (and for GET /aw/policy)."""
    first = await make_proxy()
    fake[0].policy_version = 5
    await ask(first, "from v5")
    await first.stop()
    fake[0].policy_version = None  # say, plain vLLM now

    second = await make_proxy()
    await ask(second, "after the restart")
    got = await policy_of(second)
    await second.stop()
    assert stamped(pool) == {"from v5": 5, "after the restart": 5}
    assert got["restored"]["set_by"] == "X-AW-Policy-Version"


async def test_a_version_given_at_start_wins_and_is_kept(make_proxy, pool):
    first = await make_proxy()
    await set_version(first, 7)
    await first.stop()

    second = await make_proxy(policy_version=2)  # --policy-version 2
    await ask(second, "configured")
    got = await policy_of(second)
    await second.stop()

    third = await make_proxy()
    await ask(third, "restarted without it")
    await third.stop()
    assert stamped(pool) == {"configured": 2, "restarted without it": 2}
    assert got["policy_version"] == 2 and got["source"] == "--policy-version"


async def test_proxies_sharing_a_pool_keep_their_own_versions(make_proxy, pool):
    """Each named proxy has its own file (a name is any printable text: encoded); an unnamed
    proxy on the same pool has none of theirs."""
    a, b = await make_proxy(instance="a"), await make_proxy(instance="b/../x y")
    await set_version(a, 4)
    await set_version(b, 8)
    await a.stop()
    await b.stop()
    files = sorted(p.name for p in (pool.root / "state" / "policy").iterdir())
    assert files == ["proxy@a.json", "proxy@b%2F..%2Fx%20y.json"]

    b2, a2 = await make_proxy(instance="b/../x y"), await make_proxy(instance="a")
    unnamed = await make_proxy()
    await ask(a2, "a")
    await ask(b2, "b")
    await ask(unnamed, "unnamed")
    got = await policy_of(unnamed)
    for p in (a2, b2, unnamed):
        await p.stop()
    assert stamped(pool) == {"a": 4, "b": 8, "unnamed": 0}
    assert got["source"] == "default" and got["restored"] is None


async def test_a_damaged_policy_file_stops_the_start_naming_it(fake, pool):
    path = pool.root / "state" / "policy" / "proxy.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"policy_version": "seven"}')
    config = ProxyConfig(default_upstream=UpstreamConfig.single(fake[1]))
    with pytest.raises(CorruptDataError, match="--policy-version N") as got:
        ProxyServer(config, pool)
    assert str(path) in str(got.value) and "policy_version" in str(got.value)
    path.write_text("{not json")
    with pytest.raises(CorruptDataError, match="not valid JSON"):
        ProxyServer(config, pool)
    path.write_text('{"policy_version": 3, "proxy": "b"}')  # copied from proxy@b.json
    with pytest.raises(CorruptDataError, match="holds the version of proxy 'b', not of None"):
        ProxyServer(config, pool)
    # The way out the error names: a version given at start, which is then kept.
    config = ProxyConfig(default_upstream=UpstreamConfig.single(fake[1]), policy_version=6)
    async with ProxyServer(config, pool):
        pass
    assert json.loads(path.read_text())["policy_version"] == 6


async def test_a_version_the_pool_cannot_keep_still_holds(make_proxy, pool, monkeypatch, caplog):
    """A failed write (a full disk) does not refuse the trainer's publish: the version holds
    in memory, the answer and GET /aw/policy say it is not kept, and the log says why."""
    caplog.set_level(logging.ERROR, logger="agentworld.proxy")
    proxy = await make_proxy()
    real_write = policy_store.write_atomic

    def full(path: Any, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(policy_store, "write_atomic", full)
    assert await set_version(proxy, 4) == {"policy_version": 4, "saved": False}
    await ask(proxy, "at 4")
    got = await policy_of(proxy)
    assert got["policy_version"] == 4 and "No space left" in got["save_error"]
    assert any("cannot keep policy version 4" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(policy_store, "write_atomic", real_write)
    assert await set_version(proxy, 5) == {"policy_version": 5, "saved": True}
    assert (await policy_of(proxy))["save_error"] is None
    await proxy.stop()
    assert stamped(pool) == {"at 4": 4}


def test_a_policy_version_below_zero_is_refused():
    with pytest.raises(ConfigError, match="--policy-version"):
        ProxyConfig(default_upstream=UpstreamConfig.single("http://x"), policy_version=-1)


def test_aw_proxy_says_the_version_it_starts_with_and_whence(tmp_path, monkeypatch):
    from agentworld.proxy import command, gc_pauses
    from agentworld.proxy.front import site

    def serve(app, socks, *args: Any, **kw: Any) -> None:  # started, then stopped at once
        for sock in socks:
            sock.close()

    monkeypatch.setattr(site, "run", serve)
    monkeypatch.setattr(gc_pauses.GcPauses, "install", lambda self: None)
    monkeypatch.setattr(command, "_raise_open_files_limit", lambda: 0)  # per process: not ours
    app = typer.Typer()
    app.command("proxy")(command.proxy)
    app.command("noop")(lambda: None)
    pool = tmp_path / "pool"
    args = ["proxy", "--pool", str(pool), "--upstream", "http://127.0.0.1:9", "--port", "0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "aw proxy: policy version 0: none stored yet" in result.stderr

    path = pool / "state" / "policy" / "proxy.json"
    path.parent.mkdir(parents=True)
    stored = {"policy_version": 7, "set_by": "POST /aw/policy", "set_at": "T", "proxy": None}
    path.write_text(json.dumps(stored))
    result = CliRunner().invoke(app, args)
    assert f"aw proxy: policy version 7, restored from {path}" in result.stderr
    assert "(set by POST /aw/policy at T)" in result.stderr
    result = CliRunner().invoke(app, [*args, "--policy-version", "3"])
    assert "aw proxy: policy version 3, from --policy-version" in result.stderr
