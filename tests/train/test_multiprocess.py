"""The same code with two CPU processes (gloo): the data split, gathers and the online broadcast.

`accelerate launch --cpu` starts one process without MPI, so this uses torchrun, which
`accelerate launch` itself drives on GPUs; ACCELERATE_USE_CPU makes Accelerate pick gloo.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import faulthandler, sys, torch
# A worker stuck past this (a run takes ~15 s) prints every thread's stack and exits, so
# a hang fails the test quickly with the place it hung in the output.
faulthandler.dump_traceback_later(180, exit=True)
torch.set_num_threads(1)
from agentworld.train.config import load_config
from agentworld.train.loop import train
train(load_config(None, {}, sys.argv[1:]))
"""


def launch(tmp_path: Path, *sets: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "run_train.py"
    script.write_text(SCRIPT)
    launcher = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if launcher is None:
        pytest.skip("no torchrun")
    # --standalone: a free rendezvous port, not 29500 (another torchrun may hold that one).
    cmd = [launcher, "--standalone", "--nproc_per_node", str(nproc), str(script), *sets]
    env_root = Path(__file__).parents[2]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=env_root,
        start_new_session=True,  # its own process group: a timeout kills the workers too
        env={"PYTHONPATH": str(env_root), "PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path),
             "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"torchrun did not finish in 300 s:\n{err[-6000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.timeout(700)  # two torchrun launches of two processes each: ~30 s when idle
def test_two_processes_train_offline_and_online(builder, tiny_model: Path, tmp_path: Path) -> None:
    for _ in range(4):
        builder.group([1.0, 0.0], turns=2)
    common = [f"model={tiny_model}", f"pool={builder.pool.root}", "progress=false", "algo=grpo"]
    out = tmp_path / "off"
    p = launch(
        tmp_path,
        *common,
        f"output_dir={out}",
        "max_steps=2",
        "epochs=",  # replay the small pool until max_steps
        "grad_accum=2",
        "batch_tokens=64",
        "max_seq_len=64",
    )
    assert p.returncode == 0, p.stderr[-8000:]
    meta = json.loads((out / "ckpt-000002" / "meta.json").read_text())
    assert len(meta["data_state"]) == 2, p.stderr[-8000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2, p.stderr[-8000:]  # only the main process logs

    online = tmp_path / "on"
    p = launch(tmp_path, *common, f"output_dir={online}", "online=true", "group_size=2",
               "groups_per_update=2", "max_steps=5", "idle_exit_s=0.5", "poll_interval_s=0.1")  # fmt: skip
    assert p.returncode == 0, p.stderr[-8000:]
    rows = [json.loads(x) for x in (online / "metrics.jsonl").read_text().splitlines()]
    assert sorted(g for r in rows for g in r["groups"]) == sorted(
        {t.first("group") for t in builder.pool.iter_trajectories()}
    ), f"{rows}\n{p.stderr[-8000:]}"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_processes_log_the_whole_update_not_process_0s(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    """Both groups on process 1: the metrics rows said loss null, reward null and
    advantages 0, the progress line `loss -`, the summary and meta.json 0 trajectories."""
    import re

    from agentworld.train.data import rank_of

    names = [g for g in (f"g{i}" for i in range(40)) if rank_of(g, 2) == 1][:2]
    builder.group([1.0, 0.0, 0.0, 1.0], group=names[0], turns=2)
    builder.group([0.2, 0.5, 0.9], group=names[1], turns=1)
    out = tmp_path / "run"
    p = launch(tmp_path, f"model={tiny_model}", f"pool={builder.pool.root}", "algo=grpo",
               f"output_dir={out}", "max_steps=50", "epochs=1", "batch_tokens=64",
               "max_seq_len=64")  # fmt: skip
    assert p.returncode == 0, p.stderr[-8000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(r["loss"] is not None and r["reward_mean"] is not None for r in rows)
    assert min(r["adv_min"] for r in rows) == pytest.approx(-0.9492, abs=1e-3)
    assert max(r["adv_max"] for r in rows) == pytest.approx(1.0441, abs=1e-3)
    assert "loss - " not in p.stderr and f"train 1/50  loss {rows[0]['loss']:.4f}" in p.stderr
    counts = json.loads((out / f"ckpt-{len(rows):06d}" / "meta.json").read_text())["counts"]
    assert (counts["trajectories"], counts["steps"], counts["merged"]) == (7, 11, 4), counts
    for key, value in (("processes", 2), ("trajectories", 7), ("steps", 11)):
        assert re.search(rf"{key}\s+│\s+{value}\s", p.stderr), p.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_processes_take_the_gradient_of_the_whole_update(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    """A group of short answers on process 0, one of long answers on process 1: each
    process divided by its own tokens and DDP averaged the two, so a short answer's token
    weighed 10x a long one's. Two processes now take one process's gradient."""
    from agentworld.train.data import rank_of

    names = [f"g{i}" for i in range(40)]
    short = next(g for g in names if rank_of(g, 2) == 0)
    long = next(g for g in names if rank_of(g, 2) == 1)
    builder.group([1.0, 0.0], group=short, turns=1, reply_tokens=2)
    builder.group([1.0, 0.0], group=long, turns=1, reply_tokens=29)
    grad_norms = []
    for nproc in (1, 2):
        out = tmp_path / f"run{nproc}"
        p = launch(tmp_path, f"model={tiny_model}", f"pool={builder.pool.root}", "algo=grpo",
                   f"output_dir={out}", "max_steps=1", "epochs=1", "max_grad_norm=1e9",
                   "progress=false", nproc=nproc)  # fmt: skip
        assert p.returncode == 0, p.stderr[-8000:]
        (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert row["rows"] == 4, row
        grad_norms.append(row["grad_norm"])
    assert grad_norms[0] > 0 and grad_norms[1] == pytest.approx(grad_norms[0], rel=1e-4)
