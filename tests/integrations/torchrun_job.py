"""One rank of tests/integrations/test_torchrun.py's job: `torchrun --nproc_per_node 2 torchrun_job.py OUT`.

Run in a project folder holding recipes/tiny.py and a cpu profile for it. Each rank trains the tiny workload's
model under DistributedDataParallel (gloo, CPU) through tuned_loader and tuned_step, once with the data streamed
and once kept on the device, and writes to OUT/rank<R>.pt the sample ids each of its loaders gave it in one epoch
and its weights after one step.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from autotune import load_tuned, tuned_loader, tuned_step
from autotune.workloads import load, resolve


class WithIds(Dataset):
    """The tiny data set's samples with their index: (x, y, i)."""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        x, y = self.samples[i]
        return x, y, i


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    workload = load(resolve("tiny"))
    dataset = WithIds(workload.build_dataset(Path("data")))
    seen = {}
    for placement in ("stream", "device"):
        loader = tuned_loader(dataset, recipe="tiny", device="cpu", placement=placement)
        loader.sampler.set_epoch(0)
        seen[placement] = torch.cat([ids for _, _, ids in loader]).tolist()
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = nn.parallel.DistributedDataParallel(workload.build_model())
    tuned = load_tuned("tiny", "cpu", world_size=world)
    optimizer = torch.optim.SGD(model.parameters(), lr=tuned.lr)
    step = tuned_step(model, None, optimizer, recipe="tiny", device="cpu",
                      compute_loss=lambda m, batch: nn.functional.cross_entropy(m(batch[0]), batch[1]))
    x, y, _ = next(iter(loader))
    step((x, y))
    weights = [p.detach().clone() for p in model.module.parameters()]
    torch.save({"seen": seen, "weights": weights, "lr": tuned.lr, "global_batch": tuned.global_batch_size},
               out / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
