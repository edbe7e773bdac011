"""The engine's outputs are exactly what a plain forward pass says, batched or not."""

from __future__ import annotations

import queue
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agentworld.serve.engine import Admitted, Engine, Finished, Request, SamplingParams, TokenEvent
from tests.terminal import Stderr

from .helpers import forward_logprobs, load_model

PROMPTS = [
    [5, 6, 7, 8, 9, 10, 11],
    [20, 21],
    [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43],
    [100],
    [7, 7, 7, 7],
]
PARAMS = [
    SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
    SamplingParams(max_tokens=20, temperature=1.0, seed=1, ignore_eos=True),
    SamplingParams(max_tokens=9, temperature=0.7, top_k=20, seed=2, ignore_eos=True),
    SamplingParams(max_tokens=15, temperature=1.3, top_p=0.8, seed=3, ignore_eos=True),
    SamplingParams(max_tokens=5, temperature=1.0, top_logprobs=3, ignore_eos=True),
]


def run_batch(engine: Engine, prompts, params) -> list[tuple[Request, list]]:
    """Submit all at once (so they share a batch) and collect every event."""
    sinks = [queue.Queue() for _ in prompts]
    reqs = [
        engine.submit(Request(p, sp, q.put))
        for p, sp, q in zip(prompts, params, sinks, strict=True)
    ]
    out = []
    for req, q in zip(reqs, sinks, strict=True):
        events = []
        while not events or not isinstance(events[-1], Finished):
            events.append(q.get(timeout=30))
        out.append((req, events))
    return out


def test_batched_ids_and_logprobs_equal_a_forward_pass(engine: Engine, tiny_model_dir: Path):
    model = load_model(tiny_model_dir)
    results = run_batch(engine, PROMPTS, PARAMS)
    for prompt, sp, (req, events) in zip(PROMPTS, PARAMS, results, strict=True):
        assert isinstance(events[0], Admitted) and events[0].policy_version == 0
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        assert [t.token_id for t in tokens] == req.output_ids
        assert len(tokens) == sp.max_tokens
        assert events[-1] == Finished("length")
        ref = forward_logprobs(model, prompt, req.output_ids, sp)
        assert [t.logprob for t in tokens] == pytest.approx(ref, abs=1e-4)


def test_top_logprobs_are_the_raw_distributions_best(engine: Engine, tiny_model_dir: Path):
    ((_req, events),) = run_batch(engine, [PROMPTS[4]], [PARAMS[4]])
    for ev in (e for e in events if isinstance(e, TokenEvent)):
        assert len(ev.top) == 3
        values = [lp for _, lp in ev.top]
        assert values == sorted(values, reverse=True)
        assert ev.logprob <= values[0] + 1e-6


def test_batched_greedy_equals_unbatched(engine: Engine):
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    alone = [engine.generate(p, greedy)[0].output_ids for p in PROMPTS]
    together = [r.output_ids for r, _ in run_batch(engine, PROMPTS, [greedy] * len(PROMPTS))]
    assert together == alone


def test_greedy_is_deterministic_and_seed_reproduces_sampling(engine: Engine):
    greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    assert (
        engine.generate(PROMPTS[0], greedy)[0].output_ids
        == engine.generate(PROMPTS[0], greedy)[0].output_ids
    )
    seeded = SamplingParams(max_tokens=24, temperature=1.0, seed=42, ignore_eos=True)
    a = engine.generate(PROMPTS[0], seeded)[0].output_ids
    assert a == engine.generate(PROMPTS[0], seeded)[0].output_ids
    other = SamplingParams(max_tokens=24, temperature=1.0, seed=43, ignore_eos=True)
    assert a != engine.generate(PROMPTS[0], other)[0].output_ids


def test_stop_token_id_ends_generation_with_its_id(engine: Engine):
    greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    ids = engine.generate(PROMPTS[1], greedy)[0].output_ids
    stop_at = ids[5]
    first = ids.index(stop_at)
    params = SamplingParams(
        max_tokens=24, temperature=0.0, ignore_eos=True, stop_token_ids=(stop_at,)
    )
    req, fin = engine.generate(PROMPTS[1], params)
    assert req.output_ids == ids[: first + 1]
    assert fin == Finished("stop", stop_reason=stop_at)


def test_reload_new_requests_use_new_weights_in_flight_finish_on_old(
    fresh_engine: Engine, tiny_model_dir: Path, tiny_checkpoint_dir: Path
):
    old, new = load_model(tiny_model_dir), load_model(tiny_checkpoint_dir)
    long = SamplingParams(max_tokens=400, temperature=1.0, seed=5, ignore_eos=True)
    q: queue.Queue = queue.Queue()
    running = fresh_engine.submit(Request(PROMPTS[0], long, q.put))
    assert q.get(timeout=30) == Admitted(0)
    assert fresh_engine.reload(tiny_checkpoint_dir) == 1
    assert len(running.output_ids) < long.max_tokens, "reload must happen mid-generation"
    assert fresh_engine.policy_version == 1
    after, _ = fresh_engine.generate(PROMPTS[0], replace(long, max_tokens=20))
    reported = []
    while not isinstance(ev := q.get(timeout=60), Finished):
        reported.append(ev.logprob)
    assert running.policy_version == 0 and after.policy_version == 1
    ref_old = forward_logprobs(old, PROMPTS[0], running.output_ids)
    ref_new = forward_logprobs(new, PROMPTS[0], running.output_ids)
    assert ref_old != pytest.approx(ref_new, abs=1e-3)  # the two policies really differ
    assert reported == pytest.approx(ref_old, abs=1e-4)
    assert len(reported) == 400
    after_lp = forward_logprobs(new, PROMPTS[0], after.output_ids)
    assert after_lp != pytest.approx(forward_logprobs(old, PROMPTS[0], after.output_ids), abs=1e-3)


def test_reload_reads_policy_version_from_meta_json(
    fresh_engine: Engine, tiny_checkpoint_dir: Path
):
    (tiny_checkpoint_dir / "meta.json").write_text('{"policy_version": 7}')
    try:
        assert fresh_engine.reload(tiny_checkpoint_dir) == 7
        req, _ = fresh_engine.generate([1, 2, 3], SamplingParams(max_tokens=2))
        assert req.policy_version == 7
    finally:
        (tiny_checkpoint_dir / "meta.json").unlink()


def test_reload_writes_no_transformers_bar_and_leaves_them_as_they_were(
    fresh_engine: Engine, tiny_checkpoint_dir: Path, capfd: pytest.CaptureFixture[str]
):
    """A reload a training iteration: transformers' "Loading weights" bar each time would
    fill the server's log. A load outside a reload still shows it (bars stay on)."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()  # whatever the environment says
    load_model(tiny_checkpoint_dir)
    assert "Loading weights" in capfd.readouterr().err  # the bar a reload must not write
    assert fresh_engine.reload(tiny_checkpoint_dir) == 1
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()


@pytest.mark.parametrize("tty", [False, True])
def test_start_up_shows_transformers_bar_only_on_a_terminal(
    tiny_model_dir: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tty
):
    """`aw serve > serve.log` got the "Loading weights" bar as carriage-return spam."""
    from transformers.utils import logging as hf_logging

    monkeypatch.setattr("agentworld.serve.engine.sys.stderr", Stderr(sys.stderr, tty))
    hf_logging.enable_progress_bar()  # whatever the environment says
    capfd.readouterr()
    engine = Engine(tiny_model_dir, device="cpu")
    try:
        assert ("Loading weights" in capfd.readouterr().err) is tty
        assert hf_logging.is_progress_bar_enabled()
    finally:
        engine.close()


def test_requests_join_a_running_batch_and_stay_exact(engine: Engine, tiny_model_dir: Path):
    long = SamplingParams(max_tokens=200, temperature=1.0, seed=11, ignore_eos=True)
    first, q_long = run_batch_async(engine, PROMPTS[2], long)
    assert isinstance(q_long.get(timeout=30), Admitted)
    q_long.get(timeout=30)  # a token is out: the batch is running
    late = [
        run_batch_async(engine, p, SamplingParams(max_tokens=6 + i, seed=i, ignore_eos=True))
        for i, p in enumerate(PROMPTS[:3])
    ]
    for _req, q in late:
        while not isinstance(q.get(timeout=30), Finished):
            pass
    # The newcomers were served while the long request was still generating.
    assert not first.done
    while not isinstance(q_long.get(timeout=60), Finished):
        pass
    model = load_model(tiny_model_dir)
    for req, _ in [*late, (first, None)]:
        got = [e.logprob for e in req.events]
        assert got == pytest.approx(
            forward_logprobs(model, req.prompt_ids, req.output_ids), abs=1e-4
        )


def run_batch_async(engine: Engine, prompt: list[int], params: SamplingParams):
    q: queue.Queue = queue.Queue()
    events: list[TokenEvent] = []

    def sink(ev):
        if isinstance(ev, TokenEvent):
            events.append(ev)
        q.put(ev)

    req = engine.submit(Request(prompt, params, sink))
    req.events = events
    return req, q


@pytest.mark.parametrize(
    ("device", "cuda", "said"),
    [
        ("cuda", False, "no CUDA device here"),
        ("cuda:0", False, "no CUDA device here"),
        ("cuda:3", True, "has 1 CUDA device(s), cuda:0 to cuda:0"),
        ("gpu", False, "is not a device"),
    ],
)
def test_a_device_this_machine_lacks_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, device: str, cuda: bool, said: str
):
    """`aw serve --device cuda` on a CPU-only host: one line naming the flag, not a traceback
    out of the model's ``.to()`` after the weights were read."""
    import torch

    from agentworld.errors import ConfigError
    from agentworld.serve.engine import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1 if cuda else 0)
    with pytest.raises(ConfigError, match="--device") as err:
        resolve_device(device)
    assert said in str(err.value)
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if cuda else "cpu")
