"""One searcher under ``autotune search --gpus``: ``python -m autotune.study.gpus.searcher_main RECIPE OPTIONS_JSON``.

Started by ``autotune.procs.searchers.Searcher``. Before importing torch it starts
its own trial processes (on a GPU with a spare); then it prepares
(``autotune.study.gpus.searcher``) while the search that started it sets the study up,
and waits for one line on stdin saying where the study is. If stdin closes with
no line, that search could not set the study up and says why itself: the searcher
stops its trial processes, leaves no file behind, and ends without a word; a
stop signal before the line does the same. After it, a stop signal (or its
parent's death) stops it as Ctrl-C does, giving its running trial back to the
study. See the NOTE in ``autotune.procs.lifecycle``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading


def main() -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(
            sig, signal.SIG_DFL
        )  # until the trial processes exist: nothing to tidy (also if started with SIGINT ignored)
    from autotune.procs import lifecycle

    if not lifecycle.watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM)):
        return 1  # the parent died before we could watch it

    from autotune.options import options_from_json
    from autotune.procs.early import pool_started_early
    from autotune.procs.pool import TrialPool
    from autotune.workloads import WorkloadError, resolve

    recipe, options = sys.argv[1], options_from_json(sys.argv[2])
    pool: TrialPool | None = None
    try:
        pool = pool_started_early(resolve(recipe).workload_path, options)
    except WorkloadError:
        pass  # the search meets it too, and says so

    lines: queue.Queue[str] = queue.Queue()
    leaving = threading.RLock()  # re-entrant: a signal that lands while the main thread holds it still ends the process

    def dismissed(code: int) -> None:
        """Before the study is joined there is nothing to give back: stop the trial processes, leave no file, end."""
        leaving.acquire()  # the stdin thread or a signal: the first one tidies, the other waits for the exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # whatever the main thread meets from here on is not the user's news
        os.dup2(devnull, 2)
        if pool is not None:
            pool.stop(discard=True)
        lifecycle.end_fork_server()  # it holds the pipe the search reads this searcher's lines from
        os._exit(code)

    def wait_for_the_study() -> None:
        line = sys.stdin.readline()
        if not line:  # dismissed, perhaps while still importing
            dismissed(0)
        lines.put(line)

    for sig in lifecycle.STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: dismissed(128 + signum))
    threading.Thread(target=wait_for_the_study, name="wait-for-the-study", daemon=True).start()

    from autotune.study.gpus.searcher import PROBLEMS, get_ready, work

    ready = get_ready(recipe, options, pool, echo=lambda line: print(line, flush=True))
    where = json.loads(lines.get())
    if ready.problem is not None:
        if pool is not None:
            pool.stop(discard=True)
        print(f"Error: {ready.problem}", flush=True)  # the search meets it too; said only if it goes on regardless
        return 2
    with leaving:  # not while a dismissal is under way; from here on, stop as Ctrl-C does
        lifecycle.stop_on_signals()
    try:
        work(ready, where["storage"], where["study"], pool)
    except PROBLEMS as exc:
        print(f"Error: {exc}", flush=True)
        return 2
    except KeyboardInterrupt:
        print("stopped: the running trial went back to the study", flush=True)
        return 130
    finally:
        if pool is not None:
            pool.stop()  # a no-op if the search took it
    return 0


if __name__ == "__main__":
    from autotune.procs import lifecycle

    lifecycle.exit_now(main())  # the search waits for this process to end before it times the finalists
