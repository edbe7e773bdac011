"""With --tokenizer, the token view shows decoded text (transformers imported only then)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.widgets import Static

from agentworld.tui.app import make_app
from agentworld.tui.data import TuiConfig
from agentworld.tui.inspector import InspectorScreen

from .conftest import T0


def tiny_tokenizer(path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {f"w{i}": i for i in range(100)} | {"[UNK]": 100}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    fast.save_pretrained(path)
    return path


@pytest.mark.slow
async def test_token_view_decodes_with_configured_tokenizer(
    pool_path: Path, tmp_path: Path
) -> None:
    tok_path = tiny_tokenizer(tmp_path / "tok")
    config = TuiConfig(str(pool_path), "tester", tokenizer_path=str(tok_path))
    app = make_app(config, start="trajectories", clock=lambda: T0)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(500):
            if app.decoders.local is not None:
                break
            await pilot.pause(0.02)
        assert app.decoders.local is not None
        app.inspect("tr_grp-a_1")
        for _ in range(200):
            if isinstance(app.screen, InspectorScreen) and app.screen.trajectory:
                break
            await pilot.pause(0.02)
        await pilot.press("t")
        body = str(app.screen.query_one("#body", Static).render())
        assert "decoded" in body and "w1 w2 w3" in body and "w11 w12 w13" in body


def test_without_tokenizer_transformers_is_not_imported(pool_path: Path) -> None:
    import subprocess

    code = (
        "import asyncio, sys\n"
        "from agentworld.tui.app import make_app\n"
        "from agentworld.tui.data import TuiConfig\n"
        f"app = make_app(TuiConfig({str(pool_path)!r}, 't'))\n"
        "async def main():\n"
        "    async with app.run_test() as pilot:\n"
        "        await pilot.pause(0.3)\n"
        "asyncio.run(main())\n"
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2]
    )


@pytest.mark.slow
async def test_token_view_finds_the_tokenizer_of_the_model_a_step_names(
    pool_path: Path, tmp_path: Path
) -> None:
    """No --tokenizer: the steps name model "tiny", which `aw serve` would keep under
    AW_HOME/models/tiny; pressing t once shows ids, then text as soon as it loads."""
    tiny_tokenizer(tmp_path / "models" / "tiny")
    config = TuiConfig(str(pool_path), "tester", models_dir=str(tmp_path / "models"))
    app = make_app(config, start="trajectories", clock=lambda: T0)
    async with app.run_test(size=(100, 30)) as pilot:
        app.inspect("tr_grp-a_1")
        for _ in range(200):
            if isinstance(app.screen, InspectorScreen) and app.screen.trajectory:
                break
            await pilot.pause(0.02)
        await pilot.press("t")
        body = lambda: str(app.screen.query_one("#body", Static).render())  # noqa: E731
        for _ in range(1500):  # no second key: the open view changes once it has loaded
            if "w11 w12 w13" in body():
                break
            await pilot.pause(0.02)
        assert "decoded" in body() and "w11 w12 w13" in body()
