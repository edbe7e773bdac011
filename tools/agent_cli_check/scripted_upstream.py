"""A scripted vLLM-shaped chat upstream for driving real coding CLIs through ``aw proxy``.

The first turn of a task (the last turn the user's, no tool result yet) calls one
tool: the shell tool the CLI offers (Claude Code's ``Bash``, Codex's
``exec_command``, pi's ``bash``, Qwen Code's ``run_shell_command``), told to write ``proof.txt``, or the tool ``--call`` names with
``--args``. After a tool result it answers in text. Answers come in vLLM's shapes
with token ids and log-probs (``agentworld.proxy.fake_upstream``), so the steps
the proxy records are exact-token steps.

    python tools/agent_cli_check/scripted_upstream.py --port 18001 [--call NAME --args JSON]
        [--log requests.jsonl]

``--call __`` calls the first namespaced tool (a Codex namespace's, ``NS__NAME``).
``--log`` appends every chat request the proxy sent, one JSON line each.
``--steps N`` has the model run N shell commands, one a turn (the first writes
``proof.txt``, the others append to ``steps.txt``), before it answers.
``--parallel`` makes the first turn two shell calls at once (the second appends to
``steps.txt``).
``--finish-command CMD`` has the model run CMD with the shell tool after the first tool
result, before it answers (mini-swe-agent ends on a command of its own).
``--agent TYPE`` has the session's first turn start a sub-agent: Claude Code's ``Agent`` tool
with that ``subagent_type`` (``general-purpose``, or ``fork``, which starts from the session so
far), or Codex's ``spawn_agent`` (``fork_context`` for ``fork``), then its ``wait_agent``; the
sub-agent runs the shell command, and the session answers once it is back.
``--reason TEXT`` has the model reason (vLLM's ``reasoning`` field) before each answer.
``--max-model-len N`` checks requests against an N-token context window as vLLM
does (a 400 in its words) and cuts answers at ``max_tokens``.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
from aiohttp import web

from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app

SHELLS = ("Bash", "bash", "exec_command", "shell", "shell_command", "run_shell_command")
COMMAND = "echo made-by-agent > proof.txt && cat proof.txt"
DONE = "Done."
SUB_TASK = "Sub-agent task: create proof.txt"
# The tools that start a sub-agent (Claude Code's, Codex's) and the one Codex waits for it with.
SPAWNERS = ("Agent", "multi_agent_v1__spawn_agent")
CODEX_WAIT = "multi_agent_v1__wait_agent"


def shell_arguments(fn: dict[str, Any], command: str = COMMAND) -> str:
    """Arguments that run ``command`` (write proof.txt), in the shape the shell tool's schema
    asks for."""
    props = (fn.get("parameters") or {}).get("properties") or {}
    out: dict[str, Any] = {}
    for key in ("command", "cmd"):
        if key in props:
            array = props[key].get("type") == "array"
            out[key] = ["bash", "-lc", command] if array else command
    if "description" in props:
        out["description"] = "Write proof.txt"
    return orjson.dumps(out).decode()


def _call(call_id: str, fn: dict[str, Any], arguments: str) -> dict[str, Any]:
    """One chat tool call of the tool ``fn``."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": fn["name"], "arguments": arguments},
    }


class Scripted(FakeUpstream):
    def __init__(
        self,
        call: str | None,
        arguments: str | None,
        log: str | None,
        reason: str | None = None,
        finish: str | None = None,
        steps: int = 1,
        parallel: bool = False,
        agent: str | None = None,
    ) -> None:
        super().__init__("scripted")
        self.call, self.arguments, self.reason, self.finish = call, arguments, reason, finish
        self.steps, self.parallel, self.agent = steps, parallel, agent
        self.log = open(log, "ab") if log else None  # noqa: SIM115 (open while serving)

    def _choices(self, body: dict[str, Any], chat: bool) -> list[dict[str, Any]]:
        if self.log is not None:
            self.log.write(orjson.dumps(body) + b"\n")
            self.log.flush()
        out = super()._choices(body, chat)
        if not chat:
            return out
        msgs = body["messages"]
        turns = [m for m in msgs if m.get("role") != "system"]
        results = sum(1 for m in msgs if m.get("role") == "tool")
        # --agent: the first turn of the session spawns a sub-agent for the task; the
        # sub-agent (a fresh conversation, or a fork holding the session so far) gets it as
        # its last user message, does it with the shell, and nobody spawns another.
        spawned = self.agent is not None and SUB_TASK in orjson.dumps(msgs).decode()
        asked = turns[-1] if turns and turns[-1].get("role") == "user" else None
        sub_agent = spawned and SUB_TASK in orjson.dumps(asked).decode()
        first_turn = asked is not None and (not results or sub_agent)
        # --steps N: a shell command for each of the first N turns (the last one a tool result).
        more = 0 < results < self.steps and turns[-1].get("role") == "tool"
        tools = [t["function"] for t in body.get("tools") or ()]
        if self.call == "__":
            wanted = (fn for fn in tools if "__" in fn["name"])
        elif self.call:
            wanted = (fn for fn in tools if fn["name"] == self.call)
        else:
            wanted = (fn for fn in tools if fn["name"] in SHELLS)
        fn = next(wanted, None)
        spawner = None
        if self.agent is not None and not spawned:
            spawner = next((f for f in tools if f["name"] in SPAWNERS), None)
        waiter = next((f for f in tools if f["name"] == CODEX_WAIT), None)
        spawn_result = msgs[-1].get("tool_call_id") == "call_script_agent"
        finished = any(m.get("tool_call_id") == "call_script_2" for m in msgs)
        if spawner is not None and first_turn:  # --agent: a sub-agent does the first turn's work
            if spawner["name"] == "Agent":  # Claude Code
                args = {"description": "Write the proof file", "prompt": SUB_TASK}
                args |= {"subagent_type": self.agent, "run_in_background": False}
            else:  # Codex: the sub-agent starts from the task alone, or from the whole thread
                args = {"message": SUB_TASK, "fork_context": self.agent == "fork"}
            calls = [_call("call_script_agent", spawner, orjson.dumps(args).decode())]
        elif waiter is not None and spawn_result:  # Codex's sub-agents run on: wait for it
            target = orjson.loads(msgs[-1]["content"])["agent_id"]
            args = {"targets": [target], "timeout_ms": 120_000}
            calls = [_call("call_script_wait", waiter, orjson.dumps(args).decode())]
        elif fn is None:
            calls = []
        elif first_turn:
            calls = [_call("call_script_1", fn, self.arguments or shell_arguments(fn))]
            if self.parallel:  # a second call in the same turn
                calls.append(
                    _call("call_script_1b", fn, shell_arguments(fn, "echo parallel >> steps.txt"))
                )
        elif more and self.call is None:
            step = f"echo step {results + 1} >> steps.txt"
            calls = [_call(f"call_script_step_{results + 1}", fn, shell_arguments(fn, step))]
        elif self.finish and not finished:
            calls = [_call("call_script_2", fn, shell_arguments(fn, self.finish))]
        else:
            calls = []
        for c in out:
            c["reasoning"] = self.reason
            c["calls"], c["content"] = (calls, None) if calls else ([], DONE)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--call", help="the tool to call on the first turn (its chat name)")
    ap.add_argument("--args", help="that call's arguments (JSON)")
    ap.add_argument("--log", help="append each chat request here (JSON lines)")
    ap.add_argument("--max-model-len", type=int, help="a context window, checked as vLLM does")
    ap.add_argument("--reason", help="reasoning the model streams before each answer")
    ap.add_argument("--finish-command", help="after the first tool result, run this with the shell")
    ap.add_argument("--steps", type=int, default=1, help="shell commands before the answer")
    ap.add_argument("--parallel", action="store_true", help="two shell calls in the first turn")
    ap.add_argument("--agent", help="the first turn spawns a sub-agent of this type (or fork)")
    a = ap.parse_args()
    scripted = Scripted(
        a.call, a.args, a.log, a.reason, a.finish_command, a.steps, a.parallel, a.agent
    )
    scripted.max_model_len = a.max_model_len
    app = make_fake_app(scripted)
    web.run_app(app, host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
