"""Saved filters: the list's filter line under a name, kept in the pool's ``filters.toml``.

They live in the pool, not the user's config, so a team that versions its pool with
git shares them, and a filter names what is in the pool it was written for (readers
of the pool format ignore the file, see docs/pool-format.md). What is kept is the
filter line as typed: relative times (``since:1h``) count from when it is recalled.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from agentworld.config import read_toml
from agentworld.errors import ConfigError
from agentworld.pool.layout import FILTERS_FILE
from agentworld.tui.filters import parse_filter

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a bare TOML key: no quoting to get wrong
_SAVED_LINE = re.compile(r"^\s*([A-Za-z0-9_-]{1,64})\s*=")  # one saved filter, as written
_HEADER = (
    "# Saved filters of `aw tui` (the trajectory list's filter line, by name).\n"
    "# Recall one with `f` in the list, `Filter: NAME` in ctrl+p, or `aw tui --filter NAME`.\n"
)


class SavedFilters:
    """The saved filters of one pool: read fresh on every use (another curator, or a
    `git pull`, may have changed the file), written whole and atomically."""

    def __init__(self, pool_root: str | Path) -> None:
        self.path = Path(pool_root) / FILTERS_FILE

    def load(self) -> dict[str, str]:
        """Name → filter line; none when the file is absent. A file that is not valid
        TOML, holds other keys, or a filter line that does not parse is a ConfigError
        naming the file (and the filter)."""
        if not self.path.exists():
            return {}
        try:
            data = read_toml(self.path)
        except ConfigError:
            self._refuse_a_name_saved_twice()
            raise
        extra = sorted(set(data) - {"filters"})
        if extra:
            raise ConfigError(
                f"{self.path}: unknown top-level key {extra[0]!r} (expected [filters])"
            )
        table = data.get("filters", {})
        if not isinstance(table, dict):
            raise ConfigError(f'{self.path}: filters: expected a table of name = "filter line"')
        out: dict[str, str] = {}
        for name, text in table.items():
            if not isinstance(text, str):
                raise ConfigError(
                    f"{self.path}: filters.{name}: expected a filter line (a string), "
                    f"got {type(text).__name__}"
                )
            try:
                parse_filter(text)
            except ConfigError as exc:
                raise ConfigError(f"{self.path}: filters.{name}: {exc}") from None
            out[name] = text
        return out

    def _refuse_a_name_saved_twice(self) -> None:
        """A ConfigError naming the filter saved twice, if that is why the file does not
        parse: git's union merge (``aw init``'s .gitattributes) keeps both lines when two
        clones saved one name differently, which TOML refuses as a redefined key."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return
        first: dict[str, int] = {}
        for n, line in enumerate(lines, 1):
            m = _SAVED_LINE.match(line)
            if m is None:
                continue
            name = m.group(1)
            if name in first:
                raise ConfigError(
                    f"{self.path}:{n}: filter {name!r} is saved twice (also line "
                    f"{first[name]}; two clones saved it differently and git kept both): "
                    "delete the line you do not want"
                )
            first[name] = n

    def get(self, name: str) -> str:
        """The filter line saved as ``name``; a ConfigError listing the names if none is."""
        saved = self.load()
        if name not in saved:
            known = ", ".join(sorted(saved)) or "none saved yet"
            raise ConfigError(f"no saved filter {name!r} in {self.path} (saved: {known})")
        return saved[name]

    def save(self, name: str, text: str) -> None:
        """Save ``text`` as ``name`` (replacing one of that name). A bad name or filter
        line is refused; so is a save over a file that does not read, which would lose
        what it holds."""
        if not _NAME.match(name):
            raise ConfigError(
                f"filter name {name!r}: use letters, digits, '-' and '_' (at most 64)"
            )
        parse_filter(text)  # refuse what could never be recalled
        saved = {**self.load(), name: text}
        body = _HEADER + "\n[filters]\n"
        # A JSON string without ASCII escaping is a TOML basic string (control
        # characters come out as \\uXXXX escapes, which TOML reads alike).
        body += "".join(
            f"{k} = {json.dumps(v, ensure_ascii=False)}\n" for k, v in sorted(saved.items())
        )
        tmp = self.path.with_name(f".{FILTERS_FILE}.{os.getpid()}.tmp")
        tmp.write_text(body, encoding="utf-8")
        os.replace(tmp, self.path)
