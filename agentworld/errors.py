"""One error hierarchy so the CLI can turn any domain failure into one line and a stable exit code."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AgentWorldError(Exception):
    """Base of every error AgentWorld raises on purpose.

    ``exit_code`` is stable: scripts may rely on it.
    """

    exit_code = 1


class ConfigError(AgentWorldError):
    """A config file, CLI flag or environment value is wrong (names file/flag and key)."""

    exit_code = 2


class RecordError(AgentWorldError):
    """A record failed validation; ``field`` is the dotted path of the offending field."""

    exit_code = 3

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


class PoolError(AgentWorldError):
    """The pool is missing, unreadable, of an unknown version, or a write failed."""

    exit_code = 4


class PoolFormatError(PoolError):
    """The pool's format version is one this build does not know."""

    exit_code = 5


class CorruptDataError(PoolError):
    """A pool file does not match its hash or does not parse; ``path`` names it."""

    exit_code = 6

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class NotFoundError(AgentWorldError):
    """A step, trajectory, agent or dataset named by the user does not exist."""

    exit_code = 7


class UpstreamError(AgentWorldError):
    """An upstream model server failed, refused or timed out."""

    exit_code = 8


class MissingExtraError(AgentWorldError):
    """An optional dependency (torch, vllm, pyarrow, textual-serve...) is not installed."""

    exit_code = 9

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"this needs the '{package}' package: pip install 'agentworld[{extra}]'")


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """ "; did you mean 'upstream'?" when ``word`` is likely a typo of a known name (``upstrem``),
    else "": the tail of an error naming an unknown key."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""
