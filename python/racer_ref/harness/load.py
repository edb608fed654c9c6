"""Is the machine busy? The load average and the busy-machine rule behind every timing we print.

``racer-ref demo``, ``racer-ref generate`` (its speedup line) and tutorial 08 print the
1-minute load average around their timed runs and warn with :func:`timing_warnings` when other
work was competing for the CPUs: a busy machine slows RACER's many-token verify passes more
than greedy's one-token steps, so the speedups printed then are not RACER's.

Standard library only: importing it loads neither torch nor the model.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence


def load_average() -> Optional[float]:
    """The 1-minute load average, or ``None`` where the system has none (Windows)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def timing_warnings(load_average: Optional[float], cores: Optional[int]) -> List[str]:
    """Why the printed speedups may not be trusted, as sentences (empty when nothing is wrong).

    Args:
        load_average: the 1-minute load average after the runs (``None``: unknown);
            cores: CPUs (``None``: unknown).

    A busy machine is flagged: a load average above ``cores + 0.5`` (the timed program's own
    threads count for up to ``cores``), which slows RACER's many-token verify passes more than
    greedy's one-token steps. (The demo's baseline is ``model.generate`` on stock kernels, so
    "a speedup above the MAT", the check ``racer-ref bench`` and ``racer-ref generate`` make
    against our own ``ar``, does not apply there: our kernels alone make a pass faster.)
    """
    if load_average is not None and cores and load_average > cores + 0.5:
        return [f"The machine was busy (load average {load_average:.1f} on {cores} CPUs) while this ran: "
                "other work slows RACER's tree passes more than greedy's one-token steps, so these "
                "speedups are not RACER's. Rerun on a quiet machine."]
    return []


def load_report(before: Optional[float], after: Optional[float], cores: Optional[int]) -> str:
    """One line: the load averages before and after the timed runs, and the CPUs.

    >>> load_report(0.5, 2.25, 2)
    'load average (1 min): 0.50 before, 2.25 after the timed runs, 2 CPUs'
    """
    shown = ", ".join(f"{'unknown' if v is None else f'{v:.2f}'} {when}"
                      for v, when in ((before, "before"), (after, "after")))
    return f"load average (1 min): {shown} the timed runs, {cores} CPUs"


def busy_warnings(before: Optional[float], after: Optional[float], cores: Optional[int]) -> List[str]:
    """:func:`timing_warnings` for the higher of the two load averages that are known."""
    known: Sequence[float] = [v for v in (before, after) if v is not None]
    return timing_warnings(max(known) if known else None, cores)
