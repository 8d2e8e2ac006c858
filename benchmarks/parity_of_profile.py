"""Run the parity check on the tuned profile this machine would use, after the fact.

    cd folder-with-recipes && python benchmarks/parity_of_profile.py --recipe mnist_cnn

A search run with `--no-parity-check` lets the fastest config win unchecked. This
script trains that winner and the workload's own settings (fp32, eager, its batch
size and learning rate) from the same weights over the same data order, as the
search's own check does (in this process, with a run sized by this one candidate's
batch, where the search sizes it by its largest contender), and prints the verdict
with its numbers. Exit status 0
when the profile passes, 1 when the check rejects it.
"""

from __future__ import annotations

import argparse
import sys

import torch

from autotune import load_tuned
from autotune.parity import verdict as parity
from autotune.trial.runner import Runner
from autotune.workloads.settings import baseline_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True, help="A recipe name or path, as given to `autotune search`.")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    tuned = load_tuned(args.recipe, device)
    if tuned.profile is None:
        print(f"no tuned profile for {tuned.hardware!r}; nothing to check", file=sys.stderr)
        return 2
    workload = tuned.workload
    baseline = baseline_config(workload, device.type == "cuda")
    base_lr = float(workload.defaults["lr"])
    print(f"baseline : {baseline.describe()}, lr {base_lr:g}")
    print(
        f"candidate: {tuned.config.describe()}, lr {tuned.lr:g} ({tuned.profile.get('lr_rule', 'linear')} rule); "
        f"profile says parity {tuned.profile.get('parity', {})}"
    )
    verdict = parity.check(Runner(workload, device), baseline, base_lr, tuned.config, tuned.lr)
    print(f"parity check of that profile: {verdict.summary()}")
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
