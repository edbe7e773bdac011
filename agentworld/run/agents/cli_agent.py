"""A black-box agent: a standalone program using only the official `openai` SDK.

It knows nothing of AgentWorld. It reads the task as JSON on stdin (or the
prompt as its arguments), talks to whatever OPENAI_BASE_URL points at, and
prints its final answer on stdout. `aw run` points OPENAI_BASE_URL at the
proxy, which records every call: proof that an unmodified program works.

    echo '{"prompt": "What is 6 * 7?"}' | python agentworld/run/agents/cli_agent.py
"""

from __future__ import annotations

import json
import os
import re
import sys

from openai import OpenAI

SYSTEM_PROMPT = "Answer the question. End with a line 'Final answer: <answer>'."


def final_answer(text: str) -> str:
    """The text after the last 'Final answer:', else the last non-empty line."""
    found = re.findall(r"(?i)final answer\s*[:=]?\s*(.+)", text)
    if found:
        return found[-1].strip().rstrip(".")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def main() -> int:
    prompt = " ".join(sys.argv[1:]) if len(sys.argv) > 1 else json.loads(sys.stdin.read())["prompt"]
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
    sampling = json.loads(os.environ.get("AW_SAMPLING") or "{}")
    response = client.chat.completions.create(
        model=os.environ.get("AW_MODEL") or os.environ.get("OPENAI_MODEL") or "default",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ],
        **sampling,
    )
    print(final_answer(response.choices[0].message.content or ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
