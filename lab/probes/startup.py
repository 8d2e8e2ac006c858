"""Where a trial process's start-up goes: imports, alone and with others starting beside it.

A search waits for new processes: the command's own, a `--gpus` searcher, and the
trial processes each of them starts (on a GPU one per cudnn.benchmark value and
a spare). Each imports torch. This times, in fresh processes, the imports a trial
process makes, one process alone and N started at once, with the CPU time they
used and the page faults that read from disk (a cold or slow disk shows there);
then lists the modules whose own import took longest (`python -X importtime`).

    python lab/probes/startup.py --concurrency 1,4,8,12
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

# What the fork server imports once before it forks trial processes (autotune.procs.lifecycle.FORK_SERVER_PRELOAD).
CHILD_IMPORTS = "import torch, torchvision; from autotune.trial import parity_run, runner, serve"

PROBE = """
import json, resource, time
t0 = time.perf_counter()
{imports}
wall = time.perf_counter() - t0
u = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"wall": wall, "cpu": u.ru_utime + u.ru_stime, "majflt": u.ru_majflt}}))
"""


def probe(imports: str, n: int) -> list[dict[str, float]]:
    """Start `n` fresh interpreters at once, each timing `imports`; their reports."""
    code = PROBE.format(imports=imports)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    reports = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"probe exited with {proc.returncode}: {imports}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def line(label: str, reports: list[dict[str, float]]) -> str:
    walls = [r["wall"] for r in reports]
    cpus = [r["cpu"] for r in reports]
    faults = [r["majflt"] for r in reports]
    return (
        f"{label:<44} wall median {statistics.median(walls):5.2f} s, max {max(walls):5.2f} s; "
        f"CPU median {statistics.median(cpus):5.2f} s; disk page faults median {statistics.median(faults):,.0f}"
    )


def slowest_modules(imports: str, top: int) -> list[str]:
    """The modules with the largest own import time (microseconds), from `-X importtime`."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", imports], capture_output=True, text=True, check=True
    )
    rows = []
    for text in run.stderr.splitlines():
        if not text.startswith("import time:") or "self [us]" in text:
            continue
        self_us, cumulative_us, name = (part.strip() for part in text[len("import time:") :].split("|"))
        rows.append((int(self_us), int(cumulative_us), name.strip()))
    rows.sort(reverse=True)
    return [f"  {s / 1e6:6.3f} s own, {c / 1e6:6.3f} s with its imports  {name}" for s, c, name in rows[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,4,8", help="How many processes start at once, comma-separated.")
    parser.add_argument("--top", type=int, default=15, help="Slowest modules to list.")
    args = parser.parse_args()
    started = time.perf_counter()
    probe("import torch", 1)  # the first start after boot reads the libraries from disk: not what a search sees
    print(line("import torch, alone", probe("import torch", 1)))
    print(line("import torch, torchvision, alone", probe("import torch, torchvision", 1)))
    for n in (int(x) for x in args.concurrency.split(",")):
        print(line(f"a trial process's imports, {n} at once", probe(CHILD_IMPORTS, n)))
    print("slowest modules of a trial process's imports (-X importtime, one process):")
    print("\n".join(slowest_modules(CHILD_IMPORTS, args.top)))
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
