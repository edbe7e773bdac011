#!/usr/bin/env bash
# Drive the real Claude Code, Codex, opencode, pi and Qwen Code CLIs, mini-swe-agent and the OpenAI Agents SDK,
# unmodified,
# through `aw proxy` onto a
# scripted chat upstream (Messages and Responses translated, chat completions as they are),
# and check that they ran the tools it called and that the pool holds their trajectories with
# exact tokens. Needs node/npm and the npm registry.
#
#   bash tools/agent_cli_check/run.sh            # the latest versions
#   CLAUDE_CODE_VERSION=2.1.328 CODEX_VERSION=0.169.0 OPENCODE_VERSION=1.18.33 PI_VERSION=0.73.1 \
#     QWEN_CODE_VERSION=0.24.4 OPENAI_AGENTS_VERSION=0.24.0 MINI_SWE_AGENT_VERSION=2.4.6 \
#     bash tools/agent_cli_check/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
aw=${AW:-$root/.venv/bin/aw}
work=$(mktemp -d "${TMPDIR:-/tmp}/aw-agent-cli.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
echo "work dir: $work"

npm install --prefix "$work/npm" --no-audit --no-fund --loglevel=error \
  "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION:-latest}" "@openai/codex@${CODEX_VERSION:-latest}" \
  "opencode-ai@${OPENCODE_VERSION:-latest}" "@mariozechner/pi-coding-agent@${PI_VERSION:-latest}" \
  "@qwen-code/qwen-code@${QWEN_CODE_VERSION:-latest}"
claude="$work/npm/node_modules/.bin/claude"
codex="$work/npm/node_modules/.bin/codex"
opencode="$work/npm/node_modules/.bin/opencode"
pi="$work/npm/node_modules/.bin/pi"
qwen="$work/npm/node_modules/.bin/qwen"
"$py" -m pip install -q --target "$work/py" "openai-agents${OPENAI_AGENTS_VERSION:+==$OPENAI_AGENTS_VERSION}"
"$py" -m pip install -q --target "$work/py-mini" \
  "mini-swe-agent${MINI_SWE_AGENT_VERSION:+==$MINI_SWE_AGENT_VERSION}"
echo "claude $("$claude" --version)  |  $("$codex" --version)  |  opencode $("$opencode" --version)"\
  "  |  pi $("$pi" --version 2>&1)  |  qwen $("$qwen" --version)"

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up_port=$(free_port)
proxy_port=$(free_port)
# One agent per CLI (the path /a/NAME/ names it), all onto the scripted upstream.
for agent in claude-code codex opencode openai-agents pi qwen-code mini-swe-agent; do
  printf '[agents.%s]\nupstream = "http://127.0.0.1:%s"\nmodel = "scripted"\n\n' "$agent" "$up_port"
done > "$work/agents.toml"

wait_for() { for _ in $(seq 100); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer at $1"; return 1; }
"$aw" proxy --config "$work/agents.toml" --port "$proxy_port" --pool "$work/pool" > "$work/proxy.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$proxy_port/aw/health"

upstream() {  # (re)start the scripted upstream with these arguments
  if [ -n "${up_pid:-}" ]; then kill "$up_pid"; wait "$up_pid" 2>/dev/null || true; fi
  "$py" "$here/scripted_upstream.py" --port "$up_port" --log "$work/requests.jsonl" "$@" \
    > "$work/upstream.log" 2>&1 &
  up_pid=$!
  pids+=("$up_pid")
  wait_for "http://127.0.0.1:$up_port/v1/models"
}

run_claude() {  # name, prompt
  mkdir -p "$work/$1" "$work/home-claude"
  (cd "$work/$1" && HOME="$work/home-claude" IS_SANDBOX=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    ANTHROPIC_BASE_URL="http://127.0.0.1:$proxy_port/a/claude-code" ANTHROPIC_AUTH_TOKEN=unused \
    timeout 180 "$claude" -p "$2" --output-format json --dangerously-skip-permissions \
    > "$work/$1.json" 2> "$work/$1.err")
  "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print("  result:", d["result"]); sys.exit(d["is_error"])' "$work/$1.json"
}

run_codex() {  # name, prompt[, the model Codex believes it talks to: its tools follow it]
  mkdir -p "$work/$1" "$work/home-codex/.codex"
  cat > "$work/home-codex/.codex/config.toml" <<TOML
model = "${3:-scripted}"
model_provider = "agentworld"

[model_providers.agentworld]
name = "AgentWorld proxy"
base_url = "http://127.0.0.1:$proxy_port/a/codex/v1"
wire_api = "responses"
env_key = "AW_CHECK_KEY"
TOML
  (cd "$work/$1" && HOME="$work/home-codex" AW_CHECK_KEY=unused timeout 180 "$codex" exec \
    --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$2" \
    > "$work/$1.out" 2> "$work/$1.err")
  echo "  result: $(tail -n 1 "$work/$1.out")"
}

run_opencode() {  # name, prompt
  mkdir -p "$work/$1" "$work/home-opencode"
  cat > "$work/$1/opencode.json" <<JSON
{
  "provider": {
    "aw": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "AgentWorld proxy",
      "options": {"baseURL": "http://127.0.0.1:$proxy_port/a/opencode/v1", "apiKey": "unused"},
      "models": {"scripted": {"name": "scripted", "tool_call": true}}
    }
  },
  "model": "aw/scripted"
}
JSON
  (cd "$work/$1" && HOME="$work/home-opencode" timeout 180 "$opencode" run "$2" \
    > "$work/$1.out" 2> "$work/$1.err")
  echo "  result: $(grep -v '^\s*$' "$work/$1.out" | head -n 1)"
}

run_pi() {  # name, pi's API for the proxy (openai-completions | openai-responses | anthropic-messages)
  mkdir -p "$work/$1" "$work/home-pi"
  local base="http://127.0.0.1:$proxy_port/a/pi"
  [ "$2" = anthropic-messages ] || base="$base/v1"
  cat > "$work/home-pi/models.json" <<JSON
{"providers": {"aw": {"baseUrl": "$base", "api": "$2", "apiKey": "unused",
  "models": [{"id": "scripted", "reasoning": true}]}}}
JSON
  (cd "$work/$1" && PI_CODING_AGENT_DIR="$work/home-pi" PI_OFFLINE=1 timeout 180 "$pi" \
    -p "Create proof.txt" --provider aw --model scripted --thinking high --no-session \
    > "$work/$1.out" 2> "$work/$1.err")
  echo "  result: $(tail -n 1 "$work/$1.out")"
}

run_qwen() {  # name, prompt
  mkdir -p "$work/$1" "$work/home-qwen"
  (cd "$work/$1" && HOME="$work/home-qwen" OPENAI_BASE_URL="http://127.0.0.1:$proxy_port/a/qwen-code/v1" \
    OPENAI_API_KEY=unused OPENAI_MODEL=scripted QWEN_CODE_SUPPRESS_YOLO_WARNING=1 timeout 180 \
    "$qwen" "$2" --yolo --auth-type openai > "$work/$1.out" 2> "$work/$1.err")
  echo "  result: $(tail -n 1 "$work/$1.out")"
}

run_mini() {  # name, task: mini-swe-agent (through LiteLLM) until it submits
  mkdir -p "$work/$1" "$work/home-mini"
  (cd "$work/$1" && HOME="$work/home-mini" PYTHONPATH="$work/py-mini" MSWEA_CONFIGURED=true \
    OPENAI_API_KEY=unused timeout 180 "$py" "$work/py-mini/bin/mini" -m openai/scripted -t "$2" \
    -y --exit-immediately -l 0 -c mini.yaml -c model.cost_tracking=ignore_errors \
    -c "model.model_kwargs.api_base=http://127.0.0.1:$proxy_port/a/mini-swe-agent/v1" \
    -o "$work/$1.traj.json" > "$work/$1.out" 2> "$work/$1.err")
  "$py" -c 'import json,sys; s=json.load(open(sys.argv[1]))["info"]["exit_status"]; print("  result:", s); sys.exit(s != "Submitted")' "$work/$1.traj.json"
}

# The model's reasoning as the agent sent it back on its next call (the chat upstream's last request).
reasoning_came_back() {
  "$py" -c '
import json, sys
last = json.loads(open(sys.argv[1]).readlines()[-1])
said = [m for m in last["messages"] if m["role"] == "assistant"][-1]
got = said.get("reasoning", said.get("reasoning_content"))  # vLLM takes either name
assert got == sys.argv[2], f"the reasoning did not come back as reasoning: {said}"
print("  the reasoning came back as reasoning, not as something the model said")
' "$work/requests.jsonl" "$1"
}

proof() { grep -qx made-by-agent "$work/$1/proof.txt" && echo "  ran the shell tool: $1/proof.txt written"; }
last_tools() { "$py" -c 'import json,sys; print(" ".join(t["function"]["name"] for t in json.loads(open(sys.argv[1]).readlines()[-1]).get("tools", [])))' "$work/requests.jsonl"; }

echo "== Claude Code: shell tool"
upstream
run_claude claude-shell "Create proof.txt"
proof claude-shell

echo "== Claude Code: ToolSearch loads a deferred tool"
upstream --call ToolSearch --args '{"query": "select:WebFetch"}'
run_claude claude-search "Fetch example.com"
last_tools | grep -qw WebFetch && echo "  the model got WebFetch once ToolSearch loaded it"

echo "== Claude Code: a 40,000-token context window (it asks for 32,000+ output tokens)"
upstream --max-model-len 40000
run_claude claude-window "Create proof.txt"
proof claude-window
"$py" -c '
import json, sys
sent = [json.loads(line)["max_tokens"] for line in open(sys.argv[1])][-2:]
print(f"  max_tokens sent after the engine refused the asked one: {sent}")
' "$work/requests.jsonl"

echo "== Codex: shell tool"
upstream
run_codex codex-shell "Create proof.txt"
proof codex-shell

echo "== Codex: a namespaced tool"
upstream --call __ --args '{}'
run_codex codex-namespace "Use a namespaced tool"
"$py" -c '
import json, sys
last = json.loads(open(sys.argv[1]).readlines()[-1])
names = [c["function"]["name"] for m in last["messages"] for c in m.get("tool_calls") or ()]
assert any("__" in n for n in names), f"no namespaced call came back from Codex: {names}"
print(f"  Codex ran {names[-1]} and gave it back with its namespace")
' "$work/requests.jsonl"

echo "== Codex as for gpt-5.5: its own tool search loads deferred tools"
upstream --call tool_search --args '{"query": "spawn a sub-agent"}'
run_codex codex-search "Spawn a helper" gpt-5.5
"$py" -c '
import json, sys
first, last = [json.loads(line) for line in open(sys.argv[1])][-2:]
names = lambda body: [t["function"]["name"] for t in body.get("tools", [])]
loaded = [n for n in names(last) if n not in names(first)]
said = last["messages"][-1]
assert said["role"] == "tool" and said["content"].startswith("Tools loaded"), said
assert loaded, "the search loaded no tools for the model"
print(f"  Codex searched; the model then had {len(loaded)} more tools: {loaded[:3]}...")
' "$work/requests.jsonl"

echo "== opencode: shell tool (chat completions, recorded as sent)"
upstream
run_opencode opencode-shell "Create proof.txt"
proof opencode-shell

reason="I should write the file with the shell."
for api in openai-completions openai-responses anthropic-messages; do
  echo "== pi over $api, thinking (chat as sent, the others translated)"
  upstream --reason "$reason"
  run_pi "pi-$api" "$api"
  proof "pi-$api"
  reasoning_came_back "$reason"
done

echo "== Qwen Code: shell tool (chat completions, recorded as sent)"
upstream
run_qwen qwen-shell "Create proof.txt"
proof qwen-shell

echo "== Claude Code and Codex: five shell commands in a row, thinking every turn"
upstream --steps 5 --reason "Next command."
run_claude claude-steps "Create proof.txt"
run_codex codex-steps "Create proof.txt"
for d in claude-steps codex-steps; do
  [ "$(wc -l < "$work/$d/steps.txt")" = 4 ] && echo "  $d ran all five commands"
done

echo "== Claude Code and Codex: two shell calls in one turn"
upstream --parallel
run_claude claude-parallel "Create proof.txt"
run_codex codex-parallel "Create proof.txt"
for d in claude-parallel codex-parallel; do
  proof "$d"
  grep -qx parallel "$work/$d/steps.txt" && echo "  $d ran the second call too"
done

echo "== Claude Code and Codex: a sub-agent does the task, a fresh one and then a fork of the session"
for kind in general-purpose fork; do
  upstream --agent "$kind"
  run_claude "claude-agent-$kind" "Create proof.txt"
  run_codex "codex-agent-$kind" "Create proof.txt"
  proof "claude-agent-$kind"
  proof "codex-agent-$kind"
done
"$py" - "$work/pool" <<'PY'
import collections, sys
from pathlib import Path
from agentworld.pool import Layout, iter_records
# Per session: the main conversation (it spawns a sub-agent, Codex then waits for it, and it
# answers) and the sub-agent's (it runs the shell, then answers) are two trajectories, each
# threaded on its own, although they run at once and a fork starts from the session so far.
steps = collections.defaultdict(dict)
for r in iter_records(Layout(Path(sys.argv[1]))):
    if r.get("kind") == "step":
        steps[r["trajectory"]][r["index"]] = r
def calls(t):
    return [[c["name"] for c in s["response"]["message"].get("tool_calls") or ()] for _, s in sorted(t.items())]
def has(step, text):
    return any(text in str(m.get("content")) for m in step["request"]["messages"])
for agent, spawn, shell in (
    ("claude-code", [["Agent"], []], "Bash"),
    ("codex", [["multi_agent_v1__spawn_agent"], ["multi_agent_v1__wait_agent"], []], "exec_command"),
):
    mine = [t for t in steps.values() if t[0]["agent"] == agent]
    main = [t for t in mine if calls(t) == spawn]
    sub = [t for t in mine if calls(t) == [[shell], []] and has(t[0], "Sub-agent task")]
    assert len(main) == 2 and len(sub) == 2, f"{agent}: {len(main)} main, {len(sub)} sub-agent trajectories"
    forks = [t for t in sub if has(t[0], "Create proof.txt")]  # the session's own prompt
    assert len(forks) == 1, f"{agent}: the fork does not start from the session's conversation"
    print(f"  {agent}: each of the two sessions and its sub-agent are trajectories of their own")
    # Codex's fork starts from its session's first prompt: its first step says so. Claude
    # Code's adds "cc_is_subagent=true" to the system prompt: another conversation.
    link = forks[0][0]["metadata"].get("forked_from")
    if agent == "codex":
        assert link and link["step"] == 0 and link["trajectory"] in {t[0]["trajectory"] for t in main}, link
    print(f"  {agent}: the fork's first step names where it branched off: {link}")
PY

echo "== Claude Code: six identical sessions at once (a group's rollouts of one task)"
upstream --steps 4
group=()
for i in 1 2 3 4 5 6; do
  run_claude "claude-group-$i" "Create proof.txt" > /dev/null &
  group+=($!)
done
wait "${group[@]}"  # these six only: the proxy and the upstream run on
"$py" - "$work/pool" <<'PY'
import collections, json, sys
from pathlib import Path
from agentworld.pool import Layout, iter_records
# Each trajectory of five steps must hold one session's calls (Claude Code names its session
# in metadata.user_id): identical conversations, told apart by their connections.
steps = collections.defaultdict(list)
for r in iter_records(Layout(Path(sys.argv[1]))):
    if r.get("kind") == "step" and r["agent"] == "claude-code":
        user = ((r.get("raw") or {}).get("request") or {}).get("metadata", {}).get("user_id", "")
        steps[r["trajectory"]].append(json.loads(user)["session_id"] if user[:1] == "{" else user)
group = [s for s in steps.values() if len(s) == 5]
assert len(group) == 6, f"{len(group)} five-step trajectories, expected 6"
assert all(len(set(s)) == 1 for s in group), "a trajectory mixes two sessions' calls"
assert len({s[0] for s in group}) == 6, "two trajectories hold the same session"
print("  six trajectories of five steps, each one session's calls")
PY

echo "== mini-swe-agent: its bash tool, then its submit command (chat completions through LiteLLM)"
upstream --finish-command "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
run_mini mini-shell "Create proof.txt"
proof mini-shell

echo "== OpenAI Agents SDK: Responses (translated) and chat, run and streamed"
mkdir -p "$work/openai-agents"
(cd "$work/openai-agents" && PYTHONPATH="$work/py" timeout 180 "$py" "$here/openai_agents_task.py" \
  "http://127.0.0.1:$proxy_port/a/openai-agents/v1")
proof openai-agents

echo "== the pool"
"$aw" pool ls --pool "$work/pool"
"$aw" pool ls --pool "$work/pool" --json | "$py" -c '
import collections, json, sys
rows = json.load(sys.stdin)
bad = [r["id"] for r in rows if r["n_errors"] or r["token_source"] != "engine"]
assert not bad, f"trajectories with errors or without engine token ids: {bad}"
# One trajectory per task (2 steps: call, then answer; 6 for the five-command tasks) and one
# per sub-agent; side calls (opencode titles) apart.
tasks = collections.Counter(r["agent"] for r in rows if r["n_steps"] >= 2)
want = {"claude-code": 15, "codex": 9, "opencode": 1, "openai-agents": 4, "pi": 3, "qwen-code": 1}
want["mini-swe-agent"] = 1
long = sorted(r["agent"] for r in rows if r["n_steps"] == 6)  # the five-command sessions
assert long == ["claude-code", "codex"], f"six-step trajectories: {long}"
assert tasks == want, f"tasks threaded into trajectories: {dict(tasks)}, expected {want}"
print(f"OK: {len(rows)} trajectories, one per task (and side call), every step with engine ids")
'
