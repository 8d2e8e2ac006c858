"""Probe: would a stricter stop rule have kept a trial's early stop near the rest of its round?

    python lab/probes/stop_replay.py [lab/results/h200_one_gpu/runs.log]

Replays the rounds a truth benchmark printed ("autotune's windows: ...") that ran to eight windows or
more. For each start offset in a round, it stops at the first window where a rule passes, and compares
the windows' mean up to there with the whole round's. The rules: the stop rule as built (halves within
3%, and the standard error of the mean within 3%), and one that asks Student's t 95% interval of the
mean to be within ±6%. Why: on an H200 host, two rounds that stopped after three windows which agreed
within ±2.2% read 10% below the hand-timed loop on either side of them (calls 65 and 66).
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131]
TOL = 0.03


def rounds(log: Path, least: int = 8) -> list[list[float]]:
    """The window rates of each round the log printed, of rounds with at least `least` windows."""
    found = []
    for line in log.read_text().splitlines():
        if (m := re.search(r"autotune's windows: ([0-9, ;]+)", line)) is None:
            continue
        for part in m.group(1).split(";"):
            rates = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", part.replace(", ", " "))]
            if len(rates) >= least:
                found.append(rates)
    return found


def halves_agree(rates: list[float]) -> bool:
    half = len(rates) // 2
    early, late = statistics.fmean(rates[:half]), statistics.fmean(rates[half:])
    return abs(late - early) / max(early, late) <= TOL


def as_built(rates: list[float]) -> bool:
    se = statistics.stdev(rates) / statistics.fmean(rates) / math.sqrt(len(rates))
    return halves_agree(rates) and se <= TOL


def student(rates: list[float]) -> bool:
    half_width = T95[len(rates) - 2] * statistics.stdev(rates) / statistics.fmean(rates) / math.sqrt(len(rates))
    return halves_agree(rates) and half_width <= 2 * TOL


def replay(found: list[list[float]], rule: Callable[[list[float]], bool], least: int = 3) -> list[float]:
    """Each early stop's error against its whole round: the mean up to the stop over the round's mean, less 1."""
    errors = []
    for rates in found:
        whole = statistics.fmean(rates)
        for offset in range(len(rates) - least + 1):
            tail = rates[offset:]
            stop = next((n for n in range(least, len(tail) + 1) if rule(tail[:n])), None)
            if stop is not None:
                errors.append(statistics.fmean(tail[:stop]) / whole - 1)
    return errors


def main() -> None:
    log = Path(sys.argv[1] if len(sys.argv) > 1 else "lab/results/h200_one_gpu/runs.log")
    found = rounds(log)
    print(f"{len(found)} rounds of eight windows or more in {log}")
    for name, rule in (("as built", as_built), ("Student's t", student)):
        errors = replay(found, rule)
        off = sum(abs(e) > 0.07 for e in errors)
        print(f"{name:>12}: {len(errors)} early stops, {off} ({off / len(errors):.0%}) more than 7% off their round")


if __name__ == "__main__":
    main()
