"""The proxy's configuration: per-agent upstreams from agents.toml and the server's own settings.

Parsed once at the edge into frozen dataclasses; API keys are read from the
environment here and nowhere else, and are never written to the pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

# An ``[agents.NAME]`` table's keys: the upstream's, whose meaning this module owns, and
# the rollout subsystem's (`aw run`), which the proxy ignores. One list of each, and one
# reader of the file, so a file one command takes the other takes too.
from agentworld.config import ROLLOUT_KEYS, UPSTREAM_KEYS, named_tables, read_toml
from agentworld.errors import ConfigError, did_you_mean
from agentworld.server_url import server_base

Engine = Literal["vllm", "openai"]
ENGINES: tuple[str, ...] = ("vllm", "openai")
PROTOCOL_MODES: tuple[str, ...] = ("translate", "passthrough")

DEFAULT_AGENT = "default"


def _check_url(url: Any, where: str) -> str:
    if not isinstance(url, str):
        raise ConfigError(f"{where}: an upstream URL is a string, got {type(url).__name__}")
    # Both "http://h:p" and "http://h:p/v1" are taken: requests are sent to <base>/v1/...
    return server_base(url, where, "http://127.0.0.1:8000/v1")


def _number(table: Mapping[str, Any], key: str, default: float, where: str) -> float:
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise ConfigError(f"{where}.{key}: expected a positive number of seconds, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class UpstreamConfig:
    """Where one agent's LLM calls go, and how."""

    urls: tuple[str, ...]
    model: str | None = None  # sent instead of the agent's own model name when set
    api_key_env: str | None = None  # name of the environment variable holding the key
    engine: Engine = "vllm"  # "vllm": ask for token ids and log-probs; "openai": messages only
    timeout_s: float = 600.0  # longest wait for the next byte from the upstream
    connect_timeout_s: float = 10.0
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Anthropic Messages / Responses calls: "translate" them for a chat-completions upstream
    # (the default), or "passthrough" to an upstream that speaks the same protocol.
    protocol_mode: str | None = None

    def __post_init__(self) -> None:
        if not self.urls:
            raise ConfigError("an upstream needs at least one URL")
        if not isinstance(self.params, MappingProxyType):
            object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @classmethod
    def single(
        cls, url: str, *, engine: Engine = "vllm", where: str = "--upstream"
    ) -> UpstreamConfig:
        """An upstream from one URL (``aw proxy --upstream URL``)."""
        return cls(urls=(_check_url(url, where),), engine=engine)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> UpstreamConfig:
        """Parse the upstream keys of an ``[agents.NAME]`` table; other keys are the caller's.

        ``where`` names the table in errors, e.g. ``"agents.toml: agents.coder"``.
        """
        raw = table.get("upstream")
        if raw is None:
            raise ConfigError(f"{where}.upstream: required (a URL or a list of URLs)")
        urls = [raw] if isinstance(raw, str) else raw
        if not isinstance(urls, list) or not urls:
            raise ConfigError(f"{where}.upstream: expected a URL or a non-empty list of URLs")
        checked = tuple(_check_url(u, f"{where}.upstream") for u in urls)
        model = table.get("model")
        if model is not None and (not isinstance(model, str) or not model):
            raise ConfigError(f"{where}.model: expected a model name (string)")
        key_env = table.get("api_key_env")
        if key_env is not None and (not isinstance(key_env, str) or not key_env):
            raise ConfigError(f"{where}.api_key_env: expected an environment variable name")
        engine = table.get("engine", "vllm")
        if engine not in ENGINES:
            raise ConfigError(f"{where}.engine: must be one of {list(ENGINES)}, got {engine!r}")
        params = table.get("params", {})
        if not isinstance(params, dict):
            raise ConfigError(f"{where}.params: expected a table of sampling defaults")
        for reserved in ("messages", "prompt", "stream", "model"):
            if reserved in params:
                raise ConfigError(f"{where}.params.{reserved}: not a sampling parameter")
        mode = table.get("protocol_mode")
        if mode is not None and mode not in PROTOCOL_MODES:
            raise ConfigError(
                f"{where}.protocol_mode: must be one of {list(PROTOCOL_MODES)}, got {mode!r}"
            )
        return cls(
            urls=checked,
            model=model,
            api_key_env=key_env,
            engine=engine,
            timeout_s=_number(table, "timeout_s", 600.0, where),
            connect_timeout_s=_number(table, "connect_timeout_s", 10.0, where),
            params=MappingProxyType(dict(params)),
            protocol_mode=mode,
        )

    def resolve_api_key(self, environ: Mapping[str, str], where: str) -> str | None:
        """Read the API key from the environment (called once, at startup)."""
        if self.api_key_env is None:
            return None
        key = environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                f"{where}.api_key_env: environment variable {self.api_key_env} is not set"
            )
        return key


def load_agents(path: Path, *, need_upstream: bool = False) -> dict[str, UpstreamConfig]:
    """Upstreams of every agent in an agents.toml that has one.

    The file is read as `aw run` reads it: a top-level key other than ``[agents.NAME]``,
    and a key outside the upstream and rollout sets, are errors naming file and key.
    ``need_upstream`` (no ``--upstream`` to fall back on): a file in which no agent
    has an upstream is an error naming the agents that lack one.
    """
    tables = named_tables(path, read_toml(path), "agents")
    out: dict[str, UpstreamConfig] = {}
    for name, table in tables.items():
        where = f"{path}: agents.{name}"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table")
        unknown = sorted(set(table) - UPSTREAM_KEYS - ROLLOUT_KEYS)
        if unknown:
            key = unknown[0]
            known = UPSTREAM_KEYS | ROLLOUT_KEYS
            raise ConfigError(f"{where}.{key}: unknown key{did_you_mean(key, known)}")
        if "upstream" in table:
            out[name] = UpstreamConfig.from_table(table, where)
    if need_upstream and not out:
        raise _no_upstream_in(path, sorted(tables))
    return out


def _no_upstream_in(path: Path, names: list[str]) -> ConfigError:
    """Why a config file gives the proxy nowhere to send calls, and the two ways out."""
    if not names:
        return ConfigError(
            f"{path}: no [agents.NAME] table; add one with upstream = URL, or pass --upstream URL"
        )
    listed = ", ".join(f"agents.{name}" for name in names)
    return ConfigError(
        f"{path}: no agent has an upstream ({listed}: no `upstream` key); "
        "set upstream = URL there, or pass --upstream URL"
    )


@dataclass(frozen=True)
class ProxyConfig:
    """Everything the proxy app needs, resolved at the edge."""

    agents: Mapping[str, UpstreamConfig] = field(default_factory=dict)
    default_upstream: UpstreamConfig | None = None
    # agent name -> key; kept out of repr so a logged config never shows it
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    durability: Literal["batched", "strict"] = "batched"
    commit_interval_s: float = 0.05  # the loss window of batched durability
    # While the pool cannot be written: refuse recording calls (503) or serve them
    # unrecorded (batched only); write_health.py.
    on_write_failure: Literal["refuse", "serve"] = "refuse"
    auth_token: str | None = field(default=None, repr=False)
    idle_timeout_s: float = 900.0
    # How long the proxy waits on an agent: for a request on an open connection, for
    # the next bytes of a request body, for it to read its response (agent_conn.py).
    client_timeout_s: float = 60.0
    max_body_bytes: int = 32 * 1024 * 1024
    max_response_bytes: int = 64 * 1024 * 1024
    max_open_trajectories: int = 100_000
    sweep_interval_s: float | None = (
        None  # how often idle trajectories are looked for (None: derived)
    )
    log_requests: bool = False
    loop_check_interval_s: float = 0.5  # how often the event loop's lateness is measured
    # Started inside another program (`aw run`, `aw demo`) on that program's event loop: its
    # lateness counts that program's work too (the agents, an engine), so the log says so,
    # once a process, rather than send its operator to add proxies.
    in_process: bool = False
    # The version stamped from the start; None: the one this proxy kept in the pool before
    # a restart (policy_store.py), else 0.
    policy_version: int | None = None
    restore: bool = True  # rebuild open trajectories from the pool index on start
    # Proxies sharing one pool each take a name: steps carry it (metadata.proxy), and a
    # restarted proxy takes back only the open trajectories whose last step it served.
    instance: str | None = None

    def __post_init__(self) -> None:
        if self.durability not in ("batched", "strict"):
            raise ConfigError(f"--durability: 'batched' or 'strict', got {self.durability!r}")
        if self.on_write_failure not in ("refuse", "serve"):
            raise ConfigError(
                f"--on-write-failure: 'refuse' or 'serve', got {self.on_write_failure!r}"
            )
        if self.on_write_failure == "serve" and self.durability == "strict":
            raise ConfigError(
                "--on-write-failure serve needs --durability batched: strict mode answers"
                " only what it stored"
            )
        if self.idle_timeout_s <= 0:
            raise ConfigError("--idle-timeout-s: must be positive")
        if not self.client_timeout_s > 0:
            raise ConfigError("--client-timeout-s: must be positive")
        if self.loop_check_interval_s <= 0:
            raise ConfigError("loop_check_interval_s: must be positive")
        if self.instance is not None and (
            not self.instance
            or len(self.instance) > 128
            or not self.instance.isprintable()
            or self.instance != self.instance.strip()
        ):
            raise ConfigError(
                f"--instance: 1-128 printable characters without surrounding spaces,"
                f" got {self.instance!r}"
            )
        if self.policy_version is not None and (
            isinstance(self.policy_version, bool)
            or not isinstance(self.policy_version, int)
            or self.policy_version < 0
        ):
            raise ConfigError(f"--policy-version: an integer >= 0, got {self.policy_version!r}")
        if self.max_body_bytes < 1024:
            raise ConfigError("--max-body-bytes: must be at least 1024")
        if self.auth_token is not None and not self.auth_token:
            raise ConfigError("--auth-token: must not be empty")
        if not self.agents and self.default_upstream is None:
            raise ConfigError(
                "no upstream: pass --upstream URL or --config agents.toml"
                " (or run where agents.toml is)"
            )

    def upstream_for(self, agent: str) -> tuple[UpstreamConfig, str | None] | None:
        """The upstream and API key serving ``agent`` (its own, else the default)."""
        if agent in self.agents:
            return self.agents[agent], self.api_keys.get(agent)
        if self.default_upstream is not None:
            return self.default_upstream, self.api_keys.get(DEFAULT_AGENT)
        if len(self.agents) == 1:
            ((name, up),) = self.agents.items()
            return up, self.api_keys.get(name)
        return None


def resolve_keys(
    agents: Mapping[str, UpstreamConfig],
    default: UpstreamConfig | None,
    environ: Mapping[str, str],
    where: str = "agents.toml",
) -> dict[str, str]:
    """API keys for every upstream that names an environment variable."""
    keys: dict[str, str] = {}
    for name, up in agents.items():
        key = up.resolve_api_key(environ, f"{where}: agents.{name}")
        if key:
            keys[name] = key
    if default is not None:
        key = default.resolve_api_key(environ, "--upstream")
        if key:
            keys[DEFAULT_AGENT] = key
    return keys
