"""A checkpoint survives a power loss: what meta.json and ``latest`` promise is on disk first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentworld.train.checkpoint import (
    LATEST,
    META,
    STATE,
    add_state,
    latest_checkpoint,
    resolve_resume,
    save_checkpoint,
    weights_once,
)


@pytest.fixture(autouse=True)
def _fresh_accelerate_state() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture
def trainer(tiny_model: Path) -> tuple[Any, Any, Any]:
    """What the loop hands ``save_checkpoint``: an Accelerator with a prepared model and
    optimizer (so ``train_state/`` has files), and the tokenizer."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    acc = Accelerator(cpu=True)
    weights_once(acc)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    model, _ = acc.prepare(model, torch.optim.AdamW(model.parameters()))
    return acc, model, AutoTokenizer.from_pretrained(str(tiny_model))


Event = tuple[str, Any]


@pytest.fixture
def disk_events(monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """Every fsync (as the (device, inode) it flushed) and every rename (as its target), in
    the order they happen."""
    events: list[Event] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        events.append(("fsync", (st.st_dev, st.st_ino)))
        real_fsync(fd)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_replace(src, dst, *args, **kwargs)
        events.append(("replace", Path(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def synced_before(events: list[Event], target: Path) -> set[tuple[int, int]]:
    """What was fsynced before the rename onto ``target`` (which must have happened)."""
    at = events.index(("replace", target))
    return {x for kind, x in events[:at] if kind == "fsync"}


def synced_after(events: list[Event], target: Path) -> set[tuple[int, int]]:
    at = events.index(("replace", target))
    return {x for kind, x in events[at:] if kind == "fsync"}


def test_every_file_of_a_checkpoint_is_on_disk_before_its_meta_json_and_latest_land(
    trainer, disk_events: list[Event], tmp_path: Path
) -> None:
    acc, model, tok = trainer
    folder = save_checkpoint(acc, model, tok, tmp_path / "ckpt-000001", {"policy_version": 1})
    written = [p for p in folder.rglob("*") if p.name != META]
    names = {p.relative_to(folder).as_posix() for p in written}
    assert {"model.safetensors", "config.json", "tokenizer.json", STATE} <= names, names
    assert any(n.startswith(f"{STATE}/random_states") for n in names), names
    before_meta = synced_before(disk_events, folder / META)
    for p in [*written, folder]:
        assert inode(p) in before_meta, p
    # meta.json: its bytes before its rename, the rename (an entry of the folder) after.
    assert inode(folder / META) in before_meta
    assert inode(folder) in synced_after(disk_events, folder / META)
    # latest: written the same way, after meta.json.
    assert (tmp_path / LATEST).read_text() == "ckpt-000001\n"
    before_latest = synced_before(disk_events, tmp_path / LATEST)
    assert inode(tmp_path / LATEST) in before_latest and inode(folder / META) in before_latest
    assert inode(tmp_path) in synced_after(disk_events, tmp_path / LATEST)


def test_a_rewrite_puts_the_unlink_of_meta_json_on_disk_before_the_new_weights(
    trainer, disk_events: list[Event], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay rewrites a checkpoint in place: were the unlink lost to a power loss, the old
    meta.json would vouch for weights cut short mid-rewrite."""
    acc, model, tok = trainer
    folder = save_checkpoint(acc, model, tok, tmp_path / "ckpt-000001", {"policy_version": 1})
    real_save = model.save_pretrained

    def save_pretrained(*args: Any, **kwargs: Any) -> None:
        disk_events.append(("weights", None))
        real_save(*args, **kwargs)

    monkeypatch.setattr(model, "save_pretrained", save_pretrained)
    del disk_events[:]
    save_checkpoint(acc, model, tok, folder, {"policy_version": 1}, with_state=False)
    first_write = disk_events.index(("weights", None))
    assert ("fsync", inode(folder)) in disk_events[:first_write]
    assert not (folder / STATE).exists()


def test_add_state_puts_the_optimizer_state_on_disk_before_meta_json_says_it_is_there(
    trainer, disk_events: list[Event], tmp_path: Path
) -> None:
    acc, model, tok = trainer
    folder = save_checkpoint(
        acc, model, tok, tmp_path / "ckpt-000001", {"policy_version": 1}, with_state=False
    )
    del disk_events[:]
    add_state(acc, folder)
    state = [*(folder / STATE).rglob("*"), folder / STATE]
    assert len(state) > 1
    before_meta = synced_before(disk_events, folder / META)
    for p in state:
        assert inode(p) in before_meta, p


def test_a_crash_while_latest_is_replaced_leaves_the_old_one_whole(
    trainer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acc, model, tok = trainer
    first = save_checkpoint(acc, model, tok, tmp_path / "ckpt-000001", {"policy_version": 1})
    real_replace = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).name == LATEST:
            raise OSError(5, "Input/output error (the crash)")
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="the crash"):
        save_checkpoint(acc, model, tok, tmp_path / "ckpt-000002", {"policy_version": 2})
    assert (tmp_path / LATEST).read_text() == "ckpt-000001\n"
    assert latest_checkpoint(tmp_path) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000001", "ckpt-000002", LATEST]


def test_a_torn_latest_falls_back_to_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    """A ``latest`` an older version tore in a crash: resumed from what is complete, without a
    traceback (stray bytes raised UnicodeDecodeError, a block of garbage "File name too
    long")."""
    run = tmp_path / "run"
    for name in ("ckpt-000001", "ckpt-000002"):
        (run / name).mkdir(parents=True)
        (run / name / META).write_text('{"policy_version": 1}')
    (run / "ckpt-000003").mkdir()  # cut short: no meta.json
    torn = [b"", b"\n", b"ckpt-0000", b"\x00" * 12, b"\xff\xfe\x00\x80ckpt", b"A" * 4096]
    for content in torn:
        (run / LATEST).write_bytes(content)
        assert latest_checkpoint(run) == run / "ckpt-000002", content
        assert resolve_resume(LATEST, run) == run / "ckpt-000002", content
