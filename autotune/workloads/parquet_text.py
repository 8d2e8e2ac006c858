"""Synthetic text in parquet shards, written once: what a Hugging Face ``datasets`` stream reads from local files.

``text_shards(root)`` writes, on first use, parquet files of two columns, ``text`` (a
string of words) and ``label`` (its class), under ``root/text-synthetic/train`` with
Hugging Face's shard names (``train-00000-of-00016.parquet``), and returns their paths.
Texts run from 8 to 128 words on a skewed (log-normal) spread, median about 24: the
shape of text_transformer's sequences at about a third of their length, so that a
search of them runs on a CPU. Their words are pseudo-words of two syllables from a vocabulary of
``WORDS`` (``vocabulary()``), and a third of each text's words come from its class's
band of that vocabulary, so a model can learn the class and the parity check means
something.

Each file is written under a temporary name and renamed when whole, in parallel over
the machine's cores; a marker, written last, lists them.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from pathlib import Path

import numpy as np

from autotune.workloads.datasets import building, in_parallel

SAMPLES = 32_768  # as text_transformer's data set
SHARDS = 16  # a Hugging Face stream hands each DataLoader worker whole files: up to 16 workers read
WORDS = 2046  # a vocabulary of 2,048 ids: these words, padding and an unknown word
CLASSES = 4
MIN_WORDS, MAX_WORDS = 8, 128
MEDIAN_WORDS = 24
MARK = "AUTOTUNE_SHARDS"  # lists the files once every one is whole
_CONSONANTS, _VOWELS = "bcdfghjklmnprstvz", "aeiou"


@functools.cache
def vocabulary() -> tuple[str, ...]:
    """The `WORDS` pseudo-words the texts are made of, in a fixed order: class c's band is its c-th quarter."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    pairs = [a + b for a in syllables for b in syllables]
    picked = np.random.default_rng(0).permutation(len(pairs))[:WORDS]
    return tuple(pairs[i] for i in picked)


def text_samples(root: str | Path) -> int:
    """How many texts `text_shards(root)` holds (its marker says, once written), else will hold."""
    mark = _folder(root) / MARK
    if mark.exists():
        return int(mark.read_text().split()[1])
    return int(os.environ.get("AUTOTUNE_SYNTHETIC_TEXT_SAMPLES", SAMPLES))


def text_shards(root: str | Path, shards: int = SHARDS) -> list[str]:
    """The paths of the parquet files of synthetic text under `root`, written on first use.

    AUTOTUNE_SYNTHETIC_TEXT_SAMPLES sets how many texts (by default 32,768); files already written are used as
    they are.
    """
    out = _folder(root)
    with building(out):
        mark = out / MARK
        if not mark.exists():
            write_text_shards(out, text_samples(root), shards)
        names = mark.read_text().split()[2:]  # after "samples N"
    return [str(out / name) for name in names]


def _folder(root: str | Path) -> Path:
    return Path(root) / "text-synthetic" / "train"


def write_text_shards(out: Path, samples: int, shards: int = SHARDS) -> list[str]:
    """Write `samples` texts in `shards` parquet files under `out`; returns their names."""
    count = max(1, min(shards, samples))
    if not os.environ.get("AUTOTUNE_QUIET"):  # trial processes inherit it: the user hears it once, from the search
        print(f"autotune: writing {samples:,} synthetic texts in {count} parquet files in {out} (once)",
              file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("train-*.parquet"), *out.glob(".train-*.parquet.tmp")]:  # a killed writer's, of any count
        stale.unlink()
    names = [f"train-{i:05d}-of-{count:05d}.parquet" for i in range(count)]
    jobs = [(out / name, samples // count + (i < samples % count), i) for i, name in enumerate(names)]
    in_parallel(_write_file, jobs)
    (out / MARK).write_text(f"samples {samples}\n" + "\n".join(names) + "\n")
    return names


def _write_file(path: Path, rows: int, seed: int) -> None:
    """One parquet file of `rows` texts drawn from generator `seed`; written under a temporary name, then renamed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = np.array(vocabulary())
    lengths = np.clip(rng.lognormal(math.log(MEDIAN_WORDS), 0.8, rows).astype(np.int64), MIN_WORDS, MAX_WORDS)
    labels = rng.integers(0, CLASSES, rows)
    band = WORDS // CLASSES
    texts = []
    for length, label in zip(lengths, labels):
        ids = rng.integers(0, WORDS, length)
        own = rng.random(length) < 1 / 3  # a third of the words from the class's band
        ids[own] = label * band + rng.integers(0, band, int(own.sum()))
        text = " ".join(words[ids])
        texts.append(text[0].upper() + text[1:] + ".")
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.table({"text": texts, "label": labels.astype(np.int64)}), tmp)
    os.replace(tmp, path)
