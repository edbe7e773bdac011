"""The embedded engine: batched transformers decoding on one thread, exact ids and log-probs out."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentworld.errors import ConfigError
from agentworld.model_folder import hf_progress_bars
from agentworld.serve.batch import Rows, mergeable
from agentworld.serve.detokenize import StopStrings
from agentworld.serve.sampling import MIN_LOGPROB, SamplingParams, sample

# At most this many logits exist at once while a prompt is scored for its log-probs: 256
# MiB in float32, some 440 prompt tokens a chunk at a 150k vocabulary.
PROMPT_LOGITS_ELEMENTS = 2**26


@dataclass
class Admitted:
    """First event of a request: it is in a batch, on this policy version."""

    policy_version: int


@dataclass
class TokenEvent:
    """One sampled token and its log-prob under the distribution it was sampled from."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class PromptToken:
    """One prompt token's log-prob given the tokens before it, under the raw model (vLLM's
    prompt log-probs: no temperature, top-k or top-p), its rank (1 = the model's best) and
    the position's best ``prompt_logprobs`` alternatives as (id, log-prob)."""

    token_id: int
    logprob: float
    rank: int
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class PromptScored:
    """A request's prompt log-probs, sent after prefill and before its first token; the
    first position is None (nothing precedes the first token)."""

    positions: list[PromptToken | None]


@dataclass
class Finished:
    """Last event: why generation stopped (vLLM's finish_reason / stop_reason)."""

    reason: str  # "stop" | "length" | "abort"
    stop_reason: str | int | None = None


Event = Admitted | PromptScored | TokenEvent | Finished


class Request:
    """A submitted generation; events arrive through `sink` from the engine thread."""

    def __init__(
        self, prompt_ids: list[int], params: SamplingParams, sink: Callable[[Event], None]
    ) -> None:
        self.id = uuid.uuid4().hex
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.sink = sink
        self.output_ids: list[int] = []
        self.policy_version: int | None = None
        self.cancelled = threading.Event()
        self.cancel_reason: str | None = None  # why the server aborted it; None: the client left
        self.generator: torch.Generator | None = None
        self.stop_strings: StopStrings | None = None  # made on the first token, if any stop
        self.done = False

    def emit(self, ev: Event) -> None:
        try:
            self.sink(ev)
        except Exception:
            # The consumer is gone (e.g. its event loop closed): stop spending compute on it.
            self.cancelled.set()

    def finish(self, ev: Finished) -> None:
        if not self.done:
            self.done = True
            self.emit(ev)

    def cancel(self, reason: str | None = None) -> None:
        """Stop generating at the next step: the client went away, or (``reason``) the
        server gave up on it; the first cancel's reason is the one reported."""
        if not self.cancelled.is_set():
            self.cancel_reason = reason
        self.cancelled.set()


def resolve_device(device: str) -> str:
    """The torch device for ``--device``; one this machine lacks is a ConfigError, not a
    traceback from deep in the model's ``.to()``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(
            f"--device: {device!r} is not a device (auto, cpu, cuda, cuda:N)"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"--device {device}: no CUDA device here (this torch sees none); "
                "use --device cpu, or auto"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ConfigError(
                f"--device {device}: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}"
            )
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            f"--device {device}: MPS is not available here; use --device cpu, or auto"
        )
    return device


def resolve_dtype(dtype: str | None, device: str) -> torch.dtype:
    # fp32 on CPU so log-probs are exact; bf16 on GPU where fp32 wastes memory bandwidth.
    if dtype in (None, "auto"):
        return torch.float32 if device == "cpu" else torch.bfloat16
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16}
    table |= {"bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ConfigError(f"--dtype: unknown dtype {dtype!r} (one of {', '.join(table)})")
    return table[dtype]


def read_policy_version(checkpoint_dir: str | Path) -> int | None:
    meta = Path(checkpoint_dir) / "meta.json"
    if not meta.exists():
        return None
    try:
        value = json.loads(meta.read_text()).get("policy_version")
    except (ValueError, AttributeError) as e:
        raise ConfigError(f"{meta}: not a JSON object ({e})") from e
    return int(value) if value is not None else None


class Engine:
    """Owns the model and a decoding thread; see `submit`, `generate`, `reload`."""

    def __init__(
        self,
        model_dir: str | Path,
        device: str = "auto",
        dtype: str | None = None,
        max_batch_size: int = 8,
        model_name: str | None = None,
        gather_window_s: float = 0.002,
        max_model_len: int | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        self.model_dir = Path(model_dir)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.max_batch_size = max_batch_size
        self.model_name = model_name or self.model_dir.name
        self.gather_window_s = gather_window_s
        self.prompt_logits_elements = PROMPT_LOGITS_ELEMENTS
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        with hf_progress_bars(sys.stderr.isatty()):  # a server's log file gets no bar
            self._model = self._load(self.model_dir)
        self._version = read_policy_version(self.model_dir) or 0
        self._staged: tuple[Any, int] | None = None
        self.max_model_len = self._context_length(max_model_len)
        self.eos_ids = self._eos_ids()
        self._pending: queue.Queue[Request] = queue.Queue()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._running = 0
        self._live: set[Request] = set()  # submitted, maybe finished since (pruned on use)
        self._thread = threading.Thread(target=self._run, name="aw-engine", daemon=True)
        self._thread.start()

    # -- public API ---------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        """The version new requests will be served with."""
        with self._lock:
            return self._staged[1] if self._staged else self._version

    @property
    def running(self) -> int:
        """Requests in the running batch (for stats and tests)."""
        return self._running

    def submit(self, request: Request) -> Request:
        if not request.prompt_ids:
            raise ValueError("empty prompt")
        with self._lock:
            self._live = {r for r in self._live if not r.done}
            self._live.add(request)
        self._pending.put(request)
        return request

    @property
    def in_flight(self) -> int:
        """Requests submitted and not finished yet (queued or decoding)."""
        with self._lock:
            return sum(1 for r in self._live if not r.done)

    def abort_all(self, reason: str) -> int:
        """Cancel every request in flight, each to finish as ``abort`` with ``reason``;
        returns how many there were."""
        with self._lock:
            live = [r for r in self._live if not r.done]
        for r in live:
            r.cancel(reason)
        return len(live)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> tuple[Request, Finished]:
        """Blocking helper (tests, scripts): run one request to the end."""
        events: queue.Queue[Event] = queue.Queue()
        req = self.submit(Request(prompt_ids, params, events.put))
        while True:
            ev = events.get()
            if isinstance(ev, Finished):
                return req, ev

    def reload(self, checkpoint_dir: str | Path, policy_version: int | None = None) -> int:
        """Load new weights (same architecture); new requests use them, running ones finish
        on the old weights. Returns the new policy version (meta.json's, else current + 1).
        """
        with hf_progress_bars(False):  # one a training iteration: bars would fill the log
            model = self._load(Path(checkpoint_dir))
        if policy_version is None:
            policy_version = read_policy_version(checkpoint_dir)
        with self._lock:
            if policy_version is None:
                policy_version = (self._staged[1] if self._staged else self._version) + 1
            # Swapped in by the engine thread between batches, never under a running batch.
            self._staged = (model, policy_version)
        return policy_version

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)

    # -- internals ----------------------------------------------------------------------

    def _load(self, path: Path) -> Any:
        from transformers import AutoModelForCausalLM

        if not (path / "config.json").exists():
            raise ConfigError(f"{path}: not a model folder (no config.json)")
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=self.dtype)
        return model.to(self.device).eval()

    def _context_length(self, asked: int | None) -> int:
        """The window prompts and answers share: the model's, or less when asked (vLLM's
        ``--max-model-len``, which refuses more than the model's too)."""
        derived = int(getattr(self._model.config, "max_position_embeddings", 2048))
        if asked is None:
            return derived
        if asked < 1:
            raise ConfigError(f"--max-model-len: {asked} must be at least 1")
        if asked > derived:
            raise ConfigError(
                f"--max-model-len: {asked} is more than this model's context length, "
                f"{derived} (max_position_embeddings in {self.model_dir / 'config.json'})"
            )
        return asked

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (self._model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(src, int):
                ids.add(src)
            elif src:
                ids.update(src)
        return ids

    def _take_batch(self) -> list[Request]:
        try:
            first = self._pending.get(timeout=0.05)
        except queue.Empty:
            return []
        batch = [first]
        # A short wait lets requests sent together (n > 1, concurrent agents) share a batch.
        deadline = time.monotonic() + self.gather_window_s
        while len(batch) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                batch.append(self._pending.get(timeout=max(remaining, 0)))
            except queue.Empty:
                break
        return [r for r in batch if not self._drop_if_cancelled(r)]

    def _drop_if_cancelled(self, req: Request) -> bool:
        if req.cancelled.is_set():
            req.finish(Finished("abort", stop_reason=req.cancel_reason))
            return True
        return False

    def _run(self) -> None:
        while not self._stopping.is_set():
            batch = self._take_batch()
            if not batch:
                continue
            with self._lock:
                if self._staged:
                    self._model, self._version = self._staged
                    self._staged = None
                model, version = self._model, self._version
            try:
                self._decode(model, version, batch)
            except Exception as e:  # a bad batch must not kill the server
                self._running = 0
                for req in batch:
                    req.finish(Finished("abort", stop_reason=f"engine error: {e}"))

    def _admit(self, version: int, reqs: list[Request]) -> None:
        for req in reqs:
            req.policy_version = version
            req.generator = torch.Generator(device=self.device)
            if req.params.seed is not None:
                req.generator.manual_seed(req.params.seed)
            else:
                req.generator.seed()
            req.emit(Admitted(version))

    def _prefill(self, model: Any, reqs: list[Request]) -> Rows:
        # Left-pad so every row's next token sits in the last column.
        width = max(len(r.prompt_ids) for r in reqs)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(reqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(reqs), width), dtype=torch.long)
        for i, r in enumerate(reqs):
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        # Positions count real tokens only, so a padded row computes what it would alone.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        if any(r.params.prompt_logprobs is not None for r in reqs):
            return self._prefill_scored(model, reqs, ids, mask, positions)
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        return Rows(
            list(reqs), out.past_key_values, out.logits[:, -1, :], mask, positions[:, -1:] + 1
        )

    def _prefill_scored(
        self,
        model: Any,
        reqs: list[Request],
        ids: torch.Tensor,  # (B, T) left-padded
        mask: torch.Tensor,  # (B, T)
        positions: torch.Tensor,  # (B, T)
    ) -> Rows:
        """Prefill that also scores the prompts of the requests asking for prompt log-probs.

        The prompt runs through the model in column chunks over one KV cache (vLLM's
        chunked prefill), each keeping all its logits, so at most about
        ``prompt_logits_elements`` logits exist at once rather than (B, T, vocab). The
        model's own forward makes every logit, head transforms (soft-capping, scaling)
        included, so the scores are exactly what a plain ``model(ids).logits`` gives.
        """
        batch, width = ids.shape
        vocab = int(model.get_output_embeddings().weight.shape[0])
        step = max(1, self.prompt_logits_elements // (batch * vocab))
        want = [i for i, r in enumerate(reqs) if r.params.prompt_logprobs is not None]
        k_max = max(reqs[i].params.prompt_logprobs or 0 for i in want)
        scored: dict[int, list[PromptToken | None]] = {i: [None] for i in want}
        cache, last = None, None
        for start in range(0, width, step):
            end = min(start + step, width)
            out = model(
                input_ids=ids[:, start:end],
                attention_mask=mask[:, :end],
                position_ids=positions[:, start:end],
                past_key_values=cache,
                use_cache=True,
            )
            cache, last = out.past_key_values, out.logits[:, -1, :]
            # Column j's logits score the token in column j + 1; the last column's are the
            # next token's, sampled as usual.
            n = min(end, width - 1) - start
            if n <= 0:
                continue
            lp = torch.log_softmax(out.logits[want, :n].float(), dim=-1)  # (W, n, V)
            target = ids[want, start + 1 : start + 1 + n]  # (W, n)
            picked = lp.gather(-1, target[..., None])  # (W, n, 1)
            # vLLM's rank: how many tokens score at least as well as this one.
            columns = [picked, (lp >= picked).sum(-1, keepdim=True).to(lp.dtype)]
            if k_max:
                top_vals, top_ids = torch.topk(lp, k_max, dim=-1)  # (W, n, k_max) each
                columns += [top_ids.to(lp.dtype), top_vals]
            host = torch.cat(columns, dim=-1).double().tolist()  # (W, n, 2 + 2 * k_max)
            for w, i in enumerate(want):
                first = width - len(reqs[i].prompt_ids)  # the row's first real column
                k = reqs[i].params.prompt_logprobs or 0
                for j, row in enumerate(host[w]):
                    col = start + 1 + j
                    if col <= first:
                        continue  # padding, or the prompt's first token (already None)
                    top = zip(row[2 : 2 + k], row[2 + k_max : 2 + k_max + k], strict=True)
                    scored[i].append(
                        PromptToken(
                            reqs[i].prompt_ids[col - first],
                            max(row[0], MIN_LOGPROB),
                            int(row[1]),
                            [(int(t), max(v, MIN_LOGPROB)) for t, v in top],
                        )
                    )
        for i in want:
            reqs[i].emit(PromptScored(scored[i]))
        assert last is not None
        return Rows(list(reqs), cache, last, mask, positions[:, -1:] + 1)

    def _join_waiting(self, model: Any, version: int, rows: Rows) -> None:
        """Continuous batching: requests that arrived while a batch runs join it at the next
        step (prefilled on their own, then their cache rows are merged in)."""
        room = self.max_batch_size - len(rows.reqs)
        if room <= 0 or self._pending.empty() or not mergeable(rows.cache):
            return
        with self._lock:
            if self._staged is not None:
                return  # new weights are waiting: newcomers must not start on the old ones
        joining: list[Request] = []
        while len(joining) < room:
            try:
                req = self._pending.get_nowait()
            except queue.Empty:
                break
            if not self._drop_if_cancelled(req):
                joining.append(req)
        if not joining:
            return
        self._admit(version, joining)
        rows.merge(self._prefill(model, joining))

    @torch.inference_mode()
    def _decode(self, model: Any, version: int, batch: list[Request]) -> None:
        self._admit(version, batch)
        rows = self._prefill(model, batch)
        while rows.reqs:
            self._join_waiting(model, version, rows)
            self._running = len(rows.reqs)
            tokens = self._sample(rows.logits, rows.reqs)  # (B,)
            keep = [i for i, req in enumerate(rows.reqs) if not self._finish_if_done(req)]
            if not keep:
                self._running = 0
                return
            if len(keep) < len(rows.reqs):
                tokens = rows.select(keep, tokens)
            rows.mask = torch.cat([rows.mask, torch.ones_like(rows.next_pos)], dim=-1)
            out = model(
                input_ids=tokens[:, None],
                attention_mask=rows.mask,
                position_ids=rows.next_pos,
                past_key_values=rows.cache,
                use_cache=True,
            )
            rows.cache = out.past_key_values
            rows.logits = out.logits[:, -1, :]
            rows.next_pos = rows.next_pos + 1

    def _sample(self, logits: torch.Tensor, active: list[Request]) -> torch.Tensor:
        out = sample(logits, [r.params for r in active], [r.generator for r in active])
        for req, tok, lp, top in zip(active, out.token_ids, out.logprobs, out.top, strict=True):
            req.output_ids.append(tok)
            req.emit(TokenEvent(tok, lp, top))
        return out.ids

    def _finish_if_done(self, req: Request) -> bool:
        p = req.params
        tok = req.output_ids[-1]
        done: Finished | None = None
        if req.cancelled.is_set():
            done = Finished("abort", stop_reason=req.cancel_reason)
        elif tok in p.stop_token_ids:
            done = Finished("stop", stop_reason=tok)
        elif tok in self.eos_ids and not p.ignore_eos:
            done = Finished("stop")
        elif p.stop and (hit := self._stop_string_hit(req)) is not None:
            done = Finished("stop", stop_reason=hit)
        elif (
            len(req.output_ids) >= p.max_tokens
            or len(req.prompt_ids) + len(req.output_ids) >= self.max_model_len
        ):
            done = Finished("length")
        if done:
            req.finish(done)
            return True
        return False

    def _stop_string_hit(self, req: Request) -> str | None:
        # Incremental: a few tokens decoded a step, and exact where a fixed tail of tokens
        # was not (a 2-character CJK stop can take 6 byte tokens).
        if req.stop_strings is None:
            req.stop_strings = StopStrings(self.tokenizer, req.params.stop)
        return req.stop_strings.add(req.output_ids[-1])
