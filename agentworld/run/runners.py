"""Run one episode of an agent against a trajectory's base URL: white-box Python or any program.

A runner never raises for what the agent does: crashes, bad exits and
timeouts come back as an Outcome with a status, so the run goes on.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.config import AgentConfig, is_async, resolve_callable
from agentworld.errors import MissingExtraError
from agentworld.run.lifecycle import TrajectoryHandle
from agentworld.run.tasks import Task

DUMMY_API_KEY = "aw-no-key"  # the proxy holds the real upstream key; SDKs insist on one
_KILL_GRACE_S = 2.0
_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class AgentSettings:
    """What a Python agent gets besides the task and the client."""

    model: str
    sampling: Mapping[str, Any]
    max_turns: int
    trajectory: str
    base_url: str


@dataclass
class Outcome:
    """How an episode ended, from the agent's side."""

    status: str  # "done" | "failed" | "timeout" | "cancelled"
    answer: str | None = None
    error: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": kind, "message": message[-_MAX_ERROR_CHARS:]}


# AgentWorld's own files, the standard library's and installed packages' (each a folder).
_NOT_USER_CODE = tuple(
    os.path.join(p, "")
    for p in (str(Path(__file__).resolve().parents[1]), sys.prefix, sys.base_prefix)
)


def raised_at(exc: BaseException) -> str:
    """`` (at my_agent.py:12)``: the innermost frame of the user's own code, or "".

    The message alone ("'NoneType' object is not subscriptable") does not say which
    line of an agent or scorer to fix; frames in AgentWorld, the standard library and
    installed packages (the openai SDK raising for a call) are passed over.
    """
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename.startswith(_NOT_USER_CODE) and not frame.filename.startswith("<"):
            return f" (at {frame.filename}:{frame.lineno})"
    return ""


def _answer_of(value: Any) -> tuple[str | None, dict[str, Any]]:
    """A Python agent returns the answer text, None, or {"answer": ..., "metadata": {...}}."""
    if value is None or isinstance(value, str):
        return value, {}
    if isinstance(value, Mapping):
        answer = value.get("answer")
        meta = value.get("metadata") or {}
        return (None if answer is None else str(answer)), dict(meta) if isinstance(
            meta, Mapping
        ) else {}
    return str(value), {}


class PythonRunner:
    """A white-box agent: ``module:function(task, client[, settings])``.

    An ``async def`` gets an ``openai.AsyncOpenAI``; a plain function gets an
    ``openai.OpenAI`` and runs in a daemon thread (so a hung one cannot block exit).
    """

    def __init__(self, agent: AgentConfig, *, api_key: str | None = None) -> None:
        self.agent = agent
        self.fn = resolve_callable(agent.function or "", agent.where, "function")
        self.is_async = is_async(self.fn)
        self.wants_settings = _accepts_three(self.fn)
        self.api_key = api_key or DUMMY_API_KEY
        try:
            import openai
        except ImportError:
            raise MissingExtraError("openai", "run") from None
        self._openai = openai

    def _args(self, task: Task, client: Any, handle: TrajectoryHandle) -> tuple[Any, ...]:
        if not self.wants_settings:
            return (task, client)
        settings = AgentSettings(
            model=self.agent.model,
            sampling=dict(self.agent.sampling),
            max_turns=self.agent.max_turns,
            trajectory=handle.id,
            base_url=handle.base_url,
        )
        return (task, client, settings)

    async def run(self, task: Task, handle: TrajectoryHandle) -> Outcome:
        timeout_s = self.agent.episode_timeout_s
        try:
            if self.is_async:
                client = self._openai.AsyncOpenAI(
                    base_url=handle.base_url, api_key=self.api_key, timeout=timeout_s
                )
                try:
                    value = await asyncio.wait_for(
                        self.fn(*self._args(task, client, handle)), timeout_s
                    )
                finally:
                    await client.close()
            else:
                value = await self._run_in_thread(task, handle, timeout_s)
        except TimeoutError:
            return Outcome("timeout", error=_error("timeout", f"agent ran past {timeout_s:g} s"))
        except Exception as exc:  # the agent's own bug: record it, keep running
            message = (str(exc) or repr(exc)) + raised_at(exc)
            return Outcome("failed", error=_error(type(exc).__name__, message))
        answer, meta = _answer_of(value)
        return Outcome("done", answer=answer, metadata=meta)

    async def _run_in_thread(self, task: Task, handle: TrajectoryHandle, timeout_s: float) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        client = self._openai.OpenAI(
            base_url=handle.base_url, api_key=self.api_key, timeout=timeout_s
        )

        def settle(ok: bool, value: Any) -> None:
            if not done.done():
                (done.set_result if ok else done.set_exception)(value)

        def work() -> None:
            try:
                ok, value = True, self.fn(*self._args(task, client, handle))
            except BaseException as exc:
                ok, value = False, exc
            try:
                loop.call_soon_threadsafe(settle, ok, value)
            except RuntimeError:
                pass  # the loop is gone: the episode timed out and the run ended

        threading.Thread(target=work, name=f"agent-{handle.id}", daemon=True).start()
        try:
            return await asyncio.wait_for(done, timeout_s)
        finally:
            # Closing the client makes a thread stuck in a request fail soon.
            client.close()


def _accepts_three(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3


class CommandRunner:
    """A black-box agent: any program, one process per episode.

    It finds the proxy in OPENAI_BASE_URL / ANTHROPIC_BASE_URL, reads the task
    as JSON on stdin (or from its argv template) and prints its answer on
    stdout, or writes it to AW_ANSWER_FILE (which then wins over stdout).
    """

    def __init__(
        self, agent: AgentConfig, *, base_env: Mapping[str, str], api_key: str | None = None
    ) -> None:
        self.agent = agent
        self.base_env = dict(base_env)
        self.api_key = api_key or DUMMY_API_KEY

    def _env(self, task: Task, handle: TrajectoryHandle, answer_file: Path) -> dict[str, str]:
        env = {**self.base_env, **self.agent.env}
        env.update(
            {
                "OPENAI_BASE_URL": handle.base_url,
                "OPENAI_API_KEY": self.api_key,
                "ANTHROPIC_BASE_URL": handle.anthropic_base_url,
                "ANTHROPIC_API_KEY": self.api_key,
                "AW_TRAJECTORY": handle.id,
                "AW_TASK_ID": task.id,
                "AW_MODEL": self.agent.model,
                "AW_MAX_TURNS": str(self.agent.max_turns),
                "AW_SAMPLING": json.dumps(dict(self.agent.sampling)),
                "AW_ANSWER_FILE": str(answer_file),
            }
        )
        return env

    def _argv(self, task: Task, handle: TrajectoryHandle, answer_file: Path) -> list[str]:
        # Plain replacement of known placeholders only: argv may hold other braces (JSON).
        values = {
            "{python}": sys.executable,
            "{prompt}": task.prompt,
            "{task_id}": task.id,
            "{task_json}": json.dumps(task.public(), ensure_ascii=False),
            "{answer_file}": str(answer_file),
            "{base_url}": handle.base_url,
        }
        out = []
        for arg in self.agent.command:
            for k, v in values.items():
                arg = arg.replace(k, v)
            out.append(arg)
        return out

    async def run(self, task: Task, handle: TrajectoryHandle) -> Outcome:
        timeout_s = self.agent.episode_timeout_s
        with tempfile.TemporaryDirectory(prefix="aw-episode-") as tmp:
            answer_file = Path(tmp) / "answer.txt"
            argv = self._argv(task, handle, answer_file)
            # Always offered on stdin; a program that takes its task from argv ignores it.
            stdin_data = json.dumps(task.public(), ensure_ascii=False).encode()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=self.agent.cwd,
                    env=self._env(task, handle, answer_file),
                    # Own process group: Ctrl-C reaches `aw run`, which stops agents itself.
                    start_new_session=True,
                )
            except OSError as exc:
                return Outcome("failed", error=_error("spawn", f"cannot start {argv[0]!r}: {exc}"))
            try:
                stdout, stderr = await asyncio.wait_for(proc.communicate(stdin_data), timeout_s)
            except TimeoutError:
                await _kill(proc)
                return Outcome(
                    "timeout", error=_error("timeout", f"agent ran past {timeout_s:g} s")
                )
            except BaseException:
                await _kill(proc)
                raise
            err_text = stderr.decode("utf-8", "replace").strip()
            if proc.returncode != 0:
                return Outcome(
                    "failed",
                    error=_error("exit", f"exit status {proc.returncode}: {err_text}"),
                )
            if answer_file.exists():  # the agent chose to write AW_ANSWER_FILE
                answer = answer_file.read_text(encoding="utf-8", errors="replace").strip()
            else:
                answer = stdout.decode("utf-8", "replace").strip()
            return Outcome("done", answer=answer)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Stop the agent's whole process group: TERM, then KILL after a grace period."""
    if proc.returncode is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, _KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), wait_s)
            return
        except TimeoutError:
            continue


def make_runner(
    agent: AgentConfig, *, base_env: Mapping[str, str], api_key: str | None = None
) -> PythonRunner | CommandRunner:
    """The runner for an agent's kind (resolving its function now, so config errors come first)."""
    if agent.kind == "python":
        return PythonRunner(agent, api_key=api_key)
    return CommandRunner(agent, base_env=base_env, api_key=api_key)
