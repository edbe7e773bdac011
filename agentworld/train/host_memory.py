"""Host memory: hand the trainer's freed tensor memory back to the system instead of keeping it.

PyTorch's CPU allocator is glibc malloc. glibc serves a block below its mmap
threshold from the heap, and raises that threshold to the size of any mmapped
block freed (up to 32 MiB), so after the first few frees a training step's
temporaries (a (3,500 x 1,536) fp32 MLP activation is 21 MiB) come from the heap
and stay in the process when freed: fragmented, they cannot be trimmed. On
SmolLM2-135M, one forward pass of a 3,500-token part went from 375 to 2,220 MB
RSS; with the threshold pinned at 1 MiB, to 1,151 MB (`bench/train.py --memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 1 << 20


def release_freed_tensors() -> bool:
    """Pin glibc's mmap threshold so big blocks are mmapped and unmapped when freed.

    True when it was set; False off Linux/glibc (musl, macOS), where nothing is done.
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
