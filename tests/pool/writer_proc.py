"""A pool writer in its own process for crash tests: prints each record id once append returns.

Usage: python writer_proc.py POOL strict|batched COUNT COMMIT_RECORDS [NAME [KILL_AT]]
COUNT 0 means forever (until killed). Strict: a printed id is acknowledged
(fsynced). Batched: a printed id is queued only. KILL_AT names a point in sealing
(journal.fault_hook) where the process SIGKILLs itself while closing.
"""

import os
import signal
import sys

from agentworld import records
from agentworld.pool import Pool


def main() -> None:
    path, mode, count, commit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    name = sys.argv[5] if len(sys.argv) > 5 else "crash"
    if len(sys.argv) > 6:
        from agentworld.pool import journal

        kill_at = sys.argv[6]

        def die(point: str) -> None:
            if point == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

        journal.fault_hook = die
    pool = Pool.open(path, recover=False)
    w = pool.writer(durability=mode, commit_records=commit, commit_interval_s=0.05, name=name)
    tid = records.new_id("tr")
    i = 0
    out = sys.stdout
    while count == 0 or i < count:
        rec = records.make_step(
            trajectory=tid,
            index=i,
            agent="a",
            request={"messages": [{"role": "user", "content": f"q{i}"}]},
            response={"message": {"role": "assistant", "content": "x" * 50}},
        )
        w.append(rec)
        out.write(rec["id"] + "\n")
        out.flush()
        i += 1
    w.close()
    out.write("closed\n")
    out.flush()


if __name__ == "__main__":
    main()
