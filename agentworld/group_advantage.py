"""The group-relative advantage, one definition for the trainer and the TUI's group view.

Pure Python (``aw tui`` never imports torch): what the group view shows is what
``aw train`` trains on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def group_relative(
    rewards: Sequence[float], *, scale_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """One group's advantages: A_i = r_i - mean, over the sample std + ``eps`` (GRPO).

    The sample std (n - 1) is the one GRPO's reference implementations use (TRL's
    ``torch.std`` default); Dr. GRPO leaves the std out (``scale_std=False``). A group
    of one has no baseline: its advantage is 0, as is every member's of a group whose
    rewards are all equal.
    """
    n = len(rewards)
    rs = [float(r) for r in rewards]
    if n < 2 or min(rs) == max(rs):
        # Exactly 0, not r - mean: eight rewards of 0.7 have a float mean a hair off 0.7,
        # which gave each member -1e-10 and kept the group past skip_zero_advantage.
        return [0.0] * n
    mean = sum(rs) / n
    if not scale_std:
        return [r - mean for r in rs]
    std = math.sqrt(sum((r - mean) ** 2 for r in rs) / (n - 1))
    return [(r - mean) / (std + eps) for r in rs]
