"""GPU smoke check helpers: fixtures (tiny model, pools), CUDA facts, and output/serve checks.

Usage (from the repo root, PYTHONPATH including the repo):
    python tools/gpu_check/helpers.py info
    python tools/gpu_check/helpers.py fixtures WORKDIR
    python tools/gpu_check/helpers.py check-train OUT_DIR [--min-rows N]
    python tools/gpu_check/helpers.py serve-check URL MODEL_DIR
    python tools/gpu_check/helpers.py wait-url URL TIMEOUT_S
    python tools/gpu_check/helpers.py version URL MIN_VERSION
    python tools/gpu_check/helpers.py run-config WORKDIR SERVE_URL
Each command prints what it found and exits non-zero when a check fails.
"""

from __future__ import annotations

import json
import math
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def fail(msg: str) -> None:
    print(f"CHECK FAILED: {msg}", flush=True)
    sys.exit(1)


def info() -> None:
    import torch

    out = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    import accelerate
    import transformers

    out["transformers"] = transformers.__version__
    out["accelerate"] = accelerate.__version__
    for mod in ("orjson", "zstandard", "openai", "aiohttp", "typer", "rich", "pytest", "uvloop"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?") + " @ " + str(Path(m.__file__).parent)
        except Exception as exc:
            out[mod] = f"MISSING ({exc})"
    if torch.cuda.is_available():
        out["device_name"] = torch.cuda.get_device_name(0)
        out["device_count"] = torch.cuda.device_count()
        out["bf16_supported"] = torch.cuda.is_bf16_supported()
        x = torch.randn(256, 256, device="cuda")
        out["matmul_ok"] = bool(torch.isfinite(x @ x).all())
        from accelerate import Accelerator

        out["accelerator_device"] = str(Accelerator().device)
    print(json.dumps(out, indent=1), flush=True)
    if not torch.cuda.is_available():
        fail("torch.cuda.is_available() is False")


def fixtures(work: Path) -> None:
    """Tiny model + two pools of engine-token trajectories with CPU-fp32 rollout log-probs."""
    import torch

    torch.set_num_threads(4)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentworld.serve.tiny import make_tiny_model
    from tests.train.conftest import PoolBuilder  # the trainer tests' own pool writer

    work.mkdir(parents=True, exist_ok=True)
    model_dir = make_tiny_model(work / "model")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    # Offline pool: groups of 4 with mixed rewards (GRPO/PPO signal), 3-turn trajectories.
    b = PoolBuilder(work / "pool", model, tok, seed=1)
    for g in range(8):
        b.group([1.0, 0.0, 0.5, 0.0 if g % 2 else 1.0], turns=3, reply_tokens=12)
    b.pool.close()
    # Online pool: groups of 2 for `aw train --online` (+ reload of `aw serve`).
    o = PoolBuilder(work / "pool_online", model, tok, seed=2)
    for _ in range(4):
        o.group([1.0, 0.0], turns=2, reply_tokens=8)
    o.pool.close()
    print(f"fixtures in {work}: model {model_dir}, pools pool/ (8x4) pool_online/ (4x2)")


def check_train(out: Path, min_rows: int = 1) -> None:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
    if len(rows) < min_rows:
        fail(f"{out}: {len(rows)} metric rows, expected >= {min_rows}")
    for r in rows:
        loss = r.get("loss")
        if loss is None or not math.isfinite(loss):
            fail(f"{out}: step {r.get('step')} loss {loss}")
        gn = r.get("grad_norm")
        if gn is not None and not math.isfinite(gn):
            fail(f"{out}: step {r.get('step')} grad_norm {gn}")
    latest = out / (out / "latest").read_text().strip()
    meta = json.loads((latest / "meta.json").read_text())
    from safetensors.torch import load_file

    weights = load_file(str(next(latest.glob("*.safetensors"))))
    dtypes = sorted({str(t.dtype) for t in weights.values()})
    devices = sorted({str(t.device) for t in weights.values()})
    fid = meta.get("fidelity") or {}
    print(
        json.dumps(
            {
                "rows": len(rows),
                "losses": [round(r["loss"], 5) for r in rows],
                "grad_norms": [r.get("grad_norm") for r in rows],
                "tokens_per_s": [r.get("tokens_per_s") for r in rows],
                "checkpoint": str(latest),
                "policy_version": meta.get("policy_version"),
                "saved_dtypes": dtypes,
                "saved_devices": devices,
                "fidelity": fid,
            },
            indent=1,
        ),
        flush=True,
    )


def _post(url: str, body: dict) -> tuple[dict, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read()), dict(resp.headers)


def wait_url(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                print(f"{url}: HTTP {resp.status} after waiting", flush=True)
                return
        except Exception:
            time.sleep(0.5)
    fail(f"{url} not up within {timeout_s}s")


def serve_check(url: str, model_dir: Path) -> None:
    """Chat completion with token ids + log-probs; shapes; served vs fp32-recomputed log-probs."""
    import torch
    from transformers import AutoModelForCausalLM

    url = url.rstrip("/")
    models, _ = json.loads(urllib.request.urlopen(url + "/v1/models").read()), None
    name = models["data"][0]["id"]
    body = {
        "model": name,
        "messages": [{"role": "user", "content": "what is the weather in paris?"}],
        "max_tokens": 24,
        "temperature": 1.0,
        "seed": 3,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 2,
        "return_token_ids": True,
        "n": 2,
    }
    t0 = time.perf_counter()
    out, headers = _post(url + "/v1/chat/completions", body)
    dt = time.perf_counter() - t0
    prompt = out.get("prompt_token_ids")
    if not prompt:
        fail("no prompt_token_ids")
    if len(out["choices"]) != 2:
        fail(f"n=2 gave {len(out['choices'])} choices")
    worst = 0.0
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    for c in out["choices"]:
        ids = c.get("token_ids") or []
        lps = (c.get("logprobs") or {}).get("content") or []
        if len(ids) != 24 or len(lps) != 24:
            fail(f"choice {c['index']}: {len(ids)} token_ids, {len(lps)} logprobs (want 24)")
        if any(len(x.get("top_logprobs", [])) != 2 for x in lps):
            fail("top_logprobs should have 2 entries per token")
        if out["usage"]["completion_tokens"] != 48:
            fail(f"usage.completion_tokens {out['usage']['completion_tokens']} != 48")
        with torch.no_grad():
            x = torch.tensor([prompt + ids], device=model.device)
            ref = torch.log_softmax(model(input_ids=x).logits[0].float(), -1)
        n = len(prompt)
        ref_lp = [float(ref[n - 1 + i, t]) for i, t in enumerate(ids)]
        gap = max(abs(a - b["logprob"]) for a, b in zip(ref_lp, lps, strict=True))
        worst = max(worst, gap)
    version = headers.get("X-AW-Policy-Version") or headers.get("x-aw-policy-version")
    print(
        json.dumps(
            {
                "model": name,
                "seconds": round(dt, 3),
                "prompt_tokens": len(prompt),
                "choices": [
                    {
                        "finish_reason": c["finish_reason"],
                        "n_token_ids": len(c["token_ids"]),
                        "first_logprobs": [
                            round(x["logprob"], 4) for x in c["logprobs"]["content"][:4]
                        ],
                    }
                    for c in out["choices"]
                ],
                "policy_version_header": version,
                "max_abs_gap_served_vs_fp32_forward": worst,
            },
            indent=1,
        ),
        flush=True,
    )
    if version is None:
        fail("no X-AW-Policy-Version header")
    # Streaming: the same shapes arrive as SSE chunks.
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps({**body, "n": 1, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    chunks, streamed_ids = 0, []
    with urllib.request.urlopen(req, timeout=60) as resp:
        for line in resp:
            line = line.strip()
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                ev = json.loads(line[6:])
                chunks += 1
                for ch in ev.get("choices", []):
                    streamed_ids += ch.get("token_ids") or []
    print(f"stream: {chunks} chunks, {len(streamed_ids)} token ids", flush=True)
    if len(streamed_ids) != 24:
        fail(f"stream gave {len(streamed_ids)} token ids (want 24)")
    # /v1/completions with a token-id prompt (what white-box agents send).
    comp, _ = _post(
        url + "/v1/completions",
        {"model": name, "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
         "logprobs": 1, "return_token_ids": True},
    )  # fmt: skip
    c0 = comp["choices"][0]
    print(f"completions: token_ids {c0.get('token_ids')}, prompt ids echoed "
          f"{c0.get('prompt_token_ids') == prompt}", flush=True)  # fmt: skip
    if len(c0.get("token_ids") or []) != 8 or c0.get("prompt_token_ids") != prompt:
        fail("/v1/completions: token ids missing or prompt ids not echoed")
    # bf16 serving (the GPU default) vs an fp32 forward differs by ~1e-2; misaligned
    # positions or masks give gaps of whole nats.
    if worst > 0.5:
        fail(f"served log-probs differ from an fp32 forward by {worst:.4f} (> 0.5)")


def version(url: str, min_version: int) -> None:
    with urllib.request.urlopen(url.rstrip("/") + "/aw/version", timeout=10) as resp:
        body = json.loads(resp.read())
    print(f"/aw/version: {body}", flush=True)
    v = body.get("policy_version", body.get("version"))
    if v is None or int(v) < min_version:
        fail(f"policy version {v} < {min_version} after online training")


AGENTS = """\
[agents.math]
kind = "python"
function = "agentworld.run.agents.math_agent:solve"
max_turns = 2
concurrency = 8
episode_timeout_s = 60
upstream = "{url}/v1"
model = "default"
engine = "vllm"
params = {{ temperature = 1.0, max_tokens = 24 }}
"""

DATASETS = """\
[datasets.mini-gsm]
source = { type = "jsonl", fields = { id = "id", prompt = "question", answer = "answer" } }
splits = { train = "pkg:agentworld/run/data/mini_gsm_train.jsonl" }
scorer = { type = "numeric", tolerance = 1e-6 }
"""


def run_config(work: Path, url: str) -> None:
    (work / "agents.toml").write_text(AGENTS.format(url=url.rstrip("/")))
    (work / "datasets.toml").write_text(DATASETS)
    print(f"wrote {work}/agents.toml, datasets.toml (upstream {url})")


def main() -> None:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "info":
        info()
    elif cmd == "fixtures":
        fixtures(Path(args[0]))
    elif cmd == "check-train":
        check_train(Path(args[0]), int(args[1]) if len(args) > 1 else 1)
    elif cmd == "serve-check":
        serve_check(args[0], Path(args[1]))
    elif cmd == "wait-url":
        wait_url(args[0], float(args[1]))
    elif cmd == "version":
        version(args[0], int(args[1]))
    elif cmd == "run-config":
        run_config(Path(args[0]), args[1])
    else:
        fail(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
