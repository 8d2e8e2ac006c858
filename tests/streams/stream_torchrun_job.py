"""One rank of tests/streams/test_stream_ranks.py's job: `torchrun --nproc_per_node 2 stream_torchrun_job.py OUT`.

Run in a project folder holding recipes/tiny_shards.py, its shards under data/tiny_shards (8) and data/two_shards
(2), and a cpu profile with num_workers=2. Each rank joins a gloo process group, reads one pass of the 8 shards
through tuned_loader (its own share of them), and asks tuned_loader for a loader over the 2 shards, which 2 workers
on each of 2 ranks would outnumber. It writes OUT/rank<R>.json: the keys it read, the loader's worker count, and the
error the second call raised.
"""

import json
import sys
from pathlib import Path

import torch.distributed as dist
import webdataset as wds

from autotune import tuned_loader


def stream(folder: Path) -> wds.WebDataset:
    urls = sorted(str(p) for p in folder.glob("*.tar"))
    return wds.WebDataset(urls, shardshuffle=False).to_tuple("__key__", "cls")


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = tuned_loader(stream(Path("data/tiny_shards")), recipe="tiny_shards", collate_fn=list)
    keys = [key for batch in loader for key, _ in batch]
    try:
        tuned_loader(stream(Path("data/two_shards")), recipe="tiny_shards")
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    (out / f"rank{rank}.json").write_text(json.dumps({"keys": keys, "workers": loader.num_workers,
                                                      "refused": refused}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
