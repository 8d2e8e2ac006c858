"""The truth benchmark's parts; `python benchmarks/truth.py` runs them (its docstring says what it measures).

- ``configs``: which configs a run times, from a named set or the tuned file's profile.
- ``loop``: the plain PyTorch loop timed by hand, with no autotune code in it.
- ``data``: how the data reaches that loop (the workers' share, the device's share).
- ``timings``: what the hand loop's times say: its rate within epochs, its epoch boundaries, its slices joined.
- ``processes``: the processes it starts: each hand slice afresh, each of autotune's rounds in a trial process.
- ``rows``: one config's row, autotune's rounds interleaved with the hand slices.
- ``report``: what it prints.
- ``cli``: the command line.

Imported as ``truthbench``, not ``benchmarks.truthbench``: a script's own folder is first on ``sys.path``, so
`python benchmarks/truth.py` finds it from any working folder, and so do the spawned processes it starts.
"""
