"""One worker under ``autotune search --gpus``: ``python -m autotune._worker RECIPE OPTIONS_JSON``.

Starts with its parent: imports, builds the data set and checks its options
while the parent does the same, then waits for one line on stdin saying where
the study is (the parent sets it up). Then it takes tickets until none is left
and ends; the parent writes the recipe. Until that line comes, SIGTERM or SIGINT
end it at once and quietly (nothing of the study is touched yet); after it, they
stop it as Ctrl-C does, giving its running trial back to the study. If stdin
closes with no line, the parent could not set the study up and says why itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # also if started with SIGINT ignored
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    parent = int(os.environ.get("AUTOTUNE_PARENT_PID", "0"))
    if parent and os.getppid() != parent:
        return 1  # the parent died before we could ask to follow it

    from autotune.recipe import RecipeError
    from autotune.scaleout import options_from_json
    from autotune.search import Search, SearchError, search_warnings_off
    from autotune.space import SpaceError
    from autotune.workload import WorkloadError

    recipe, options = sys.argv[1], options_from_json(sys.argv[2])
    search_warnings_off()
    worker: Search | None = None
    problem: str | None = None
    try:
        worker = Search(recipe, options, echo=lambda line: print(line, flush=True))
    except (WorkloadError, SpaceError, SearchError, RecipeError) as exc:
        problem = str(exc)  # the parent meets it too; said only if the parent goes on regardless
    line = sys.stdin.readline()
    if not line:
        return 2 if problem else 0
    if problem is not None or worker is None:
        print(f"Error: {problem}", flush=True)
        return 2
    where = json.loads(line)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        worker.join(where["storage"], where["study"])
        worker.open_study()
        worker.run()
    except (WorkloadError, SpaceError, SearchError, RecipeError) as exc:
        print(f"Error: {exc}", flush=True)
        return 2
    except KeyboardInterrupt:
        print("stopped: the running trial went back to the study", flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
