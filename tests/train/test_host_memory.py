"""Freed tensor memory goes back to the system once the trainer pinned glibc's mmap threshold."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

# 16 MiB freed raises glibc's dynamic mmap threshold; then 40 blocks of 8 MiB, each followed
# by a small live block, are freed: from the heap they cannot be trimmed (fragmented).
CODE = """
import sys, torch
from agentworld.train.host_memory import release_freed_tensors
if sys.argv[1] == "1":
    assert release_freed_tensors()
def rss_kb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
big = torch.ones(4 << 20); del big
base = rss_kb()
blocks, pins = [], []
for _ in range(40):
    blocks.append(torch.ones(2 << 20))
    pins.append(torch.ones(16))
del blocks
print((rss_kb() - base) // 1024)
"""


def retained_mb(pinned: bool) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CODE, "1" if pinned else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_freed_tensors_are_returned_to_the_system() -> None:
    assert retained_mb(pinned=False) > 200  # what glibc kept before (of 320 MiB)
    assert retained_mb(pinned=True) < 50
