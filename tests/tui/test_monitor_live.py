"""The monitor follows a pool while another process appends to it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from textual.widgets import Static

from agentworld.tui.monitor import MonitorScreen

from .conftest import app_for

WRITER = textwrap.dedent(
    """
    import sys
    from agentworld import records
    from agentworld.pool import Pool

    pool = Pool.open(sys.argv[1])
    w = pool.writer(name="live", commit_interval_s=0.01)
    for i in range(5):
        w.append(records.make_step(
            trajectory="tr_live", index=i, agent="live-agent",
            request={"messages": [{"role": "user", "content": "go"}]},
            response={"message": {"role": "assistant", "content": "ok"}},
        ))
        w.flush()
    print("written", flush=True)
    sys.stdin.read()  # stay alive (journal live, unsealed) until the test is done
    w.close()
    """
)


async def test_monitor_updates_while_another_process_writes(pool_path: Path) -> None:
    app = app_for(pool_path, start="monitor")
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(200):
            if isinstance(app.screen, MonitorScreen) and app.screen.snapshot:
                break
            await pilot.pause(0.02)
        monitor = app.screen
        assert monitor.snapshot.steps == 12
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(pool_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        try:
            assert writer.stdout.readline().strip() == "written"
            for _ in range(1500):  # bounded wait for the 1 s refresh + monitor tick
                if monitor.snapshot.steps == 17:
                    break
                await pilot.pause(0.02)
            assert monitor.snapshot.steps == 17
            assert monitor.snapshot.by_status.get("open") == 1
            assert "steps 17" in str(monitor.query_one("#summary", Static).render())
        finally:
            writer.stdin.close()
            writer.wait(timeout=30)
