"""Generated tokens/s of `aw serve` (embedded, over HTTP) vs a plain transformers generate loop.

Run: python bench/serve.py [--model DIR] [--tokens 64] [--prompts 8] [--device auto] [--dtype D]
Both sides use the same model, device, dtype, prompts and greedy decoding, measured one after
the other in this process; the table prints the ratios. Not a test: numbers depend on the
machine. --device auto is CUDA when there is one (dtype then defaults to the engine's bf16).

python bench/serve.py --detok 4000 [--model DIR] instead times the text work a streamed chat
answer of that many tokens costs the event loop: the whole-answer decode per token it used
to do beside the incremental `StreamText`, interleaved rounds, the model's tokenizer only.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from pathlib import Path

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain recursion to a child.",
    "List three prime numbers.",
    "What does a compiler do?",
    "Name a famous painter.",
    "How do plants make food?",
    "Why is the sky blue?",
]


def baseline_tokens_per_s(model, prompts: list[list[int]], n_tokens: int) -> float:
    """model.generate, one prompt at a time, greedy, exactly n_tokens each."""
    import torch

    total, start = 0, time.perf_counter()
    for p in prompts:
        ids = torch.tensor([p], device=model.device)
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n_tokens,
                min_new_tokens=n_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        total += out.shape[1] - ids.shape[1]
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return total / (time.perf_counter() - start)


async def server_tokens_per_s(
    url: str, prompts: list[list[int]], n_tokens: int, concurrency: int
) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as session:

        async def one(p: list[int]) -> int:
            body = {"prompt": p, "max_tokens": n_tokens, "temperature": 0, "ignore_eos": True}
            async with session.post(url + "/v1/completions", json=body) as r:
                out = await r.json()
                return out["usage"]["completion_tokens"]

        total, start = 0, time.perf_counter()
        for i in range(0, len(prompts), concurrency):
            total += sum(await asyncio.gather(*(one(p) for p in prompts[i : i + concurrency])))
        return total / (time.perf_counter() - start)


async def run_server_side(engine, prompts: list[list[int]], n_tokens: int) -> dict[int, float]:
    from aiohttp import web

    from agentworld.serve.server import make_app

    runner = web.AppRunner(make_app(engine))
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    try:
        await server_tokens_per_s(url, prompts[:1], 4, 1)  # warm-up
        return {c: await server_tokens_per_s(url, prompts, n_tokens, c) for c in (1, 8)}
    finally:
        await runner.cleanup()


def old_stream_text(tokenizer, ids: list[int], holds: tuple[str, ...]) -> list[str]:
    """The stream's text as it was made before: the whole answer decoded per token."""
    from agentworld.serve.generation import safe_len

    pieces, sent, out_ids = [], 0, []
    for t in ids:
        out_ids.append(t)
        text = tokenizer.decode(out_ids, skip_special_tokens=True)
        safe = safe_len(text, holds)
        if safe > sent:
            pieces.append(text[sent:safe])
            sent = safe
    return pieces


def new_stream_text(tokenizer, ids: list[int], holds: tuple[str, ...]) -> list[str]:
    from agentworld.serve.generation import StreamText

    stream = StreamText(tokenizer, holds)
    return [p for p in map(stream.add, ids) if p]


def detok_main(model_dir: Path, n_tokens: int, rounds: int = 5) -> None:
    """Seconds of text work per streamed answer, before vs now, on real text (this repo's
    README and docs: prose, code, box-drawing characters), with a chat's held markers."""
    import statistics

    from transformers import AutoTokenizer

    from agentworld.serve.generate_routes import _MARKERS

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    root = Path(__file__).resolve().parents[1]
    text = "\n".join(p.read_text() for p in [root / "README.md", *sorted(root.glob("docs/*.md"))])
    ids = tokenizer.encode(text, add_special_tokens=False)[:n_tokens]
    assert len(ids) == n_tokens, f"only {len(ids)} tokens of text here"
    holds = ("\nUser:", *_MARKERS)  # a stop string and a chat's markers
    want = "".join(old_stream_text(tokenizer, ids, holds))
    # A hold in the text would stop the stream there, and the new path's work with it.
    assert want == tokenizer.decode(ids, skip_special_tokens=True), "a hold is in the text"
    assert "".join(new_stream_text(tokenizer, ids, holds)) == want, "the two texts differ"
    times: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(rounds):
        for name, fn in (("old", old_stream_text), ("new", new_stream_text)):
            start = time.process_time()
            fn(tokenizer, ids, holds)
            times[name].append(time.process_time() - start)
    old, new = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"model: {model_dir.name}  {n_tokens} tokens, {len(want):,} characters streamed")
    print(f"CPU seconds on the event loop per stream, median of {rounds} interleaved rounds")
    print(f"{'setup':<44} {'seconds':>9} {'per token':>10}")
    for label, t in (
        ("whole-answer decode per token (before)", old),
        ("incremental StreamText (now)", new),
    ):
        print(f"{label:<44} {t:>9.4f} {t / n_tokens * 1e6:>8.1f}us")
    print(f"ratio before / now: {old / new:.1f}x")


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch
    from transformers import AutoModelForCausalLM

    from agentworld.model_folder import default_aw_home, resolve_model
    from agentworld.serve.chat import render_prompt
    from agentworld.serve.engine import Engine, resolve_device, resolve_dtype

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--device", default="auto", help="cpu, cuda, ... (auto: CUDA if any)")
    ap.add_argument("--dtype", default=None, help="float32, bfloat16, ... (engine default)")
    ap.add_argument(
        "--detok", type=int, default=0, metavar="N", help="time a streamed N-token answer's text"
    )
    args = ap.parse_args()

    model_dir = resolve_model(args.model, default_aw_home() / "models")
    if args.detok:
        detok_main(model_dir, args.detok)
        return
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    # Both sides on one device and dtype, or the ratios compare machines, not code.
    engine = Engine(
        model_dir, device=device, dtype=str(dtype).removeprefix("torch."), max_batch_size=8
    )
    prompts = [
        render_prompt(engine.tokenizer, [{"role": "user", "content": q}])
        for q in (QUESTIONS * 4)[: args.prompts]
    ]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
    baseline_tokens_per_s(model, prompts[:1], 4)  # warm-up
    # Baseline before and after the server runs: on a shared machine the load drifts, and
    # the mean of the two brackets the server's measurements.
    before = baseline_tokens_per_s(model, prompts, args.tokens)
    served = asyncio.run(run_server_side(engine, prompts, args.tokens))
    after = baseline_tokens_per_s(model, prompts, args.tokens)
    base = (before + after) / 2
    engine.close()

    print(
        f"model: {model_dir.name}  device: {device}  threads: {torch.get_num_threads()}"
        f"  dtype: {str(dtype).removeprefix('torch.')}"
    )
    print(f"{args.prompts} prompts x {args.tokens} greedy tokens each")
    print(f"{'setup':<40} {'tokens/s':>10} {'ratio':>7}")
    print(f"{'transformers generate, sequential':<40} {base:>10.1f} {1.0:>7.2f}")
    print(f"{'  (before / after the server runs)':<40} {before:>5.1f} / {after:.1f}")
    for c, tps in served.items():
        print(f"{f'aw serve HTTP, {c} concurrent':<40} {tps:>10.1f} {tps / base:>7.2f}")


if __name__ == "__main__":
    main()
