"""One worker under ``autotune search --gpus``: ``python -m autotune._worker RECIPE OPTIONS_JSON``.

Starts with its parent and, before importing torch, starts its own trial
process (and on a GPU its spare); then imports, builds the data set and checks
its options while the parent does the same, and waits for one line on stdin
saying where the study is (the parent sets it up). Then it takes tickets until
none is left and ends; the parent writes the recipe. If stdin closes with no
line, the parent could not set the study up and says why itself: the worker
stops its trial processes, leaves no file behind, and ends without a word;
SIGTERM or SIGINT before the line do the same. After it, SIGTERM (sent by the
kernel when the parent dies, or by anyone) stops it as Ctrl-C does, giving its
running trial back to the study.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import sys
import threading


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # until the trial processes exist: nothing to tidy
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # also if started with SIGINT ignored
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    parent = int(os.environ.get("AUTOTUNE_PARENT_PID", "0"))
    if parent and os.getppid() != parent:
        return 1  # the parent died before we could ask to follow it

    from autotune.ahead import pool_ahead
    from autotune.options import options_from_json
    from autotune.trial import TrialPool
    from autotune.workload import WorkloadError, resolve

    recipe, options = sys.argv[1], options_from_json(sys.argv[2])
    pool: TrialPool | None = None
    try:
        ref = resolve(recipe)
    except WorkloadError:
        pass  # the parent meets it too, and says so
    else:
        pool = pool_ahead(ref.workload_path, options)

    lines: queue.Queue[str] = queue.Queue()
    leaving = threading.RLock()  # re-entrant: a signal that lands while the main thread holds it still ends the process

    def dismissed(code: int) -> None:
        """Before the study is joined there is nothing to give back: stop the trial processes, leave no file, end."""
        leaving.acquire()  # the stdin thread or a signal: the first one tidies, the other waits for the exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # whatever the main thread meets from here on is not the user's news
        os.dup2(devnull, 2)
        if pool is not None:
            pool.close(discard=True)
        os._exit(code)

    def wait_for_the_study() -> None:
        line = sys.stdin.readline()
        if not line:  # dismissed, perhaps while still importing
            dismissed(0)
        lines.put(line)

    signal.signal(signal.SIGTERM, lambda signum, frame: dismissed(128 + signum))
    signal.signal(signal.SIGINT, lambda signum, frame: dismissed(128 + signum))
    threading.Thread(target=wait_for_the_study, name="wait-for-the-study", daemon=True).start()

    from autotune.recipe import RecipeError
    from autotune.search import Search, SearchError, search_warnings_off
    from autotune.space import SpaceError

    search_warnings_off()
    worker: Search | None = None
    problem: str | None = None
    try:
        worker = Search(recipe, options, echo=lambda line: print(line, flush=True))
    except (WorkloadError, SpaceError, SearchError, RecipeError) as exc:
        problem = str(exc)  # the parent meets it too; said only if the parent goes on regardless
    if (worker is not None and pool is not None and options.trace_baseline_first and options.parity_check
            and (pool.device, pool.cpu_share) == (worker.device, worker.machine.cpu_share)):
        # Needs no study: made while the parent sets it up, kept in it once joined.
        worker.baseline_trace = worker.make_baseline_trace(pool)
    where = json.loads(lines.get())
    if problem is not None or worker is None:
        if pool is not None:
            pool.close(discard=True)
        print(f"Error: {problem}", flush=True)
        return 2
    with leaving:  # not while a dismissal is under way; from here on, stop as Ctrl-C does
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        worker.join(where["storage"], where["study"])
        worker.open_study()
        worker.run(pool=pool)
    except (WorkloadError, SpaceError, SearchError, RecipeError) as exc:
        print(f"Error: {exc}", flush=True)
        return 2
    except KeyboardInterrupt:
        print("stopped: the running trial went back to the study", flush=True)
        return 130
    finally:
        if pool is not None:
            pool.close()  # a no-op if the search took it
    return 0


if __name__ == "__main__":
    sys.exit(main())
