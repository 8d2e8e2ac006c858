"""One worker under ``autotune search --gpus``: ``python -m autotune._worker RECIPE OPTIONS_JSON``.

Takes tickets of the study its parent set up until none is left, then ends; the
parent writes the recipe. It ends with its parent: SIGTERM (sent by the kernel
when the parent dies, or by anyone) stops it as Ctrl-C does, giving its running
trial back to the study.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops it even if started with SIGINT ignored
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
    try:
        worker = Search(recipe, options, echo=lambda line: print(line, flush=True))
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
