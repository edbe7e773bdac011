"""Copy the TUI's snapshot tests (100×30, the fixture pool) to docs/ as its screenshots.

`make screenshots` runs the snapshot tests with --snapshot-update, then this; the
screenshots are thus exactly what the tests check, and, like every screenshot of
the app (``AgentWorldApp.export_screenshot``), reference no font outside the file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "tests" / "tui" / "__snapshots__" / "test_snapshots"
# docs/tui-<name>.svg ← the snapshot test of that screen
SHOTS = {
    "monitor": "test_monitor_snapshot",
    "trajectories": "test_trajectories_snapshot",
    "inspector": "test_inspector_snapshot",
    "tokens": "test_token_view_snapshot",
    "group": "test_group_snapshot",
    "diff": "test_diff_snapshot",
    "runs": "test_runs_snapshot",
}


def main() -> None:
    for name, test in SHOTS.items():
        dest = ROOT / "docs" / f"tui-{name}.svg"
        shutil.copyfile(SNAPSHOTS / f"{test}.svg", dest)
        print(dest.relative_to(ROOT))


if __name__ == "__main__":
    main()
