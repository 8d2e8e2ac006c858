"""Does a worker count keep a stream's samples? Over one pass: none lost, none repeated, every worker yielding.

With N workers, a DataLoader runs N copies of the stream, one per worker process, and interleaves what they yield. A
stream that does not split its work by worker (``torch.utils.data.get_worker_info()``) yields every sample N times
and looks N times faster; one with fewer shards than workers leaves workers idle; one that splits wrongly loses
samples. A tuner that measures samples/s alone rewards exactly those mistakes, so before any trial every worker
count the search may try is read over one pass of a bounded part of the stream (``autotune.streams.bounded``) and
compared with the same part read in one process. A stream autotune cannot bound is read as far as each worker's first
samples: repeats across workers and idle workers show there; a lost sample does not, and the verdict says so.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import time
import warnings
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from autotune.streams.bounded import part
from autotune.streams.keys import key_of

DUPLICATED = "duplicated samples: each worker yields the whole stream; shard by `get_worker_info()`"
WHOLE_PASS_SAMPLES = 50_000  # a stream no part of which can be bounded is read whole when its pass is this short
PREFIX_PER_WORKER = 64  # else each worker's first this many samples are compared
WHOLE_PASS = "one whole pass"  # what the check read of a stream it could not bound but read to its end


@dataclasses.dataclass(frozen=True)
class PassVerdict:
    """One worker count's pass: whether it keeps the stream's samples, and what it read."""

    workers: int
    passed: bool
    reason: str  # why not, or "" when it passed
    samples: int  # samples read with `workers` workers
    what: str  # the part read: "its first 8 of 64 shards, ...", or "each worker's first 64 samples"

    def summary(self) -> str:
        outcome = "keeps the stream's samples" if self.passed else f"ruled out: {self.reason}"
        return f"num_workers={self.workers}: {outcome} ({self.samples:,} samples, {self.what})"


class _Tagged(IterableDataset):
    """The stream as each worker yields it, reduced to (the worker's id, the sample's identity): small to send."""

    def __init__(self, dataset: Any, sample_key: Callable[[Any], Any] | None) -> None:
        self.dataset, self.sample_key = dataset, sample_key

    def __iter__(self) -> Any:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        for sample in self.dataset:
            yield worker, key_of(sample, self.sample_key)


def _as_is(item: Any) -> Any:
    return item


def read(dataset: Any, workers: int, limit: int | None = None,
         sample_key: Callable[[Any], Any] | None = None) -> list[tuple[int, str]]:
    """(worker, identity) of each sample `workers` workers yield, in the order the loop receives them."""
    with warnings.catch_warnings():  # DataLoader warns of more workers than cores when made and when iterated
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")  # more workers than cores: asked
        loader = DataLoader(_Tagged(dataset, sample_key), batch_size=None, num_workers=workers, collate_fn=_as_is)
        return list(itertools.islice(loader, limit) if limit is not None else loader)


def check(dataset: Any, counts: list[int], sample_key: Callable[[Any], Any] | None = None,
          budget_s: float | None = None) -> tuple[list[PassVerdict], str]:
    """A verdict for each worker count in `counts` (0 and 1 read as one process does, and pass), and what was read.

    `budget_s`: the counts not read once it is spent are left unjudged (not returned); the search measures them as
    any other config, and says so.
    """
    started = time.monotonic()
    wanted = max([c for c in counts if c > 1], default=1)
    bounded = part(dataset, wanted)
    source = bounded.dataset if bounded is not None else dataset
    reference = read(source, 0, None if bounded is not None else WHOLE_PASS_SAMPLES + 1, sample_key)
    whole = bounded is not None or len(reference) <= WHOLE_PASS_SAMPLES
    what = bounded.what if bounded is not None else (WHOLE_PASS if whole else
                                                     f"each worker's first {PREFIX_PER_WORKER} samples")
    expected = collections.Counter(key for _, key in reference)
    verdicts = []
    for workers in sorted(set(counts)):
        if budget_s is not None and time.monotonic() - started > budget_s:
            break
        if workers <= 1:
            verdicts.append(PassVerdict(workers, True, "", len(reference), what))
            continue
        try:
            got = read(source, workers, None if whole else workers * PREFIX_PER_WORKER, sample_key)
        except Exception as exc:  # it reads in one process (the reference above), not in these workers
            verdicts.append(PassVerdict(workers, False, f"{worker_failure(exc)}; {ONE_PROCESS_READS}", 0, what))
            continue
        if whole and got and not any(key in expected for _, key in got):
            return [v for v in verdicts if v.workers <= 1], UNKEYED  # no sample read alike twice: none can be judged
        verdicts.append(_judge(workers, got, expected if whole else None, what))
    return verdicts, what


ORDER_SAMPLES = 512  # the first samples read twice to see whether a stream reorders itself from pass to pass


def reorders(dataset: Any, sample_key: Callable[[Any], Any] | None = None) -> bool:
    """Whether the stream yields its samples in another order on each pass: its first samples, read twice in one
    process as two epochs read them, come in two orders while being the same samples (an unseeded shuffle buffer).

    Where it does, every epoch of the workload's own run already sees another order, and a worker count that keeps
    its samples (``check``) interleaves them in one more: the worker count then sets no order the run would keep. A
    stream whose samples read differently each time (a random augmentation, identified by content) cannot be told
    apart from one that reorders: False, as for one whose order is fixed.
    """
    bounded = part(dataset, 1)
    source = bounded.dataset if bounded is not None else dataset
    first, second = ([key for _, key in read(source, 0, ORDER_SAMPLES, sample_key)] for _ in range(2))
    return first != second and len(set(first) & set(second)) >= len(first) // 2


# What the check says of a stream none of whose samples read the same twice (content digests of random crops).
UNKEYED = ("its samples differ each time they are read (random augmentation?), so none can be matched between two "
           "passes and no worker count was checked; declare sample_key(sample) in the workload to check them")


ONE_PROCESS_READS = "one process reads the same samples without error"  # said of a count whose workers raised


def worker_failure(exc: BaseException) -> str:
    """What a DataLoader worker raised, in one line: ``ValueError: ... in DataLoader worker process 1``, from the
    exception the loader re-raises (its first line names the worker, the worker's traceback ends with the error)."""
    head, _, trace = str(exc).partition("\nOriginal Traceback (most recent call last):\n")
    lines = [line for line in trace.splitlines() if line.strip() and not line.startswith(" ")]
    if not lines or not head.startswith("Caught "):
        return f"{type(exc).__name__}: {(head.splitlines() or [''])[0]}"
    return f"{lines[-1][:200]} in {head.removeprefix('Caught ').split(' in ', 1)[-1].rstrip('.')}"


def _judge(workers: int, got: list[tuple[int, str]], expected: collections.Counter[str] | None,
           what: str) -> PassVerdict:
    """The verdict on what `workers` workers yielded, against the one-process pass (`expected`) when it was whole."""
    by_worker: dict[int, set[str]] = collections.defaultdict(set)
    for worker, key in got:
        by_worker[worker].add(key)
    counted = collections.Counter(key for _, key in got)
    idle = [w for w in range(workers) if not by_worker[w]]
    yielding = [keys for keys in by_worker.values() if keys]
    if len(yielding) > 1 and all(keys == yielding[0] for keys in yielding):
        return PassVerdict(workers, False, DUPLICATED, len(got), what)
    if expected is None:  # each worker's first samples: a key yielded twice is one more than the stream holds
        repeated = sum(n - 1 for n in counted.values() if n > 1)
        lost = 0
    else:
        repeated = sum(max(0, n - expected[key]) for key, n in counted.items())
        lost = sum(max(0, n - counted[key]) for key, n in expected.items())
    problems = []
    if repeated:
        problems.append(f"{repeated:,} sample(s) repeated across workers")
    if lost:
        problems.append(f"{lost:,} of {sum(expected.values()):,} sample(s) lost" if expected else "")
    if idle:
        problems.append(f"worker(s) {', '.join(map(str, idle))} yielded nothing (fewer shards than workers, or "
                        f"a split that leaves them none)")
    reason = "; ".join(p for p in problems if p)
    return PassVerdict(workers, not reason, reason, len(got), what)
