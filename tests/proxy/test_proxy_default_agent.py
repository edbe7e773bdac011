"""A call that names no agent, under `aw proxy --config` with the agents.toml `aw init` writes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import aiohttp
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


def readme_curls() -> list[tuple[str | None, list[str]]]:
    """The README's proxy example, curl by curl: (the shell variable it sets, its words)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    (block,) = [b for b in blocks if "/aw/trajectories -d" in b]
    out: list[tuple[str | None, list[str]]] = []
    for line in block.replace("\\\n", " ").splitlines():
        m = re.fullmatch(r"(\w+)=\$\((.*) \| jq -r \.trajectory\)", line.strip())
        var, command = (m[1], m[2]) if m else (None, line)
        words = shlex.split(command, comments=True)
        if words and words[0] == "curl":
            out.append((var, words))
    return out


async def test_the_readme_trajectory_example_works_as_written(
    tmp_path: Path, make_proxy: ProxyFactory, fake, pool: Pool
) -> None:
    """Its agent was "coder", which `aw init` does not write (a 400), and its call a
    literal '{...}' (not JSON)."""
    write_templates(tmp_path)
    config = tmp_path / "agents.toml"
    config.write_text(config.read_text().replace("http://127.0.0.1:8000/v1", fake[1] + "/v1"))
    proxy = await make_proxy(agents=load_agents(config, need_upstream=True))
    shell: dict[str, str] = {}
    curls = readme_curls()
    assert len(curls) == 4
    async with aiohttp.ClientSession() as http:
        for var, words in curls:
            url, body = words[2], words[words.index("-d") + 1]
            headers = {"content-type": "application/x-www-form-urlencoded"}  # curl -d's
            if "-H" in words:
                name, value = words[words.index("-H") + 1].split(": ", 1)
                headers[name] = value
            for name, value in shell.items():
                url = url.replace(f"${name}", value)
            url = proxy.url + url.removeprefix("localhost:4000")
            async with http.post(url, data=body, headers=headers) as r:
                answer = await r.json()
                assert r.status == 200, (words, answer)
            if var:
                shell[var] = answer["trajectory"]
    await proxy.stop()
    step = next(s for s in steps_of(pool) if s["trajectory"] == shell["T"])
    assert (step["agent"], step["task"], step["group"]) == ("math", "q1", "g1")
