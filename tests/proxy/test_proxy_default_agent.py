"""A call that names no agent, under `aw proxy --config` with the agents.toml `aw init` writes."""

from __future__ import annotations

from pathlib import Path

import openai

from agentworld.pool import Pool
from agentworld.proxy.config import load_agents
from agentworld.templates import write_templates
from tests.proxy.conftest import ProxyFactory, steps_of


async def test_the_readme_curl_works_with_the_init_config(
    tmp_path: Path, make_proxy: ProxyFactory, fake, pool: Pool
) -> None:
    write_templates(tmp_path)
    config = tmp_path / "agents.toml"
    config.write_text(config.read_text().replace("http://127.0.0.1:8000/v1", fake[1] + "/v1"))
    agents = load_agents(config, need_upstream=True)  # as `aw proxy --config` reads it
    proxy = await make_proxy(agents=agents)  # and no --upstream
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
    reply = await client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content
    await client.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["agent"] == "default" and step["status"] == "ok"
