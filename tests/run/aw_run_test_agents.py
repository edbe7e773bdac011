"""Agents, task sources and scorers that tests name as module:function in their TOML files."""

from __future__ import annotations

import asyncio
import threading


async def crash(task, client):
    raise RuntimeError(f"boom on {task.id}")


async def hang(task, client):
    await asyncio.sleep(3600)


def hang_sync(task, client):
    threading.Event().wait(20)  # a daemon thread: abandoned when the episode times out


def sync_agent(task, client):
    """A plain-function agent gets a synchronous openai.OpenAI client."""
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task.prompt}]
    )
    return reply.choices[0].message.content.rsplit(":", 1)[-1].strip()


async def two_args(task, client):
    reply = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task.prompt}]
    )
    return {"answer": reply.choices[0].message.content, "metadata": {"style": "two-args"}}


async def claims_ground_truth(task, client):
    """An agent whose metadata claims the reference answer: it must not be recorded as one."""
    return {"answer": "41", "metadata": {"ground_truth": "41"}}


async def crash_on_odd(task, client, settings):
    if int(task.id[1:]) % 2:
        raise ValueError("odd task")
    return task.answer


async def wait_forever_after_first(task, client, settings):
    if task.id != "t0":
        await asyncio.sleep(3600)
    return task.answer


def rows(split, count=2):
    return [
        {"id": f"{split}-{i}", "prompt": f"Compute {i} + 1?", "answer": str(i + 1)}
        for i in range(count)
    ]


def rows_fail(split):
    raise OSError("database is down")


def score_half(answer, task):
    return 0.5


async def score_len(answer, task):
    return float(len(answer or ""))


def score_broken(answer, task):
    raise KeyError("oops")


def score_text(answer, task):
    return "high"


NOT_CALLABLE = 3


async def slow(task, client, settings):
    """An episode that takes a while (progress lines come meanwhile)."""
    await asyncio.sleep(0.6)
    return task.answer


async def die_after_one_call(task, client):
    """Calls the model once, then its process dies (as a Ray worker on a lost node would)."""
    import os

    await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task.prompt}]
    )
    if task.id == "t1":
        os._exit(1)
    return task.answer


async def note_node_then_hang_on_t1(task, client):
    """Says which Ray node runs it (a file in $AW_NODE_NOTES); on t1, calls the model, then hangs."""
    import os
    from pathlib import Path

    import ray

    notes = Path(os.environ["AW_NODE_NOTES"])
    await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task.prompt}]
    )
    import uuid

    note = notes / f"{task.id}.{uuid.uuid4().hex}.node"  # one per episode
    note.write_text(ray.get_runtime_context().get_node_id())
    if task.id == "t1":
        await asyncio.sleep(3600)
    return task.answer
