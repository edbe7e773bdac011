"""The training loop, top to bottom in one function: the same code on one CPU or `accelerate launch`.

What it settles before the first update is in `preflight`; what it says of its plan and its
run, in `summary`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from agentworld.curves import PNG
from agentworld.model_folder import hf_progress_bars
from agentworld.plural import plural
from agentworld.pool.opener import open_pool
from agentworld.pool.reader import source_paths
from agentworld.train.checkpoint import (
    Retention,
    add_state,
    checkpoint_dir,
    has_state,
    load_training_state,
    prune_checkpoints,
    refuse_earlier_run,
    save_checkpoint,
    weights_once,
)
from agentworld.train.config import TrainConfig
from agentworld.train.data import (
    PoolBatches,
    dummy_batch,
    sft_reward_note,
    wanted,
)
from agentworld.train.fidelity import FidelityReport, measure_fidelity
from agentworld.train.forward import forward_loss, forward_parts, to_device, update_denominators
from agentworld.train.host_memory import release_freed_tensors
from agentworld.train.importance import ImportanceStats
from agentworld.train.interrupt import StopRequest, stop_everywhere
from agentworld.train.models import load_models
from agentworld.train.online import CursorState, OnlineUpdates, catch_up, publish
from agentworld.train.plots import CurvePainter
from agentworld.train.preflight import find_start, make_accelerator, plan_offline, require_models
from agentworld.train.sequences import SequenceStats, stop_ids_of
from agentworld.train.summary import plan_line, row_status, summary_table, update_row
from agentworld.train.tracking import METRICS, MetricsLog
from agentworld.train.update_stats import (
    Spread,
    UpdateStats,
    across_processes,
    totals_across_processes,
    version_range,
)


def _grouped(batches: Iterator[dict[str, Any]], n: int) -> Iterator[list[dict[str, Any] | None]]:
    """Updates of n micro-batches; None marks a micro-batch this process no longer has."""
    while True:
        yield [next(batches, None) for _ in range(n)]


def train(cfg: TrainConfig, *, console: Console | None = None) -> dict[str, Any]:
    """Train from the pool as ``cfg`` says; write checkpoints and metrics; return the summary."""
    require_models(cfg)
    release_freed_tensors()  # ~1 GB less RSS on CPU: see train/host_memory.py
    acc = make_accelerator(cfg)
    # Off a terminal Rich would wrap at 80 columns: a log keeps each line whole, for grep.
    console = console or Console(stderr=True, soft_wrap=not sys.stderr.isatty())
    # transformers' own bars (loading, writing a checkpoint) go with the run's progress: on
    # the main process only, not when the caller asked for none, and not into a log file
    # (tqdm's redraws would pile up there: two lines of bars every online checkpoint).
    with hf_progress_bars(acc.is_main_process and cfg.progress and sys.stderr.isatty()):
        return _train(cfg, acc, console)


def _train(cfg: TrainConfig, acc: Any, console: Console) -> dict[str, Any]:
    from accelerate.utils import gather_object, set_seed

    set_seed(cfg.seed)
    main = acc.is_main_process
    out_dir = Path(cfg.output_dir)
    if not cfg.resume and not cfg.online:  # online: a restart goes on from its cursor
        refuse_earlier_run(out_dir, METRICS)
    pool = open_pool(cfg.pool, recover=False)
    pool.fetch_all()  # an s3:// pool: every shard into the local cache first (the plan reads all)

    # -- Where to start, and (offline) the plan: checked before anything is written (a run
    # with no data or a bad resume left its folder and config.toml behind).
    start = find_start(cfg, pool, out_dir)
    resume_dir, start_step = start.resume_dir, start.step
    base_version, version = start.base_version, start.version
    cursor, cursor_state = start.cursor, start.cursor_state
    label_sizes: dict[str, int] = {}
    sources: list[tuple[str, Path]] = []
    if not cfg.online:
        offline = plan_offline(cfg, pool, start, acc.num_processes)
        sources, label_sizes, plan = offline.sources, offline.label_sizes, offline.plan
        labels, states = offline.labels, offline.states
    if main:
        console.print(Text(cfg.to_toml()))
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.toml").write_text(cfg.to_toml())

    # -- Model, optimizer, schedule: Accelerate places and wraps them (DDP, FSDP, DeepSpeed).
    model_path = str(resume_dir) if resume_dir else cfg.model
    tokenizer, model, ref = load_models(cfg, model_path)
    stop_ids = stop_ids_of(tokenizer, getattr(model, "generation_config", None))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = cfg.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
    )
    model, optimizer = acc.prepare(model, optimizer)
    # Stepped once per update by hand: Accelerate's scheduler wrapper steps once per process.
    acc.register_for_checkpointing(scheduler)
    if ref is not None:
        ref = acc.prepare_model(ref, evaluation_mode=True)
    weights_once(acc)  # the weights were just loaded from the checkpoint folder
    if resume_dir:
        note = load_training_state(acc, resume_dir, scheduler, optimizer, start_step)
        if main and note:
            console.print(note)

    # -- Data: the plan's batches (offline), or groups as they land (online).
    dataset: PoolBatches | None = None
    online: OnlineUpdates | None = None
    if cfg.online:
        if main and start.recommit and cursor is not None and resume_dir is not None:
            # Killed between a checkpoint and its cursor commit, resumed from that checkpoint.
            cursor.save(cursor_state)
            held = plural(len(cursor_state.groups), "group")
            console.print(f"resume: cursor {cfg.consumer!r} now names {resume_dir.name} ({held})")
        if main and resume_dir is not None and cursor_state.checkpoint:
            # Killed between its checkpoint and the reload: the server is a version behind.
            for line in catch_up(resume_dir, version, cfg.serve_url, cfg.proxy_url):
                console.print(line)
        online = OnlineUpdates(
            pool,
            cfg,
            tokenizer,
            acc,
            consumed=set(cursor_state.groups),
            stop_ids=stop_ids,
            current_version=lambda: version,
        )
        updates: Iterator[list[dict[str, Any] | None]] = iter(online)
    else:
        dataset = PoolBatches(
            pool,
            plan,
            labels,
            tokenizer,
            cfg,
            stop_ids=stop_ids,
            rank=acc.process_index,
            world=acc.num_processes,
            state=states[acc.process_index] if states else None,
        )
        updates = _grouped(iter(dataset), cfg.grad_accum)
        live = pool.layout.journal_paths()
        if main and live and not cfg.include_journals:
            console.print(
                f"note: {plural(len(live), 'live journal')} not read (unsealed data is not "
                "reproducible); seal them with `aw pool seal` (`--proxy URL` for a running "
                "proxy's) or --set include_journals=true"
            )
        if main:
            console.print(plan_line(plan, len(sources)))
            note = sft_reward_note(plan, cfg)
            if note is not None:
                console.print(note)

    source: Any = online if online is not None else dataset
    pad_id = source.pad_id

    def stats_now() -> tuple[int, SequenceStats]:
        """Trajectories trained and sequence counts so far, over every process (a collective:
        every process calls it, after each update and for each checkpoint)."""
        return totals_across_processes(acc, len(trained), source.stats)

    def meta_for(step: int, policy_version: int) -> dict[str, Any]:
        data_state = gather_object([dataset.state_dict()]) if dataset is not None else None
        srcs = sources or source_paths(pool.layout, journals=True)
        n_trained, s = stats_now()
        return {
            "policy_version": policy_version,
            "base_policy_version": base_version,
            "base_model": cfg.model,
            "config": cfg.to_dict(),
            "shards": [p.name for kind, p in srcs if kind == "shard"],
            "sources": [[kind, str(p.relative_to(pool.root))] for kind, p in srcs],
            "label_files": label_sizes or pool.labels.snapshot(),
            "counts": {
                "updates": step,
                "micro_batches": totals["micro_batches"],
                "sequences": totals["rows"],
                "tokens": totals["tokens"],
                "sampled_tokens": totals["sampled_tokens"],
                "trajectories": n_trained,
                "steps": s.steps,
                "merged": s.merged,
                "breaks": s.breaks,
                "rendered": s.rendered,
            },
            "data_state": data_state,
            # Online: the groups these weights hold (what --resume of this folder consumed).
            **({"groups": sorted(online.consumed)} if online is not None else {}),
            "fidelity": fidelity.__dict__ if fidelity else None,
            "mixed_precision": acc.mixed_precision,
            "created_at": time.time(),
        }

    # -- The loop.
    totals = {"micro_batches": 0, "rows": 0, "tokens": 0, "sampled_tokens": 0, "padded_tokens": 0}
    trained: set[str] = set()
    fidelity: FidelityReport | None = None
    last_ckpt: Path | None = None
    losses: list[float] = []
    retention = Retention()
    metrics = MetricsLog(out_dir, acc, start_step=start_step)
    metrics.start(cfg.to_dict(), out_dir.name)
    if main and metrics.dropped:
        console.print(
            f"metrics.jsonl: dropped {metrics.dropped} row(s) past update {start_step} "
            "(trained again from the checkpoint)"
        )

    painter = CurvePainter(out_dir)

    def saved(folder: Path, *, upto: int) -> None:
        """After a checkpoint: prune the older ones (main process), and redraw the curves."""
        if main:
            retention.add(prune_checkpoints(out_dir, cfg.keep_checkpoints, upto))
            painter.request()

    # On a terminal a bar; off one (a log file, a job's output) a line per logged update,
    # and what an online run waits for, since a bar is only drawn there once, at the end.
    shown = main and cfg.progress
    live = console.is_terminal
    progress = Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
        console=console,
        disable=not (shown and live),
    )
    task = progress.add_task("train", total=cfg.max_steps, completed=start_step, info="")

    def say(text: str) -> None:
        """A status: in the bar's text on a terminal, else a line of its own."""
        if shown:
            if live:
                progress.update(task, info=text)
            else:
                console.print(text, markup=False)

    skipped_groups = 0  # online: groups taken that gave no row (equal rewards, no reward, …)
    if online is not None:

        def waiting() -> None:
            text = f"waiting for complete groups of {cfg.group_size} ({wanted(cfg)})"
            if skipped_groups:
                text += (
                    f"; {skipped_groups} taken so far had nothing to train on "
                    "(equal rewards, no reward, or failed), skipped"
                )
            say(text)

        online.on_wait = waiting
    t_run = time.perf_counter()
    run_tokens = 0
    step = start_step
    interrupted = False
    # Offline, Ctrl-C stops at an update boundary and saves (online runs checkpoint every
    # reload_every updates, and a wait for groups would hold a graceful stop back).
    stop = StopRequest() if online is None else None
    with progress, stop or nullcontext():
        while step < cfg.max_steps:
            if stop is not None and stop_everywhere(acc, stop.requested):
                interrupted = True
                break
            micro = next(updates, None)
            if micro is None:
                break  # online: no new groups within idle_exit_s
            real = torch.tensor(sum(mb is not None for mb in micro), device=acc.device)
            n_real = int(acc.reduce(real, "sum"))
            if n_real == 0:
                if online is not None:
                    skipped_groups += len(online.current)
                    continue  # every group in this chunk was filtered out
                break  # every process ran out of data (epochs)
            filler = next((mb for mb in micro if mb is not None), None)
            micro = [mb if mb is not None else dummy_batch(filler, pad_id) for mb in micro]
            # Each micro-batch's loss is its share of the update's (divided by the update's
            # tokens or sequences), so the update's is their sum. DDP and accumulation
            # average the gradients over every slot (processes x grad_accum): each loss is
            # scaled up by that count to undo it. A process out of data fills its slots with
            # batches of weight 0, which add nothing.
            n_seqs, n_tokens = update_denominators(acc, micro)
            undo_mean = acc.num_processes * acc.gradient_accumulation_steps

            if fidelity is None:  # before the first update: see train/fidelity.py
                fidelity = measure_fidelity(model, micro, cfg, acc, version)
                if main:
                    console.print(Text(fidelity.line(), style=fidelity.style))

            model.train()
            t0 = time.perf_counter()
            # Per micro-batch, its share of the update's loss and token-mean KL and entropy.
            stats_acc: dict[str, list[float]] = {"loss": [], "kl": [], "entropy": []}
            importance = ImportanceStats()
            advs: list[float] = []
            rewards: dict[str, float] = {}  # by trajectory: its rows may span micro-batches
            counts = torch.zeros(5, device=acc.device)  # tokens, padded, sampled, rows, micro
            sampled_by: list[int] = []  # the policy versions that sampled this update's rows
            grad_norm = None
            for mb in micro:
                b = to_device(mb, acc.device)
                parts = forward_parts(b, cfg.forward_tokens)
                loss_sum, kl_sum, entropy_sum = 0.0, 0.0, 0.0
                with acc.accumulate(model):
                    for k, part in enumerate(parts):
                        # One gradient all-reduce per micro-batch, after its last part.
                        last = k == len(parts) - 1
                        with nullcontext() if last else acc.no_sync(model):
                            loss, st = forward_loss(
                                model, ref, part, cfg, n_seqs=n_seqs, n_tokens=n_tokens
                            )
                            acc.backward(loss * (b["weight"] * undo_mean))
                        loss_sum += float(loss.detach())
                        if st.get("importance") is not None and b["weight"]:
                            importance.add(st["importance"])
                        if st.get("kl_sum") is not None:
                            kl_sum += float(st["kl_sum"])
                        entropy_sum += float(st["entropy_sum"])
                    if acc.sync_gradients:
                        grad_norm = acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad()
                if b["weight"] == 0:
                    continue
                stats_acc["loss"].append(loss_sum)
                if ref is not None:
                    stats_acc["kl"].append(kl_sum / n_tokens)
                stats_acc["entropy"].append(entropy_sum / n_tokens)
                advs += b["advantages"].tolist()
                rewards.update((t, float(r)) for t, r in mb["meta"]["rewards"].items())
                m = mb["meta"]
                counts += torch.tensor(
                    [m["tokens"], m["padded_tokens"], m["sampled_tokens"], m["rows"], 1.0],
                    device=acc.device,
                )
                trained.update(m["trajectories"])
                sampled_by += m["policy_versions"]
            # fp16's loss scaler skips the optimizer step whose gradients overflowed (the
            # first ones, while it finds its scale): the schedule waits for a real step.
            if not acc.optimizer_step_was_skipped:
                scheduler.step()
            step += 1
            counts = acc.reduce(counts, "sum")
            rollout_versions = version_range(acc, sampled_by)
            imp_sums = acc.reduce(torch.tensor(importance.to_list(), device=acc.device), "sum")
            importance = ImportanceStats.from_list(imp_sums.tolist())
            dt = time.perf_counter() - t0
            tokens = int(counts[0])
            run_tokens += tokens
            for k, key in enumerate(
                ("tokens", "padded_tokens", "sampled_tokens", "rows", "micro_batches")
            ):
                totals[key] += int(counts[k])
            # This process's micro-batches only (its share of the groups): the update's are
            # the sums over every process.
            upd = across_processes(
                acc,
                UpdateStats(
                    loss=Spread.of(stats_acc["loss"]),
                    kl=Spread.of(stats_acc["kl"]),
                    entropy=Spread.of(stats_acc["entropy"]),
                    rewards=Spread.of(rewards.values()),
                    advantages=Spread.of(advs),
                ),
            )
            update_loss = upd.loss.total if upd.loss.n else None  # the micro-batches' sum
            if update_loss is not None:
                losses.append(update_loss)
            _, s = stats_now()

            if main and (step % cfg.log_every == 0 or step == cfg.max_steps):
                row = update_row(
                    cfg,
                    step,
                    upd,
                    importance,
                    counts.tolist(),
                    dt_s=dt,
                    seqs=s,
                    lr=scheduler.get_last_lr()[0],
                    grad_norm=grad_norm,
                    policy_version=version,
                    rollout_versions=rollout_versions,
                )
                if online is not None:
                    row["groups"] = online.current
                metrics.write(row)
                if live:
                    progress.update(task, info=row_status(row, cfg.max_steps, live=True))
                else:
                    say(row_status(row, cfg.max_steps, live=False))
            progress.update(task, completed=step)

            if online is not None and (step % cfg.reload_every == 0 or step == cfg.max_steps):
                # New weights -> a checkpoint -> the cursor commits the groups in it -> serve them.
                # Weights every time (the server reloads them); optimizer state every
                # state_every updates and at the last one.
                version += 1
                last_ckpt = save_checkpoint(
                    acc,
                    model,
                    tokenizer,
                    checkpoint_dir(out_dir, step),
                    meta_for(step, version),
                    with_state=step % cfg.state_every == 0 or step == cfg.max_steps,
                )
                if main:
                    cursor.save(  # type: ignore[union-attr]
                        CursorState(set(online.consumed), str(last_ckpt.resolve()), version, step)
                    )
                    online.pending.clear()
                    publish(last_ckpt, version, cfg)
                saved(last_ckpt, upto=step)
                acc.wait_for_everyone()
            elif online is None and cfg.save_every and step % cfg.save_every == 0:
                last_ckpt = save_checkpoint(
                    acc,
                    model,
                    tokenizer,
                    checkpoint_dir(out_dir, step),
                    meta_for(step, base_version + 1),
                )
                saved(last_ckpt, upto=step)
        if online is None and step < cfg.max_steps:  # the data ran out first: the bar ends
            progress.update(task, total=max(step, 1), completed=step)  # where the run did
    if main and online is None and not interrupted and start_step < step < cfg.max_steps:
        console.print(
            f"note: the data ran out after {step - start_step} updates (epochs={cfg.epochs}),"
            f" before max_steps={cfg.max_steps}"
        )

    # -- The end: a final checkpoint if the last update has none yet, then the summary.
    if step > start_step and (last_ckpt is None or last_ckpt != checkpoint_dir(out_dir, step)):
        if online is not None:
            version += 1
        final_version = version if online is not None else base_version + 1
        last_ckpt = save_checkpoint(
            acc, model, tokenizer, checkpoint_dir(out_dir, step), meta_for(step, final_version)
        )
        if online is not None and main:
            cursor.save(CursorState(set(online.consumed), str(last_ckpt.resolve()), version, step))  # type: ignore[union-attr]
            publish(last_ckpt, version, cfg)
        saved(last_ckpt, upto=step)
    elif last_ckpt is not None and not has_state(last_ckpt):
        # An online run that went idle: its last checkpoint gets the optimizer state, so a
        # restart resumes exactly.
        add_state(acc, last_ckpt)
        if main:
            retention.add(prune_checkpoints(out_dir, cfg.keep_checkpoints, step))
    metrics.close()
    if main:
        painter.close(draw=step > start_step)
        if painter.error is not None:  # matplotlib comes with the train extra
            console.print(f"note: no {PNG} drawn: {painter.error}")
    elapsed = time.perf_counter() - t_run
    n_trained, s = stats_now()
    summary = {
        "updates": step - start_step,
        "step": step,
        "tokens": run_tokens,
        "tokens_per_s": run_tokens / elapsed if elapsed > 0 else 0.0,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "trajectories": n_trained,
        "steps": s.steps,
        "merged": s.merged,
        "breaks": s.breaks,
        "rendered": s.rendered,
        "fidelity": fidelity,
        "checkpoint": str(last_ckpt) if last_ckpt else None,
        "checkpoints": retention.line() if retention.kept else None,
        "policy_version": version if online is not None else base_version + 1,
        "device": str(acc.device),
        "processes": acc.num_processes,
        "mixed_precision": acc.mixed_precision,
        "interrupted": interrupted,
    }
    if main:
        console.print(summary_table(summary))
    # Every process tears the process group down together: a worker that went ahead while
    # the main process was still writing its summary once hung in teardown past the end
    # of a two-process run (gloo, tests/train/test_multiprocess.py). The DDP wrapper and
    # the optimizer hold the group: released first, so it is gone before the interpreter
    # exits (a worker once aborted there, "terminate called without an active exception").
    acc.wait_for_everyone()
    del model, ref, optimizer, scheduler
    acc.free_memory()
    acc.end_training()
    pool.close()
    return summary
