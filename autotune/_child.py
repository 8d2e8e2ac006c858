"""The trial child: ``python -m autotune._child RECIPE_PATH DEVICE CPU_SHARE``.

Reads one JSON request per line on stdin (a trial to measure, or a parity run
to train, see autotune.parity), runs it, and writes JSON events
on the file descriptor given in AUTOTUNE_EVENTS_FD (stdout stays free for the
workload's own prints). After a failure it exits: a CUDA context that saw an
error or an OOM is not trusted with the next trial.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any


def _die_with_parent(parent: int) -> None:
    """The search may be killed with SIGKILL; its trial processes must not outlive it.

    A thread watches for the parent to go, then kills this process group (this child
    and its DataLoader workers). Not PR_SET_PDEATHSIG: that fires when the parent's
    *thread* that started us ends, and finalist rounds start children from worker threads.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    launched = float(os.environ.get("AUTOTUNE_LAUNCHED", time.time()))
    entered = time.time()
    recipe_path, device_name, cpu_share = sys.argv[1], sys.argv[2], int(sys.argv[3])
    parent = int(os.environ.get("AUTOTUNE_PARENT_PID", "0"))
    if parent and os.getppid() != parent:
        os._exit(1)  # the parent died before we could watch it
    if parent:
        _die_with_parent(parent)
    events = os.fdopen(int(os.environ["AUTOTUNE_EVENTS_FD"]), "w", buffering=1)

    def send(**event: Any) -> None:
        events.write(json.dumps(event) + "\n")

    import torch

    if cpu_share < torch.get_num_threads():
        # Under --gpus the workers share the host: each measures within its share of the cores, as the
        # profile states. torch's intra-op pool would size itself to the whole host and contend with
        # the other workers' (a baseline measured beside another round ran at a third of its speed).
        torch.set_num_threads(cpu_share)

    from autotune import parity
    from autotune.config import Config
    from autotune.measure import Windows
    from autotune.runner import Runner, classify_failure
    from autotune.trial import NOTE
    from autotune.workload import RecipeRef, load

    imported = time.time()

    try:
        path = Path(recipe_path)
        workload = load(RecipeRef(path.stem, path, path.with_suffix(".tuned.toml"), False))
        device = torch.device(device_name)
        if device.type == "cuda":
            # Streams and graph capture follow the current device; with --device 1 it must be that one.
            torch.cuda.set_device(device)
        runner = Runner(workload, device, cpu_share=cpu_share)
        if device.type == "cuda":
            torch.zeros(1, device=device)  # the CUDA context: created now, timed below, not in the first trial
        context = time.time()
        runner.dataset  # noqa: B018  (build it now, outside any trial's clock)
    except BaseException as exc:  # noqa: BLE001  (anything that stops start-up is the reason)
        traceback.print_exc()
        send(event="failed", reason=classify_failure(exc))
        sys.exit(1)
    ready = time.time()
    # What a start-up costs, for whoever reads this log: the search waits this long for a new trial process.
    print(f"{NOTE}trial process {os.getpid()} on {device_name}: ready {ready - launched:.1f} s after launch (Python "
          f"{entered - launched:.1f} s, imports {imported - entered:.1f} s, workload and {device.type} start-up "
          f"{context - imported:.1f} s, data set {ready - context:.1f} s)", flush=True)
    send(event="ready")
    probe_set = None

    for line in sys.stdin:
        request = json.loads(line)
        if request.get("cmd") == "quit":
            break
        if request.get("cmd") == "release":
            # The pool's other process (autotune.trial.plan_class) is about to measure on this GPU: its trial
            # must have the memory a single process would, or a batch size that fits would fail as OOM.
            send(event="released", datasets=runner.release())
            continue
        if request.get("cmd") == "parity":
            try:
                if probe_set is None:
                    probe_set = parity.probe(runner.dataset)
                config = Config.from_dict(request["config"])
                trace = parity.run_trace(runner.build, config, request["lr"], request["samples"], probe_set, request["probe_batch"])
            except BaseException as exc:  # noqa: BLE001
                traceback.print_exc()  # the whole story goes to this child's log file
                send(event="failed", reason=classify_failure(exc))
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1)
            send(event="trace", trace=trace.as_dict())
            continue

        def on_window(i: int, rate: float) -> bool:
            send(event="window", index=i, rate=rate)
            answer = sys.stdin.readline()
            return not answer or json.loads(answer).get("cmd") in ("stop", "quit")

        try:
            config = Config.from_dict(request["config"])
            result = runner.run(config, request["lr"], Windows(**request.get("windows", {})), on_window)
        except BaseException as exc:  # noqa: BLE001
            traceback.print_exc()  # the whole story goes to this child's log file
            send(event="failed", reason=classify_failure(exc))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)  # skip DataLoader/CUDA teardown that may hang after a fault
        send(event="result", result=result)

    # Asked to quit (or the search closed our stdin): nothing is left to keep, so skip the interpreter's
    # teardown, which with torch loaded takes a second or more; the search waits for this exit.
    events.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
