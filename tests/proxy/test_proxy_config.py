"""agents.toml upstream parsing, the `proxy` command's wiring, and import hygiene."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agentworld.errors import ConfigError
from agentworld.proxy.config import ProxyConfig, UpstreamConfig, load_agents, resolve_keys

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "agents.toml"
    p.write_text(text)
    return p


def test_agents_toml_upstreams(tmp_path):
    path = write(
        tmp_path,
        """
[agents.coder]
kind = "command"
command = "python agent.py"
upstream = ["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000"]
model = "Qwen/Qwen3-8B"
api_key_env = "CODER_KEY"
timeout_s = 120
params = { temperature = 0.7, max_tokens = 512 }

[agents.hosted]
upstream = "https://api.example.com"
engine = "openai"

[agents.local_only]
kind = "python"
function = "my.agent:run"
max_turns = 4
""",
    )
    agents = load_agents(path)
    assert set(agents) == {"coder", "hosted"}  # an agent without upstream uses the default
    coder = agents["coder"]
    assert coder.urls == ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
    assert coder.model == "Qwen/Qwen3-8B" and coder.timeout_s == 120.0
    assert dict(coder.params) == {"temperature": 0.7, "max_tokens": 512}
    assert agents["hosted"].engine == "openai" and agents["hosted"].connect_timeout_s == 10.0
    with pytest.raises(TypeError):
        coder.params["temperature"] = 1  # type: ignore[index]
    keys = resolve_keys(agents, None, {"CODER_KEY": "sk-1"})
    assert keys == {"coder": "sk-1"}
    with pytest.raises(ConfigError, match="CODER_KEY is not set"):
        resolve_keys(agents, None, {})


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ('upstream = "ftp://x"', "is not an http(s) URL"),
        ("upstream = 5", "expected a URL or a non-empty list"),
        ("upstream = [5]", "upstream URL is a string"),
        ('upstream = "http://x"\nengine = "tgi"', "engine: must be one of"),
        ('upstream = "http://x"\ntimeout_s = -1', "timeout_s: expected a positive"),
        ('upstream = "http://x"\nparams = { messages = [] }', "params.messages"),
        (
            'upstream = "http://x"\nupstreem = "typo"',
            "agents.a.upstreem: unknown key; did you mean 'upstream'?",
        ),
        # a key `aw run` does not take either: one list of an agent table's keys for both
        ('upstream = "http://x"\nmodule = "my.agent"', "agents.a.module: unknown key"),
    ],
)
def test_bad_agents_toml_names_file_and_key(tmp_path, table, needle):
    path = write(tmp_path, f"[agents.a]\n{table}\n")
    with pytest.raises(ConfigError) as info:
        load_agents(path)
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_from_table_for_the_rollout_loader():
    up = UpstreamConfig.from_table(
        {"upstream": "http://h:1", "kind": "anything"}, "agents.toml: agents.x"
    )
    assert up.urls == ("http://h:1",) and up.engine == "vllm"
    with pytest.raises(ConfigError, match=r"agents.toml: agents.x.upstream: required"):
        UpstreamConfig.from_table({"model": "m"}, "agents.toml: agents.x")


def test_not_toml(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_agents(write(tmp_path, "[agents\n"))


def test_a_file_aw_run_refuses_is_refused_alike(tmp_path):
    """`aw proxy --config` reads agents.toml as `aw run` does: same errors, same words."""
    path = write(tmp_path, '[agent.coder]\nupstream = "http://127.0.0.1:8000"\n')
    with pytest.raises(ConfigError) as info:
        load_agents(path)
    assert str(info.value) == f"{path}: unknown top-level key 'agent' (expected [agents.<name>])"
    with pytest.raises(ConfigError, match="is a folder, not a TOML file"):
        load_agents(tmp_path)
    path.write_bytes(b'[agents.a]\nupstream = "http://x"\ndescription = "\xff"\n')
    with pytest.raises(ConfigError, match=r"line 3: byte 0xff is not UTF-8"):
        load_agents(path)


def test_a_config_without_any_upstream_names_the_agents_that_lack_one(tmp_path):
    path = write(tmp_path, '[agents.coder]\nkind = "python"\nfunction = "m:f"\n')
    assert load_agents(path) == {}  # with --upstream, such an agent uses it
    with pytest.raises(ConfigError) as info:
        load_agents(path, need_upstream=True)
    assert str(info.value) == (
        f"{path}: no agent has an upstream (agents.coder: no `upstream` key);"
        " set upstream = URL there, or pass --upstream URL"
    )
    with pytest.raises(ConfigError, match=r"agents.toml: no \[agents.NAME\] table"):
        load_agents(write(tmp_path, "# nothing yet\n"), need_upstream=True)
    path = write(tmp_path, '[agents.a]\nupstream = "http://x"\n[agents.b]\nkind = "python"\n')
    assert set(load_agents(path, need_upstream=True)) == {"a"}


def test_the_command_reports_the_config_not_a_missing_flag(tmp_path):
    from agentworld.proxy.command import proxy

    app = typer.Typer()
    app.command("proxy")(proxy)
    app.command("noop")(lambda: None)
    path = write(tmp_path, '[agents.coder]\nkind = "python"\nfunction = "m:f"\n')
    args = ["proxy", "--pool", str(tmp_path / "p"), "--config", str(path), "--port", "0"]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ConfigError)
    assert "no agent has an upstream (agents.coder" in str(result.exception)


def test_proxy_config_needs_an_upstream():
    with pytest.raises(ConfigError, match="no upstream"):
        ProxyConfig()
    with pytest.raises(ConfigError, match="--durability"):
        ProxyConfig(default_upstream=UpstreamConfig.single("http://x"), durability="eventually")  # type: ignore[arg-type]


def test_command_registers_and_reports_bad_flags(tmp_path):
    from agentworld.proxy.command import proxy

    app = typer.Typer()
    app.command("proxy")(proxy)
    app.command("noop")(lambda: None)
    runner = CliRunner()
    result = runner.invoke(app, ["proxy", "--help"])
    assert result.exit_code == 0 and "--durability" in result.output
    result = runner.invoke(app, ["proxy", "--pool", str(tmp_path / "p"), "--upstream", "nope"])
    assert isinstance(result.exception, ConfigError) and "--upstream" in str(result.exception)


def test_command_module_imports_only_typer():
    code = "import sys, agentworld.proxy.command; print('aiohttp' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_secrets_stay_out_of_repr():
    cfg = ProxyConfig(
        default_upstream=UpstreamConfig.single("http://x"),
        api_keys={"default": "sk-zzz"},
        auth_token="tok-yyy",
    )
    assert "sk-zzz" not in repr(cfg) and "tok-yyy" not in repr(cfg)


def test_the_proxy_raises_a_low_open_files_limit_up_to_the_hard_one():
    """A run in its own process: the limit is per process, and a test must not move ours."""
    code = """
import resource
from agentworld.proxy.command import _raise_open_files_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
got = _raise_open_files_limit(4096)
now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
want = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
assert got == now == max(256, want), (got, now, hard)
assert _raise_open_files_limit(128) == now  # never lowered
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr


def test_without_flags_the_proxy_reads_the_agents_toml_where_it_runs(tmp_path, monkeypatch):
    """`aw init` then `aw proxy`: the folder's agents.toml (or $AW_AGENTS), as `aw run`
    finds it; --upstream alone still needs no config."""
    from agentworld.proxy.command import proxy

    app = typer.Typer()
    app.command("proxy")(proxy)
    app.command("noop")(lambda: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AW_AGENTS", raising=False)
    args = ["proxy", "--pool", str(tmp_path / "p"), "--port", "0"]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ConfigError)
    assert "no upstream" in str(result.exception) and "where agents.toml is" in str(
        result.exception
    )
    write(tmp_path, '[agents.coder]\nkind = "python"\nfunction = "m:f"\n')  # no upstream key
    result = CliRunner().invoke(app, args)
    assert "no agent has an upstream (agents.coder" in str(result.exception)  # it was read
    other = tmp_path / "elsewhere.toml"
    other.write_text('[agents.writer]\nkind = "python"\nfunction = "m:f"\n')
    monkeypatch.setenv("AW_AGENTS", str(other))
    result = CliRunner().invoke(app, args)
    assert "no agent has an upstream (agents.writer" in str(result.exception)
    (tmp_path / "agents.toml").write_text("not toml [")
    monkeypatch.delenv("AW_AGENTS")
    result = CliRunner().invoke(app, [*args, "--upstream", "nope"])
    # --upstream alone: the broken file is not read; the flag's own error is what stops it
    assert "'nope' is not an http(s) URL" in str(result.exception)
