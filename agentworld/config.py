"""agents.toml and datasets.toml, parsed once at the edge into frozen dataclasses.

Every mistake (unknown key, wrong type, missing file, bad ``module:function``)
is a ConfigError naming the file, the agent or dataset, and the key.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import shlex
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agentworld.errors import ConfigError, NotFoundError, did_you_mean

# Keys of an agent table that describe its upstream; the proxy's config code
# (agentworld/proxy/config.py, UpstreamConfig.from_table) owns their meaning.
# ``params`` holds the sampling defaults the proxy applies to every request.
UPSTREAM_KEYS: Final = frozenset(
    {
        "upstream",
        "model",
        "api_key_env",
        "engine",
        "timeout_s",
        "connect_timeout_s",
        "params",
        "protocol_mode",
    }
)

AGENT_KINDS: Final = ("python", "command")
SOURCE_TYPES: Final = ("jsonl", "parquet", "reasoning-gym", "python")
SCORER_TYPES: Final = ("exact", "numeric", "regex", "verifier", "python")

# Keys of an agent table owned by the rollout subsystem (`aw run`); the proxy ignores them.
ROLLOUT_KEYS: Final = frozenset(
    {
        "kind",
        "description",
        "function",
        "command",
        "env",
        "cwd",
        "max_turns",
        "concurrency",
        "episode_timeout_s",
    }
)
_DATASET_KEYS: Final = frozenset(
    {"description", "source", "splits", "scorer", "default_split", "success_threshold"}
)
_SOURCE_KEYS: Final = {
    "jsonl": frozenset({"type", "fields"}),
    "parquet": frozenset({"type", "fields"}),
    "reasoning-gym": frozenset({"type", "task", "config"}),
    "python": frozenset({"type", "function", "fields"}),
}
_SCORER_KEYS: Final = {
    "exact": frozenset({"type", "ignore_case"}),
    "numeric": frozenset({"type", "tolerance", "relative_tolerance"}),
    "regex": frozenset({"type", "pattern", "ignore_case"}),
    "verifier": frozenset({"type"}),
    "python": frozenset({"type", "function"}),
}
_FIELD_KEYS: Final = frozenset({"id", "prompt", "answer"})


@dataclass(frozen=True)
class Where:
    """Where a value sits: the file and the entry, for error messages."""

    path: Path
    entry: str  # "agent 'math'" or "dataset 'gsm'"

    def error(self, key: str, problem: str) -> ConfigError:
        at = f"{self.path}: {self.entry}"
        return ConfigError(f"{at}: {key}: {problem}" if key else f"{at}: {problem}")


@dataclass(frozen=True)
class AgentConfig:
    """One agent of agents.toml.

    ``upstream`` is the raw table of proxy-owned keys (UPSTREAM_KEYS), validated
    by the proxy's config code, not here.
    """

    name: str
    kind: str  # "python" | "command"
    where: Where
    function: str | None = None  # python: "module:function"
    # command: argv with placeholders {python} {prompt} {task_id} {task_json} {answer_file} {base_url}
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    max_turns: int = 10
    concurrency: int = 8
    episode_timeout_s: float = 600.0
    description: str = ""
    upstream: Mapping[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> str:
        """The model name agents put in requests (the proxy may rewrite it)."""
        model = self.upstream.get("model")
        return model if isinstance(model, str) and model else "default"

    @property
    def sampling(self) -> dict[str, Any]:
        """Sampling defaults (the upstream's ``params``; the proxy applies them too)."""
        params = self.upstream.get("params")
        return dict(params) if isinstance(params, Mapping) else {}


@dataclass(frozen=True)
class SourceConfig:
    """Where a dataset's tasks come from."""

    type: str  # one of SOURCE_TYPES
    fields: Mapping[str, str] = field(default_factory=dict)  # id/prompt/answer -> column
    task: str | None = None  # reasoning-gym task name
    config: Mapping[str, Any] = field(default_factory=dict)  # reasoning-gym config kwargs
    function: str | None = None  # python source: "module:function"


@dataclass(frozen=True)
class SplitConfig:
    """One split: a file (jsonl/parquet), size+seed (reasoning-gym) or kwargs (python)."""

    name: str
    path: Path | None = None
    size: int | None = None
    seed: int | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScorerConfig:
    """How an answer is scored."""

    type: str  # one of SCORER_TYPES
    tolerance: float = 1e-6
    relative_tolerance: float = 0.0
    pattern: str | None = None
    ignore_case: bool = False
    function: str | None = None


@dataclass(frozen=True)
class DatasetConfig:
    """One dataset of datasets.toml."""

    name: str
    where: Where
    source: SourceConfig
    splits: Mapping[str, SplitConfig]
    scorer: ScorerConfig
    default_split: str
    success_threshold: float = 1.0
    description: str = ""

    def split(self, name: str | None) -> SplitConfig:
        """The named split (the default one when ``name`` is None)."""
        name = name or self.default_split
        if name not in self.splits:
            raise NotFoundError(
                f"{self.where.path}: dataset {self.name!r} has no split {name!r}"
                f" (splits: {', '.join(self.splits)})"
            )
        return self.splits[name]


# --- reading --------------------------------------------------------------------


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a file that cannot be read or parsed is a ConfigError naming it."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (run `aw init` to write an example)") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {_not_utf8(exc)}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _not_utf8(exc: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, by line (the codec's own message counts bytes)."""
    line = exc.object[: exc.start].count(b"\n") + 1
    bad = exc.object[exc.start : exc.start + 1].hex()
    return f"line {line}: byte 0x{bad} is not UTF-8 (TOML files are)"


def named_tables(path: Path, data: dict[str, Any], top: str) -> dict[str, Any]:
    """The ``[top.<name>]`` tables of a parsed file; any other top-level key is an error.

    Shared by `aw run` and `aw proxy --config`, so both report one file alike.
    """
    extra = set(data) - {top}
    if extra:
        raise ConfigError(
            f"{path}: unknown top-level key {sorted(extra)[0]!r} (expected [{top}.<name>])"
        )
    entries = data.get(top, {})
    if not isinstance(entries, dict):
        raise ConfigError(f"{path}: {top}: must be a table of tables")
    return entries


def _check_keys(
    where: Where, table: Mapping[str, Any], allowed: frozenset[str], prefix: str = ""
) -> None:
    for key in table:
        if key not in allowed:
            raise where.error(
                f"{prefix}{key}",
                f"unknown key{did_you_mean(key, allowed)} (allowed: {', '.join(sorted(allowed))})",
            )


def _typed(
    where: Where, table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any
) -> Any:
    if key not in table:
        return default
    value = table[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; a TOML `true` is never a number here.
    value_ok = False if isinstance(value, bool) and bool not in kinds else isinstance(value, kinds)
    if not value_ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise where.error(key, f"must be {names}, got {type(value).__name__}")
    return value


def _positive(where: Where, key: str, value: float) -> float:
    if value <= 0:
        raise where.error(key, f"must be > 0, got {value}")
    return value


def _callable_spec(where: Where, key: str, value: Any) -> str:
    if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
        raise where.error(key, f"must be 'module:function', got {value!r}")
    return value


def resolve_path(value: str, base: Path) -> Path:
    """A file path from a config: ``pkg:<package>/<rel>`` inside a package, else relative to ``base``."""
    if value.startswith("pkg:"):
        package, _, rel = value[4:].partition("/")
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):  # "pkg:" alone, or a package inside a missing one
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return Path(value)
        return Path(next(iter(spec.submodule_search_locations))) / rel
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def resolve_callable(spec: str, where: Where, key: str) -> Callable[..., Any]:
    """Import ``module:function``, looking in the config file's folder first, as Python
    looks beside a script; errors name the file, entry and key.

    The installed `aw` script does not put the current folder on sys.path (only
    `python -m` does), so without this an ``agent.py`` beside agents.toml did not import.
    """
    module_name, _, attr = spec.partition(":")
    folder = str(where.path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        problem = f"cannot import module {module_name!r}: {exc}"
        if exc.name is not None and f"{module_name}.".startswith(f"{exc.name}."):
            problem += (
                f"; looked in {folder} (the folder of {where.path.name}) and the installed packages"
            )
        raise where.error(key, problem) from None
    except Exception as exc:  # any import-time failure of user code is a config problem
        raise where.error(key, f"cannot import module {module_name!r}: {exc}") from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise where.error(key, f"module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise where.error(key, f"{spec} is not callable")
    return fn


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` returns an awaitable we should await on the loop."""
    # A callable object's coroutine __call__ counts too.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        type(fn).__call__ if not inspect.isroutine(fn) else None
    )


# --- agents.toml ----------------------------------------------------------------


def load_agents(path: Path) -> dict[str, AgentConfig]:
    """Parse agents.toml into AgentConfig by name."""
    path = Path(path)
    entries = named_tables(path, read_toml(path), "agents")
    return {name: _agent(path, name, table) for name, table in entries.items()}


def _agent(path: Path, name: str, table: Any) -> AgentConfig:
    where = Where(path, f"agent {name!r}")
    if not isinstance(table, dict):
        raise where.error("", "must be a table")
    _check_keys(where, table, ROLLOUT_KEYS | UPSTREAM_KEYS)
    kind = _typed(where, table, "kind", str, None)
    if kind not in AGENT_KINDS:
        raise where.error("kind", f"must be one of {', '.join(AGENT_KINDS)}, got {kind!r}")
    base = path.parent
    common: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "where": where,
        "description": _typed(where, table, "description", str, ""),
        "max_turns": int(_positive(where, "max_turns", _typed(where, table, "max_turns", int, 10))),
        "concurrency": int(
            _positive(where, "concurrency", _typed(where, table, "concurrency", int, 8))
        ),
        "episode_timeout_s": float(
            _positive(
                where,
                "episode_timeout_s",
                _typed(where, table, "episode_timeout_s", (int, float), 600.0),
            )
        ),
        "upstream": {k: table[k] for k in UPSTREAM_KEYS if k in table},
    }
    command_only = ("command", "env", "cwd")
    if kind == "python":
        for key in command_only:
            if key in table:
                raise where.error(key, "only for kind = 'command'")
        if "function" not in table:
            raise where.error("function", "missing (kind = 'python' needs 'module:function')")
        return AgentConfig(function=_callable_spec(where, "function", table["function"]), **common)
    if "function" in table:
        raise where.error("function", "only for kind = 'python'")
    raw = table.get("command")
    if isinstance(raw, str):
        argv = _split_command(where, raw)
    elif isinstance(raw, list) and all(isinstance(a, str) for a in raw):
        argv = tuple(raw)
    else:
        raise where.error("command", "missing or not a string / list of strings")
    if not argv:
        raise where.error("command", "is empty")
    env = _typed(where, table, "env", dict, {})
    for k, v in env.items():
        if not isinstance(v, str):
            raise where.error(f"env.{k}", "must be a string")
    cwd = _typed(where, table, "cwd", str, None)
    cwd_path = resolve_path(cwd, base) if cwd is not None else None
    if cwd_path is not None and not cwd_path.is_dir():
        raise where.error("cwd", f"no such folder: {cwd_path}")
    return AgentConfig(command=argv, env=dict(env), cwd=cwd_path, **common)


def _split_command(where: Where, raw: str) -> tuple[str, ...]:
    """A ``command`` string split as a shell would (quotes group words), never run by one."""
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:  # an unclosed quote, or a backslash at the very end
        raise where.error("command", f"cannot split {raw!r} into arguments: {exc}") from None


# --- datasets.toml --------------------------------------------------------------


def load_datasets(path: Path) -> dict[str, DatasetConfig]:
    """Parse datasets.toml into DatasetConfig by name (file paths checked to exist)."""
    path = Path(path)
    entries = named_tables(path, read_toml(path), "datasets")
    return {name: _dataset(path, name, table) for name, table in entries.items()}


def _dataset(path: Path, name: str, table: Any) -> DatasetConfig:
    where = Where(path, f"dataset {name!r}")
    if not isinstance(table, dict):
        raise where.error("", "must be a table")
    _check_keys(where, table, _DATASET_KEYS)
    source = _source(where, table.get("source"))
    splits_raw = table.get("splits")
    if not isinstance(splits_raw, dict) or not splits_raw:
        raise where.error("splits", "missing or empty (name at least one split)")
    splits = {
        split: _split(where, path.parent, source, split, value)
        for split, value in splits_raw.items()
    }
    default_split = _typed(where, table, "default_split", str, next(iter(splits)))
    if default_split not in splits:
        raise where.error("default_split", f"{default_split!r} is not one of the splits")
    scorer = _scorer(where, table.get("scorer"), source)
    threshold = float(_typed(where, table, "success_threshold", (int, float), 1.0))
    return DatasetConfig(
        name=name,
        where=where,
        source=source,
        splits=splits,
        scorer=scorer,
        default_split=default_split,
        success_threshold=threshold,
        description=_typed(where, table, "description", str, ""),
    )


def _source(where: Where, raw: Any) -> SourceConfig:
    if not isinstance(raw, dict):
        raise where.error("source", 'missing or not a table (e.g. source = { type = "jsonl" })')
    kind = raw.get("type")
    if kind not in SOURCE_TYPES:
        raise where.error("source.type", f"must be one of {', '.join(SOURCE_TYPES)}, got {kind!r}")
    _check_keys(where, raw, _SOURCE_KEYS[kind], "source.")
    fields = _typed(where, raw, "fields", dict, {})
    for k, v in fields.items():
        if k not in _FIELD_KEYS:
            raise where.error(
                f"source.fields.{k}", f"unknown key (allowed: {', '.join(sorted(_FIELD_KEYS))})"
            )
        if not isinstance(v, str):
            raise where.error(f"source.fields.{k}", "must be a column name")
    if kind == "reasoning-gym":
        task = raw.get("task")
        if not isinstance(task, str) or not task:
            raise where.error(
                "source.task", "missing (a reasoning-gym task name, e.g. 'basic_arithmetic')"
            )
        config = _typed(where, raw, "config", dict, {})
        return SourceConfig(type=kind, task=task, config=dict(config))
    if kind == "python":
        fn = _callable_spec(where, "source.function", raw.get("function"))
        return SourceConfig(type=kind, function=fn, fields=dict(fields))
    return SourceConfig(type=kind, fields=dict(fields))


def _split(where: Where, base: Path, source: SourceConfig, name: str, raw: Any) -> SplitConfig:
    key = f"splits.{name}"
    if source.type in ("jsonl", "parquet"):
        value = raw.get("path") if isinstance(raw, dict) else raw
        if isinstance(raw, dict):
            _check_keys(where, raw, frozenset({"path"}), key + ".")
        if not isinstance(value, str):
            raise where.error(key, "must be a file path (or { path = ... })")
        p = resolve_path(value, base)
        try:
            found = p.is_file()
        except OSError as exc:  # a name too long for the file system, say
            raise where.error(key, f"cannot be read: {exc.strerror or exc}") from None
        if not found:
            raise where.error(key, f"no such file: {p}")
        return SplitConfig(name=name, path=p)
    if not isinstance(raw, dict):
        raise where.error(key, "must be a table")
    if source.type == "reasoning-gym":
        _check_keys(where, raw, frozenset({"size", "seed"}), key + ".")
        size = _typed(where, raw, "size", int, None)
        seed = _typed(where, raw, "seed", int, None)
        if size is None or seed is None:
            raise where.error(key, "needs size and seed (e.g. { size = 100, seed = 1 })")
        _positive(where, key + ".size", size)
        return SplitConfig(name=name, size=size, seed=seed)
    return SplitConfig(name=name, kwargs=dict(raw))


def _scorer(where: Where, raw: Any, source: SourceConfig) -> ScorerConfig:
    if raw is None:
        raw = {"type": "verifier" if source.type == "reasoning-gym" else "exact"}
    elif isinstance(raw, str):
        raw = {"type": "python", "function": raw} if ":" in raw else {"type": raw}
    if not isinstance(raw, dict):
        raise where.error("scorer", "must be a name, 'module:function' or a table")
    kind = raw.get("type")
    if kind not in SCORER_TYPES:
        raise where.error(
            "scorer.type",
            f"must be one of {', '.join(SCORER_TYPES)} or 'module:function', got {kind!r}",
        )
    _check_keys(where, raw, _SCORER_KEYS[kind], "scorer.")
    if kind == "verifier" and source.type != "reasoning-gym":
        raise where.error(
            "scorer", "'verifier' needs a reasoning-gym source (its own score_answer)"
        )
    out: dict[str, Any] = {
        "type": kind,
        "ignore_case": _typed(where, raw, "ignore_case", bool, False),
    }
    if kind == "numeric":
        out["tolerance"] = float(_typed(where, raw, "tolerance", (int, float), 1e-6))
        out["relative_tolerance"] = float(
            _typed(where, raw, "relative_tolerance", (int, float), 0.0)
        )
        if out["tolerance"] < 0 or out["relative_tolerance"] < 0:
            raise where.error("scorer.tolerance", "must be >= 0")
    elif kind == "regex":
        pattern = raw.get("pattern")
        if not isinstance(pattern, str):
            raise where.error("scorer.pattern", "missing (a regular expression)")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise where.error("scorer.pattern", f"not a valid regular expression: {exc}") from None
        out["pattern"] = pattern
    elif kind == "python":
        out["function"] = _callable_spec(where, "scorer.function", raw.get("function"))
    return ScorerConfig(**out)


def find(configs: Mapping[str, Any], name: str, what: str, path: Path) -> Any:
    """Look up an agent or dataset by name, listing the known ones when absent."""
    if name not in configs:
        known = ", ".join(sorted(configs)) or "none"
        raise NotFoundError(
            f"{path}: no {what} {name!r}{did_you_mean(name, configs)} (known: {known})"
        )
    return configs[name]
