"""The online loop's data side: complete groups as they land, each consumed once across restarts.

A consumer cursor in ``pool/state/cursors/<name>.json`` names the groups
already trained on and the checkpoint that holds those updates. It is
rewritten atomically right after each checkpoint, so after a crash the
trainer restarts from that checkpoint and re-reads only groups whose updates
were lost with it: every group lands in the weights exactly once.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import CorruptDataError, UpstreamError
from agentworld.pool import Pool, Selection
from agentworld.train.advantages import group_advantages, scale_std_for
from agentworld.train.checkpoint import write_json_atomic
from agentworld.train.config import TrainConfig
from agentworld.train.data import collate, rank_of
from agentworld.train.sequences import Row, SequenceStats, trajectory_rows

ENDED = ("done", "failed", "timeout", "cancelled")


@dataclass
class CursorState:
    groups: set[str] = field(default_factory=set)
    checkpoint: str | None = None
    policy_version: int | None = None
    updates: int = 0


class Cursor:
    """A named consumer's position in a pool, stored as JSON beside the pool's data."""

    def __init__(self, pool_root: Path, name: str) -> None:
        self.path = pool_root / "state" / "cursors" / f"{name}.json"

    def load(self) -> CursorState:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return CursorState()
        except ValueError as exc:
            raise CorruptDataError(str(self.path), f"not valid JSON: {exc}") from None
        return CursorState(
            groups=set(raw.get("groups", [])),
            checkpoint=raw.get("checkpoint"),
            policy_version=raw.get("policy_version"),
            updates=int(raw.get("updates", 0)),
        )

    def save(self, state: CursorState) -> None:
        write_json_atomic(
            self.path,
            {
                "groups": sorted(state.groups),
                "checkpoint": state.checkpoint,
                "policy_version": state.policy_version,
                "updates": state.updates,
            },
        )


def complete_groups(
    pool: Pool, cfg: TrainConfig, consumed: set[str]
) -> list[tuple[str, list[str]]]:
    """Groups not yet consumed whose ``group_size`` trajectories have all ended, oldest first."""
    idx = pool.index()  # incremental: new shards and journal tails only
    sel = Selection(agent=cfg.agent, dataset=cfg.dataset, split=cfg.split, status=ENDED)
    members: dict[str, list[tuple[float, str]]] = {}
    for row in idx.trajectories(sel, sort="time", descending=False, limit=None):
        group = row["group"]
        if group is None or group in consumed:
            continue
        members.setdefault(group, []).append((row["last_at"] or 0.0, row["id"]))
    done = [
        (max(m)[0], g, [tid for _, tid in m])
        for g, m in members.items()
        if len(m) >= cfg.group_size
    ]
    return [(g, tids) for _, g, tids in sorted(done)]


def split_rows(rows: list[Row], k: int) -> list[list[Row]]:
    """Rows sorted by length, cut into k contiguous parts of near-equal count (some may be empty)."""
    rows = sorted(rows, key=len)
    size, extra = divmod(len(rows), k)
    out, i = [], 0
    for j in range(k):
        n = size + (j < extra)
        out.append(rows[i : i + n])
        i += n
    return out


class OnlineUpdates:
    """Yields one update at a time: ``grad_accum`` micro-batches built from fresh complete groups."""

    def __init__(
        self,
        pool: Pool,
        cfg: TrainConfig,
        tokenizer: Any,
        accelerator: Any,
        *,
        consumed: set[str],
        stop_ids: frozenset[int],
        current_version: Any,
    ) -> None:
        self.pool, self.cfg, self.tokenizer, self.acc = pool, cfg, tokenizer, accelerator
        self.consumed = consumed  # committed (in a checkpoint) + pending (since the last one)
        self.pending: set[str] = set()
        self.current: list[str] = []  # groups of the update being trained
        self.stop_ids = stop_ids
        self.current_version = current_version  # callable -> int (staleness window moves)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.stats = SequenceStats()
        # Called (main process) when a wait for new groups begins: the run says what it waits for.
        self.on_wait: Callable[[], None] | None = None

    def _next_chunk(self) -> list[tuple[str, list[str]]] | None:
        """On the main process: wait for complete groups; None when idle past idle_exit_s."""
        waited_since = time.monotonic()
        told = False
        while True:
            groups = complete_groups(self.pool, self.cfg, self.consumed)
            if groups:
                return groups[: self.cfg.groups_per_update]
            if not told and self.on_wait is not None:
                self.on_wait()
                told = True
            if self.cfg.idle_exit_s and time.monotonic() - waited_since >= self.cfg.idle_exit_s:
                return None
            time.sleep(self.cfg.poll_interval_s)

    def _rows(self, chunk: list[tuple[str, list[str]]]) -> list[Row]:
        from agentworld.train.data import infra_failure, selection_for

        cfg = self.cfg
        sel = selection_for(cfg, self.current_version())
        rows: list[Row] = []
        for group, tids in chunk:
            if rank_of(group, self.acc.num_processes) != self.acc.process_index:
                continue
            trajs = [self.pool.get_trajectory(tid) for tid in tids]
            trajs = [t for t in trajs if sel.admits(t)]
            if not cfg.include_infra_failures:  # not the model's doing: no advantage
                trajs = [t for t in trajs if infra_failure(t) is None]
            if cfg.algo != "sft":
                trajs = [t for t in trajs if t.reward is not None]
                advs = group_advantages(
                    [float(t.reward) for t in trajs],
                    [group] * len(trajs),
                    scale_std=scale_std_for(cfg.normaliser),
                )
            else:
                advs = [1.0] * len(trajs)
            for t, adv in zip(trajs, advs, strict=True):
                if cfg.algo != "sft" and adv == 0.0 and cfg.skip_zero_advantage:
                    continue
                out, stats = trajectory_rows(
                    t.steps,
                    self.tokenizer,
                    trajectory=t.id,
                    group=group,
                    stop_ids=self.stop_ids,
                    merge=cfg.merge,
                    max_seq_len=cfg.max_seq_len,
                )
                self.stats.add(stats)
                version = t.summary(texts=False)["policy_max"]
                for r in out:
                    r.advantage, r.reward, r.policy_version = adv, t.reward, version
                rows.extend(out)
        return rows

    def __iter__(self) -> Iterator[list[dict[str, Any] | None]]:
        from accelerate.utils import broadcast_object_list

        while True:
            box: list[Any] = [self._next_chunk() if self.acc.is_main_process else None]
            broadcast_object_list(box)
            chunk = box[0]
            if chunk is None:
                return
            self.current = [group for group, _ in chunk]
            self.consumed.update(self.current)
            self.pending.update(self.current)
            parts = split_rows(self._rows(chunk), self.cfg.grad_accum)
            yield [collate(p, self.pad_id) if p else None for p in parts]


def post_json(
    url: str, body: dict[str, Any], timeout_s: float = 120.0, *, refused_retry_s: float = 0.0
) -> dict[str, Any]:
    """POST JSON to `aw serve` / the proxy; failures become one clear UpstreamError. A
    refused connection (a server restarting) is tried again for ``refused_retry_s``."""
    deadline = time.monotonic() + refused_retry_s
    while True:
        try:
            return _call("POST", url, body, timeout_s)
        except _Refused as exc:
            if time.monotonic() >= deadline:
                raise UpstreamError(str(exc)) from None
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def get_json(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """GET JSON from `aw serve` / the proxy; failures become one clear UpstreamError."""
    return _call("GET", url, None, timeout_s)


class _Refused(UpstreamError):
    """Nothing listens at the address (yet): a server that is starting or restarting."""


def _call(method: str, url: str, body: dict[str, Any] | None, timeout_s: float) -> dict[str, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        raise UpstreamError(f"{method} {url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        if isinstance(getattr(exc, "reason", exc), ConnectionRefusedError):
            raise _Refused(f"{method} {url}: {exc}") from None
        raise UpstreamError(f"{method} {url}: {exc}") from None
    try:
        out = json.loads(data) if data else {}
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def publish(checkpoint: Path, version: int, cfg: TrainConfig) -> None:
    """Tell the server to load the new weights, then stamp new rollouts with their version.

    A server or proxy that cannot be told (after ``cfg.reload_retry_s`` of refused
    connections: a restart) stops the run: its rollouts would come from a policy the trainer has left. The error says nothing is lost (the checkpoint and the
    cursor naming it are written first) and that a restart sends the reload again.
    """
    retry = cfg.reload_retry_s
    try:
        if cfg.serve_url:
            body = {"path": str(checkpoint.resolve())}
            post_json(cfg.serve_url + "/aw/reload", body, refused_retry_s=retry)
        if cfg.proxy_url:
            post_json(cfg.proxy_url + "/aw/policy", {"version": version}, refused_retry_s=retry)
    except UpstreamError as exc:
        raise UpstreamError(
            f"{exc}; {checkpoint.name} (policy version {version}) is saved and its groups "
            "committed: restarting `aw train --online` brings the server and proxy to it"
        ) from None


def _version_at(url: str) -> int | None:
    """The policy version a server or proxy says it is at; None when it cannot say (an engine
    without `/aw/version`, or one not up yet: then the reload is sent anyway)."""
    try:
        v = get_json(url).get("policy_version")
    except UpstreamError:
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def catch_up(
    checkpoint: Path, version: int, serve_url: str | None, proxy_url: str | None
) -> list[str]:
    """On start, bring the server and the proxy to the trainer's checkpoint and version.

    A trainer killed after its checkpoint (and cursor) but before ``publish`` left them a
    version behind; one whose cursor commit was lost left them ahead, on weights it is
    about to train again. Either way rollouts would be stamped with a version the
    trainer's weights are not. Returns a line per correction made.
    """
    lines = []
    if serve_url:
        at = _version_at(serve_url.rstrip("/") + "/aw/version")
        if at != version:
            post_json(serve_url.rstrip("/") + "/aw/reload", {"path": str(checkpoint.resolve())})
            lines.append(
                f"catch-up: {serve_url} was at policy version {at if at is not None else '?'}; "
                f"reloaded {checkpoint.name} (version {version})"
            )
    if proxy_url:
        at = _version_at(proxy_url.rstrip("/") + "/aw/policy")
        if at != version:
            post_json(proxy_url.rstrip("/") + "/aw/policy", {"version": version})
            lines.append(f"catch-up: {proxy_url} stamped version {at}; now {version}")
    return lines
