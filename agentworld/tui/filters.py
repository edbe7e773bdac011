"""The filter line of the trajectory list: ``agent:x status:done reward:0.5..1 words`` → Selection."""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import replace
from datetime import datetime

from agentworld.errors import ConfigError
from agentworld.pool import Selection
from agentworld.pool.selection import TRAJECTORY_STATUSES

FILTER_HELP = (
    "agent:A dataset:D split:S task:T group:G status:done,failed reward:0.5..1 "
    "policy:2..3 label:good|bad|unsure|any|none|trainable tag:X since:1h until:2026-01-31 "
    "and free words (searched in messages)"
)
# The filter line's placeholder: the most used terms first, as a narrow terminal cuts the
# end (80 columns show about 75 characters); `?` lists them all (FILTER_HELP).
FILTER_PLACEHOLDER = "filter: words label:good reward:0..1 agent:A since:1h … (? lists all)"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _range(value: str, key: str, cast: type) -> tuple[float | None, float | None]:
    lo, sep, hi = value.partition("..")
    try:
        if not sep:
            v = cast(value)
            return v, v
        return (cast(lo) if lo else None), (cast(hi) if hi else None)
    except ValueError:
        raise ConfigError(f"filter {key}: expected N or LO..HI, got {value!r}") from None


def _when(value: str, key: str, now: float) -> float:
    m = _DURATION.match(value)
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ConfigError(
            f"filter {key}: expected an age like 30m, 2h, 1d or an ISO date, got {value!r}"
        ) from None


def parse_filter(text: str, *, now: float | None = None) -> Selection:
    """Parse the filter line; a bad term raises ConfigError naming it."""
    now = time.time() if now is None else now
    try:
        terms = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"filter: {exc}") from None
    sel = Selection()
    words: list[str] = []
    for term in terms:
        key, sep, value = term.partition(":")
        if not sep or key not in _KEYS:
            words.append(term)
            continue
        if not value:
            raise ConfigError(f"filter {key}: empty value")
        sel = _KEYS[key](sel, value, now)
    if words:
        sel = replace(sel, text=" ".join(words))
    return sel


def _status(sel: Selection, value: str, now: float) -> Selection:
    wanted = tuple(v for v in value.split(",") if v)
    bad = [s for s in wanted if s not in TRAJECTORY_STATUSES]
    if bad:
        raise ConfigError(
            f"filter status: unknown {bad[0]!r}; known: {', '.join(TRAJECTORY_STATUSES)}"
        )
    return replace(sel, status=wanted)


def _reward(sel: Selection, value: str, now: float) -> Selection:
    lo, hi = _range(value, "reward", float)
    return replace(sel, min_reward=lo, max_reward=hi)


def _policy(sel: Selection, value: str, now: float) -> Selection:
    lo, hi = _range(value, "policy", int)
    return replace(sel, min_policy=lo, max_policy=hi)


def _label(sel: Selection, value: str, now: float) -> Selection:
    qualities: list[str] = []
    for v in value.split(","):
        if v in ("good", "bad", "unsure"):
            qualities.append(v)
        elif v == "any":
            sel = replace(sel, labelled=True)
        elif v == "none":
            sel = replace(sel, labelled=False)
        elif v == "trainable":
            sel = replace(sel, trainable_only=True)
        else:
            raise ConfigError(
                f"filter label: unknown {v!r}; known: good, bad, unsure, any, none, trainable"
            )
    return replace(sel, quality=tuple(qualities)) if qualities else sel


def _field(name: str):  # type: ignore[no-untyped-def]
    def setter(sel: Selection, value: str, now: float) -> Selection:
        return replace(sel, **{name: value})

    return setter


_KEYS = {
    "agent": _field("agent"),
    "dataset": _field("dataset"),
    "split": _field("split"),
    "task": _field("task"),
    "group": _field("group"),
    "tag": _field("tag"),
    "status": _status,
    "reward": _reward,
    "policy": _policy,
    "label": _label,
    "since": lambda sel, v, now: replace(sel, since=_when(v, "since", now)),
    "until": lambda sel, v, now: replace(sel, until=_when(v, "until", now)),
}

FILTER_KEYS = tuple(_KEYS)
