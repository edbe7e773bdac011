"""The pool writer: one journal per writer, group commit, and compression while committing.

``PoolWriter`` appends records to its own journal (format and recovery in
``journal.py``), fsyncs them in groups on a committer thread, and feeds them
to a compressor thread that builds the future shard, so sealing on rotation
or close only ends the frame.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import queue
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from agentworld import records
from agentworld.errors import PoolError
from agentworld.pool.journal import (
    JOURNAL_VERSION,
    crc32,
    fault_point,
    frame,
    seal_journal,
    trailer_line,
)
from agentworld.pool.layout import JOURNAL_SUFFIX, Layout, fsync_dir
from agentworld.pool.shards import ShardBuilder, install_shard, stage_shard

log = logging.getLogger(__name__)

Durability = Literal["batched", "strict"]

_IOV_RECORDS = 341  # three buffers a record, under the usual IOV_MAX of 1024


def seal_streamed(layout: Layout, journal: _Journal, builder: ShardBuilder) -> Path:
    """Seal a journal whose records its own writer compressed as they were committed.

    The order makes every crash safe: the shard is staged under a temporary
    name, the journal gets its fsynced sealed trailer naming the shard, the
    shard is renamed to that name, and only then the journal leaves
    ``journals/``. Recovery of a journal with a trailer only removes it when
    the named shard exists, and seals its records again when it does not.

    Returns where the journal went: ``objects/tmp/`` (which nothing reads, and
    gc clears of anything an hour old), for the caller to delete once it closed
    the journal. Freeing a journal's fsynced blocks takes about 10 ms on a disk
    mounted with ``discard``, as long as the rest of sealing, so that is done
    off the caller's path (``delete_in_background``).
    """
    if builder.records:
        digest = builder.finish()
        shard = layout.shard_path(digest)
        tmp = None if shard.exists() else stage_shard(layout, digest, builder.chunks)
        journal.write(frame(trailer_line(digest, builder.records)))
        os.fsync(journal.fd)
        fault_point("trailer-written")
        if tmp is not None:
            install_shard(layout, tmp, digest)
        fault_point("shard-installed")
    builder.chunks.clear()
    # No directory fsync after moving it away: a journal that comes back after a
    # power loss carries the trailer, and its recovery only removes it again.
    layout.tmp.mkdir(parents=True, exist_ok=True)
    retired = layout.tmp / f"{journal.path.name}.sealed"
    os.replace(journal.path, retired)
    return retired


def delete_in_background(path: Path) -> None:
    """Unlink ``path`` on a thread; not a daemon, so the interpreter finishes it before exiting.

    The file must have no open descriptor left, or closing that one frees it.
    """
    threading.Thread(target=_unlink_quietly, args=(path,), name="aw-pool-unlink").start()


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError as exc:  # gc removes it later
        log.warning("could not delete sealed journal %s: %s", path, exc)


class _Journal:
    """One open journal file, created under lock so no recoverer can take it from us."""

    def __init__(self, layout: Layout, writer_id: str, seq: int) -> None:
        layout.journals.mkdir(parents=True, exist_ok=True)
        name = f"{writer_id}-{seq:04d}{JOURNAL_SUFFIX}"
        tmp = layout.journals / f".{name}"
        self.fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        header = records.dumps(
            {"journal": JOURNAL_VERSION, "writer": writer_id, "created": time.time()}
        )
        head = frame(header)
        os.write(self.fd, head)
        os.fsync(self.fd)
        self.offset = len(head)  # file size after the last complete write
        # The committed records, compressed into the future shard as they commit
        # so sealing only ends the frame; None once compressing failed (sealing
        # then reads the file, as recovery of a crashed writer does).
        self.builder: ShardBuilder | None = ShardBuilder()
        self.path = layout.journals / name
        os.replace(tmp, self.path)
        fsync_dir(layout.journals)
        self.size = 0
        self.torn = False  # a failed batch could not be cut away: no more writes here

    def cut_back(self, offset: int, size: int) -> None:
        """Truncate to ``offset`` (where a failed batch began) and count from there again.

        When even that fails the journal is marked ``torn``: the writer moves to
        a new journal before its next write (``PoolWriter._mend``), so nothing
        acknowledged ever lands behind the torn bytes, which recovery cuts.
        """
        try:
            os.ftruncate(self.fd, offset)
            os.fsync(self.fd)
        except OSError as exc:
            self.torn = True
            log.error("could not cut %s back to byte %d: %s", self.path, offset, exc)
        self.offset, self.size = offset, size

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.size += len(data)
        self.offset += len(data)

    def write_records(self, batch: list[bytes]) -> None:
        """Frame and append records with gathered writes (no joined copy of the batch)."""
        for start in range(0, len(batch), _IOV_RECORDS):
            iov: list[bytes] = []
            for data in batch[start : start + _IOV_RECORDS]:
                iov += (b"%08x " % crc32(data), data, b"\n")
            total = sum(map(len, iov))
            n = os.writev(self.fd, iov)
            if n < total:  # a short write: finish the rest the plain way
                self.size += n
                self.offset += n
                self.write(b"".join(iov)[n:])
            else:
                self.size += total
                self.offset += total


class _Sealer(threading.Thread):
    """Seals one journal off the committer's path; ``error``: what sealing raised."""

    def __init__(self, seal: Callable[[_Journal], OSError | None], journal: _Journal) -> None:
        super().__init__(name="aw-pool-seal", daemon=True)
        self._sealing = seal
        self._journal = journal
        self.error: OSError | None = None

    def run(self) -> None:
        self.error = self._sealing(self._journal)


class _Compressor:
    """A thread that compresses committed batches into their journal's shard builder.

    The committer hands each batch over before writing it, so compressing
    (which releases the GIL) overlaps the write, the fsync and the next batch
    instead of lengthening the committer's cycle.
    """

    def __init__(self) -> None:
        # Bounded: a committer ahead of the compressor waits rather than holding
        # batches in memory twice (appenders then feel the usual back-pressure).
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._thread = threading.Thread(target=self._run, name="aw-pool-compress", daemon=True)
        self._thread.start()

    def submit(self, journal: _Journal, batch: list[bytes]) -> None:
        self._queue.put((journal, batch))

    def drain(self) -> None:
        """Return once every batch submitted so far is compressed."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()

    def stop(self) -> None:
        """Compress what is left, then end the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
                continue
            journal, batch = item
            builder = journal.builder
            if builder is None:
                continue
            try:
                builder.add(batch)
            except Exception as exc:  # the file still has the records: seal from it
                log.warning("compressing %s failed, sealing will read it: %s", journal.path, exc)
                journal.builder = None


class PoolWriter:
    """Appends records to this process's own journal with group commit.

    ``batched``: ``append`` returns once the record is queued; a committer thread
    writes and fsyncs every ``commit_records`` records or ``commit_interval_s``,
    whichever comes first, so a crash loses at most that window.
    ``strict``: ``append`` returns only after the record is fsynced; concurrent
    appenders share one fsync (group commit).
    """

    def __init__(
        self,
        layout: Layout,
        *,
        durability: Durability = "batched",
        commit_records: int = 512,
        commit_interval_s: float = 0.05,
        rotate_bytes: int = 64 * 1024 * 1024,
        name: str = "w",
    ) -> None:
        if durability not in ("batched", "strict"):
            raise PoolError(f"durability must be 'batched' or 'strict', got {durability!r}")
        if commit_records < 1 or commit_interval_s <= 0 or rotate_bytes < 1024:
            raise PoolError("commit_records >= 1, commit_interval_s > 0, rotate_bytes >= 1024")
        self.layout = layout
        self.durability = durability
        self.commit_records = commit_records
        self.commit_interval_s = commit_interval_s
        self.rotate_bytes = rotate_bytes
        self.max_pending = 2 * commit_records
        name = re.sub(r"[^A-Za-z0-9_]+", "_", name)[:32] or "w"
        host = re.sub(r"[^A-Za-z0-9_]+", "_", socket.gethostname())[:32] or "host"
        self.writer_id = f"{name}-{host}-{os.getpid()}-{os.urandom(3).hex()}"
        self._seq = 0
        self._journal = _Journal(layout, self.writer_id, self._seq)
        self._cond = threading.Condition()
        self._pending: list[bytes] = []
        self._appended = 0  # sequence number of the last queued record
        self._durable = 0  # sequence number of the last fsynced record
        self._failed_upto = 0  # records up to here were lost to a write error
        self._async_waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._strict_waiting = 0
        self._closing = False
        self._closed = False
        self.last_error: BaseException | None = None
        # The error of the last commit while writes fail; None again once one succeeds
        # (a later batch, or ``probe``). ``last_error`` keeps the last error ever seen.
        self.write_error: BaseException | None = None
        # Called (on the committer thread) with the records lost to a failed write that
        # no appender is told about: batched appends that had returned already.
        self.on_lost: Callable[[list[bytes]], None] | None = None
        self.stats = {"appended": 0, "committed": 0, "commits": 0, "lost": 0, "sealed_shards": 0}
        self._sealers: list[_Sealer] = []
        # ``seal_now`` asks (a count of asks) and the committer answers each with the
        # sealer thread it started (None: the journal held no record): asked, answered.
        self._seal_asked = 0
        self._seal_answered = 0
        self._seal_thread: _Sealer | None = None
        # The last rotation's sealer since an ask was answered: a batch that reached
        # ``rotate_bytes`` sealed the records the ask is about, and the journal is empty.
        self._rotated: _Sealer | None = None
        self._seal_error: BaseException | None = None  # records to seal, and no shard made
        self._abandoned: list[_Journal] = []  # torn journals, recovered after we exit
        self._compressor = _Compressor()
        self._thread = threading.Thread(target=self._run, name="aw-pool-commit", daemon=True)
        self._thread.start()

    # -- appending ----------------------------------------------------------------

    def _enqueue(self, record: Mapping[str, Any]) -> int:
        line = records.encode(record)  # framed by the committer thread
        with self._cond:
            # Back-pressure bounds memory and what a crash can lose in batched
            # mode: at most the batch being written plus this many queued.
            while len(self._pending) >= self.max_pending and not self._closing:
                self._cond.notify_all()
                self._cond.wait()
            if self._closing:
                raise PoolError("writer is closed")
            self._pending.append(line)
            self._appended += 1
            seq = self._appended
            self.stats["appended"] += 1
            if self.durability == "strict" or len(self._pending) >= self.commit_records:
                self._cond.notify_all()
            return seq

    def append(self, record: Mapping[str, Any]) -> None:
        """Validate and append one record (RecordError names a bad field)."""
        seq = self._enqueue(record)
        if self.durability == "strict":
            self._wait(seq)

    def append_many(self, recs: list[Mapping[str, Any]]) -> None:
        """Append several records; in strict mode wait once for all of them."""
        seq = 0
        for rec in recs:
            seq = self._enqueue(rec)
        if self.durability == "strict" and seq:
            self._wait(seq)

    async def append_async(self, record: Mapping[str, Any]) -> None:
        """Like ``append`` but awaits durability without blocking the event loop."""
        line = records.encode(record)
        with self._cond:
            if self._closing:
                raise PoolError("writer is closed")
            self._pending.append(line)
            self._appended += 1
            self.stats["appended"] += 1
            seq = self._appended
            fut: asyncio.Future[None] | None = None
            if self.durability == "strict" or len(self._pending) > self.max_pending:
                # Strict: wait for the fsync. Batched but backlogged: wait too,
                # without blocking the event loop, so the backlog stays bounded.
                loop = asyncio.get_running_loop()  # here: it asks the kernel for the pid
                fut = loop.create_future()
                self._async_waiters.append((seq, loop, fut))
                self._cond.notify_all()
            elif len(self._pending) >= self.commit_records:
                self._cond.notify_all()
        if fut is not None:
            await fut

    def _wait(self, seq: int) -> None:
        with self._cond:
            self._strict_waiting += 1
            self._cond.notify_all()
            try:
                while self._durable < seq and self._failed_upto < seq:
                    self._cond.wait()
            finally:
                self._strict_waiting -= 1
            if self._durable < seq:
                raise PoolError(f"pool write failed: {self.last_error}")

    @property
    def failing(self) -> bool:
        """Whether the last write failed (and neither a later one nor ``probe`` succeeded)."""
        return self.write_error is not None

    def probe(self, size_bytes: int = 64 * 1024) -> bool:
        """Whether the pool's file system takes writes again: write, fsync and delete a
        scratch file of ``size_bytes`` in ``objects/tmp/``; on success the writer is no
        longer ``failing``. For a caller that stopped appending while writes failed."""
        path = self.layout.tmp / f"probe-{self.writer_id}"
        try:
            self.layout.tmp.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(bytes(size_bytes))
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(path)
        except OSError as exc:
            with self._cond:
                if self.write_error is not None:
                    self.write_error = exc
            return False
        with self._cond:
            self.write_error = None
        return True

    def flush(self) -> None:
        """Write and fsync everything appended so far."""
        with self._cond:
            seq = self._appended
        if seq:
            self._wait(seq)

    def seal_now(self, timeout_s: float = 120.0) -> bool:
        """Commit what is appended, then seal the journal into a shard now, as rotation does
        at ``rotate_bytes``, and go on in a new journal: a long-running writer's records
        become a shard (what `git add pool` takes) without stopping it. Blocks until the
        shard is in place; False when the journal held no record (nothing to seal).

        PoolError when the writer is closed, its writes fail, or sealing failed (the
        journal is then recovered as a crashed writer's is)."""
        with self._cond:
            if self._closing:
                raise PoolError("writer is closed")
            self._seal_asked += 1
            ticket = self._seal_asked
            self._cond.notify_all()
            end = time.monotonic() + timeout_s
            while self._seal_answered < ticket:
                left = end - time.monotonic()
                if left <= 0 or self._closing:
                    raise PoolError("the journal was not sealed: the writer is busy or closing")
                self._cond.wait(left)
            sealer, error = self._seal_thread, self._seal_error
        if error is not None:
            raise PoolError(f"the journal was not sealed: {error}")
        if sealer is None:
            return False
        sealer.join(max(0.0, end - time.monotonic()))
        if sealer.is_alive():
            raise PoolError("the journal is still being sealed")
        if sealer.error is not None:
            raise PoolError(f"sealing the journal failed (recovered later): {sealer.error}")
        return True

    # -- the committer ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                deadline = time.monotonic() + self.commit_interval_s
                while not self._closing:
                    if self._seal_asked > self._seal_answered:
                        break
                    if self._pending and (
                        self._strict_waiting
                        or self._async_waiters
                        or len(self._pending) >= self.commit_records
                    ):
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch, self._pending = self._pending, []
                seq = self._appended
                closing = self._closing
                asked = self._seal_asked
            if batch:
                self._commit(batch, seq)
            if asked > self._seal_answered and not closing:
                sealer, error = self._rotated, None
                if self._journal.size:  # records to seal
                    if self.write_error is not None or self._journal.torn:
                        error = self.write_error or PoolError("the journal is torn")
                    else:
                        sealer = self._rotate()
                        error = self.last_error if sealer is None else None
                self._rotated = None
                with self._cond:
                    self._seal_thread, self._seal_error = sealer, error
                    self._seal_answered = asked
                    self._cond.notify_all()
            if closing:
                with self._cond:
                    if not self._pending:
                        return

    def _commit(self, batch: list[bytes], seq: int) -> None:
        journal = self._journal
        start_offset, start_size = journal.offset, journal.size
        try:
            if journal.torn:
                self._mend()
                journal = self._journal
                start_offset, start_size = journal.offset, journal.size
            # Compressing starts before the write: a batch the file then fails to
            # take drops the builder below, and sealing reads the file instead.
            if journal.builder is not None:
                self._compressor.submit(journal, batch)
            journal.write_records(batch)
            os.fsync(journal.fd)
            ok = True
        except OSError as exc:
            ok = False
            self.last_error = exc
            journal.builder = None  # it may hold records the file lost
            log.error("pool write failed, %d records lost: %s", len(batch), exc)
            # Cut the file back to where this batch began, not to what the writes
            # counted: a torn line would hide every later (acknowledged) record
            # behind a checksum mismatch, and whole lines of a batch reported lost
            # would come back as duplicates of its retry.
            journal.cut_back(start_offset, start_size)
        silent: list[bytes] = []
        with self._cond:
            if ok:
                self._durable = seq
                self.write_error = None
                self.stats["committed"] += len(batch)
                self.stats["commits"] += 1
            else:
                self._failed_upto = seq
                self.write_error = self.last_error
                self.stats["lost"] += len(batch)
                if self.durability == "batched":  # strict appenders all hear of it
                    told = {w[0] for w in self._async_waiters}
                    first = seq - len(batch) + 1
                    silent = [line for i, line in enumerate(batch) if first + i not in told]
            waiters, self._async_waiters = self._async_waiters, []
            self._cond.notify_all()
        for wseq, loop, fut in waiters:
            if wseq <= seq:
                loop.call_soon_threadsafe(_settle, fut, None if ok else self.last_error)
            else:
                with self._cond:
                    self._async_waiters.append((wseq, loop, fut))
        if silent and self.on_lost is not None:
            try:
                self.on_lost(silent)
            except Exception:  # counting must not stop the committer
                log.exception("on_lost failed")
        if ok and self._journal.size >= self.rotate_bytes:
            self._rotate()

    def _mend(self) -> None:
        """Leave a journal whose failed batch could not be cut away, for a fresh one.

        Raises OSError (the batch then fails too) while no new journal can be made.
        """
        old = self._journal
        try:
            os.ftruncate(old.fd, old.offset)  # space may be back: try once more
            os.fsync(old.fd)
            old.torn = False
            return
        except OSError:
            pass
        self._seq += 1
        self._journal = _Journal(self.layout, self.writer_id, self._seq)
        old.builder = None
        # Its lock is kept until we exit; then recovery seals its valid prefix.
        self._abandoned.append(old)

    def _rotate(self) -> _Sealer | None:
        """Go on in a new journal and seal the old one on a thread (returned; None when no
        new journal could be made and writing goes on in this one)."""
        old = self._journal
        if old.builder is not None:
            self._compressor.drain()
        if old.builder is not None:
            # End the frame now, while no batch is being compressed, so the new
            # journal's builder can reuse the zstd compressor right away.
            try:
                old.builder.finish()
            except Exception as exc:
                log.warning("compressing %s failed, sealing will read it: %s", old.path, exc)
                old.builder = None
        try:
            self._seq += 1
            self._journal = _Journal(self.layout, self.writer_id, self._seq)
        except OSError as exc:
            self.last_error = exc
            old.builder = None  # its frame is ended: more records cannot join it
            log.error("journal rotation failed, continuing in the current journal: %s", exc)
            return None
        t = _Sealer(self._seal, old)
        self._sealers.append(t)
        t.start()
        self._rotated = t
        return t

    def _seal(self, journal: _Journal) -> OSError | None:
        """Seal ``journal`` into a shard; the OSError that stopped it, if one did."""
        try:
            retired = None
            if self.last_error is None and journal.builder is not None:
                retired = seal_streamed(self.layout, journal, journal.builder)
            else:
                seal_journal(self.layout, journal.path, journal.fd)
            self.stats["sealed_shards"] += 1
        except OSError as exc:
            # The journal stays on disk, locked until we exit, then recovered.
            self.last_error = exc
            log.error("sealing %s failed, it will be recovered later: %s", journal.path, exc)
            return exc
        os.close(journal.fd)
        if retired is not None:
            delete_in_background(retired)
        return None

    def close(self, *, seal: bool = True) -> None:
        """Commit what is pending, then seal the journal into a shard."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._compressor.stop()
        for t in self._sealers:
            t.join()
        self._closed = True
        for torn in self._abandoned:
            os.close(torn.fd)  # unlocked: the next Pool.open recovers its valid prefix
        if seal and self.write_error is None and not self._journal.torn:
            self._seal(self._journal)  # writes failed once but work again: seal as usual
        else:
            os.close(self._journal.fd)

    def __enter__(self) -> PoolWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(PoolError(f"pool write failed: {error}"))
