"""The shipped agents' pieces: the safe calculator, answer extraction, the math agent's tool loop."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agentworld.run.agents.answers import extract_final_answer
from agentworld.run.agents.calculator import CalculatorError, calculator, evaluate
from agentworld.run.agents.math_agent import solve


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-3 ** 2", -9),
        ("2^10", 1024),
        ("1,234 + 1", 1235),
        ("sqrt(16) + abs(-2)", 6.0),
        ("max(3, 9, 4) % 5", 4),
        ("round(2.567, 2)", 2.57),
    ],
)
def test_calculator_evaluates_arithmetic(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "(1).__class__",
        "[1, 2]",
        "'a' * 3",
        "x + 1",
        "lambda: 1",
        "9 ** 9 ** 9",
        "10 ** 999 * 10 ** 999 * 10 ** 999 * 10 ** 999",
        "1 / 0",
        "sqrt(-1)",
        "1" * 600,
        "1 +",
    ],
)
def test_calculator_refuses_everything_else(expr):
    with pytest.raises(CalculatorError):
        evaluate(expr)
    assert calculator(expr).startswith("error: ")


def test_calculator_formats_for_the_model():
    assert calculator("6 * 7") == "42"
    assert calculator("84 / 2") == "42"
    assert calculator("1 / 3") == "0.333333333333"


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Work...\nFinal answer: 42.", "42"),
        ("so \\boxed{17} is it", "17"),
        ("steps\n#### 1,000", "1,000"),
        ("The answer is: **12**", "12"),
        ("just\n\n  9  \n", "9"),
        ("", None),
        (None, None),
    ],
)
def test_extract_final_answer(text, answer):
    assert extract_final_answer(text) == answer


class _ScriptedClient:
    """Stands in for openai.AsyncOpenAI: replies from a list, records requests."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    async def _create(self, **kwargs):
        self.requests.append(json.loads(json.dumps(kwargs)))
        return SimpleNamespace(choices=[SimpleNamespace(message=self.replies.pop(0))])


def _call(cid, name, args):
    return SimpleNamespace(id=cid, function=SimpleNamespace(name=name, arguments=json.dumps(args)))


async def test_math_agent_uses_the_calculator_then_answers():
    client = _ScriptedClient(
        [
            SimpleNamespace(
                content="", tool_calls=[_call("c1", "calculator", {"expression": "17 * 3"})]
            ),
            SimpleNamespace(
                content=None, tool_calls=[_call("c2", "final_answer", {"answer": " 51 "})]
            ),
        ]
    )
    settings = SimpleNamespace(model="m", sampling={"temperature": 0.5}, max_turns=5)
    result = await solve(SimpleNamespace(prompt="17 boxes of 3?"), client, settings)
    assert result == {"answer": "51", "metadata": {"tool_calls": 1, "ended_by": "tool"}}
    second = client.requests[1]
    assert second["temperature"] == 0.5 and second["model"] == "m"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "51"}
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "calculator"


async def test_math_agent_stops_at_max_turns_and_reads_plain_replies():
    looping = _ScriptedClient(
        [
            SimpleNamespace(
                content="", tool_calls=[_call(f"c{i}", "calculator", {"expression": "1+1"})]
            )
            for i in range(2)
        ]
    )
    settings = SimpleNamespace(model="m", sampling={}, max_turns=2)
    result = await solve(SimpleNamespace(prompt="?"), looping, settings)
    assert result["answer"] is None and result["metadata"]["ended_by"] == "max_turns"
    assert len(looping.requests) == 2
    plain = _ScriptedClient([SimpleNamespace(content="hmm\nFinal answer: 8", tool_calls=None)])
    result = await solve(SimpleNamespace(prompt="?"), plain, settings)
    assert result["answer"] == "8" and result["metadata"]["ended_by"] == "text"
