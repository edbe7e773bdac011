"""Run the `aw` CLI in this process, then report where torch did its work (CUDA memory, Accelerate).

    python tools/gpu_check/aw_cuda.py train --model ... (same arguments as `aw`)
The last stderr line is `AW_CUDA_REPORT {json}`; run.sh greps it.
"""

from __future__ import annotations

import atexit
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _report() -> None:
    info: dict = {}
    torch = sys.modules.get("torch")
    if torch is None:
        info["torch_imported"] = False
    else:
        info["cuda_initialized"] = bool(torch.cuda.is_initialized())
        if torch.cuda.is_initialized():
            info["max_memory_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 2)
            info["memory_allocated_mb"] = round(torch.cuda.memory_allocated() / 2**20, 2)
    acc_state = sys.modules.get("accelerate.state")
    if acc_state is not None:
        s = acc_state.AcceleratorState._shared_state
        info["accelerate"] = {
            k: str(s[k]) for k in ("_mixed_precision", "device", "distributed_type") if k in s
        }
    print("AW_CUDA_REPORT " + json.dumps(info), file=sys.stderr, flush=True)


atexit.register(_report)
sys.argv = ["aw", *sys.argv[1:]]
from agentworld.cli import main  # noqa: E402

main()
