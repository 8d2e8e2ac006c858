"""Which configs the truth benchmark times: a named set (`--configs`), or the tuned file's profile for this hardware."""

from __future__ import annotations

import re
from pathlib import Path

from autotune.config import Config
from autotune.tuned import file as tuned_file


def config_sets(cores: int, bs: int) -> dict[str, dict[str, Config]]:
    """Every named set of `--configs` but `tuned`, each config by the name its row prints, at batch size `bs`."""
    fast = dict(cudnn_benchmark=True, channels_last=True, amp="bf16", pin_memory=True)
    return {
        # From 0 workers to all cores, prefetch 2 to 8, fp32 and bf16 with channels_last.
        "default": {
            "workload's own (4 workers, pinned, fp32)": Config(bs, num_workers=4, pin_memory=True, prefetch_factor=2),
            "0 workers, fp32": Config(bs),
            "8 workers, prefetch 8, persistent, bf16+CL": Config(bs, num_workers=8, prefetch_factor=8,
                                                                 persistent_workers=True, **fast),
            f"{cores - 1} workers, prefetch 2, bf16+CL": Config(bs, num_workers=cores - 1, prefetch_factor=2, **fast),
            f"{cores} workers, prefetch 4, persistent, fp32": Config(bs, num_workers=cores, prefetch_factor=4,
                                                                     persistent_workers=True, pin_memory=True,
                                                                     cudnn_benchmark=True),
        },
        # The hand-tuned sweep a winner is held against: workers 8, 12, cores-1 and cores, fp32 and bf16+CL.
        "sweep": {
            f"{w} workers, {'bf16+CL' if bf16 else 'fp32'}": Config(
                bs, num_workers=w, prefetch_factor=2, persistent_workers=True, pin_memory=True, cudnn_benchmark=True,
                **({"channels_last": True, "amp": "bf16"} if bf16 else {}))
            for w in (8, 12, cores - 1, cores) for bf16 in (False, True)
        },
        # The hand sweep a search's winner is held against (issue 44): workers 8 to all cores, each with six loops
        # across device_normalize, decode (host, device, half and half), amp, channels_last and compile. 24 rows.
        "wide": {
            f"{w} workers, {name}": Config(bs, num_workers=w, prefetch_factor=4, persistent_workers=True,
                                           pin_memory=True, cudnn_benchmark=True, **knobs)
            for w in sorted({8, 12, cores - 1, cores})
            for name, knobs in (
                ("fp32", {}),
                ("fp32+CL, uint8 normalized on the device", dict(channels_last=True, device_normalize=True)),
                ("bf16+CL, uint8 normalized on the device", dict(channels_last=True, amp="bf16",
                                                                 device_normalize=True)),
                ("bf16+CL, uint8, compiled", dict(channels_last=True, amp="bf16", device_normalize=True,
                                                  compile="default")),
                ("bf16+CL, gpu decode, compiled", dict(channels_last=True, amp="bf16", decode="gpu",
                                                       compile="default")),
                ("bf16+CL, half gpu decode, compiled", dict(channels_last=True, amp="bf16", decode="gpu",
                                                            decode_share=0.5, compile="default")),
            )
        },
        # The two decode paths side by side, with as many workers as the cores leave one for the loop.
        "decode": {
            f"{cores - 1} workers, {where} decode, bf16+CL": Config(
                bs, num_workers=cores - 1, prefetch_factor=2, persistent_workers=True, decode=where, **fast)
            for where in ("gpu", "cpu")
        },
        # Hybrid decode: a share of each batch decoded on the device, the rest by the workers (loop.hybrid_decode),
        # beside both paths alone; compiled, so the step is not what limits them.
        "hybrid": {
            f"{cores - 1} workers, {share:.0%} decoded on the device, bf16+CL, compiled": Config(
                bs, num_workers=cores - 1, prefetch_factor=4, persistent_workers=True, compile="default",
                decode="cpu" if share == 0 else "gpu", decode_share=share or 1.0, **fast)
            for share in (0.0, 0.25, 0.5, 0.75, 1.0)
        },
        # Workers that hand over uint8 images (ToTensor and Normalize on the device) against workers that make floats.
        "pixels": {
            f"{w} workers, prefetch 4, {'uint8, normalized on the device' if on else 'float32 from the workers'}, "
            f"bf16+CL": Config(bs, num_workers=w, prefetch_factor=4, persistent_workers=True, device_normalize=on,
                               **fast)
            for w in (cores - 1, cores) for on in (True, False)
        },
        # The device decode path by its workers, who only read bytes: how many it needs on a host with many cores.
        "gpu_workers": {
            f"{w} workers, gpu decode, bf16+CL": Config(
                bs, num_workers=w, prefetch_factor=4, persistent_workers=True, decode="gpu", **fast)
            for w in sorted({2, 4, 8, cores - 1})
        },
    }


def tuned(tuned_path: Path, hardware: str, own: Config) -> dict[str, Config]:
    """`--configs tuned`: the config of the tuned file's profile for `hardware`, named by its knobs, then the
    workload's own settings `own`: the speed-up the profile states is the first row's rate over the second's."""
    profile = tuned_file.match(tuned_file.read(tuned_path), hardware)
    if profile is None:
        raise SystemExit(f"{tuned_path} has no profile for {hardware}")
    config = tuned_file.knobs_to_config(profile["knobs"])
    return {f"tuned: {config.describe()}": config, f"workload's own: {own.describe()}": own}


def chosen(configs: dict[str, Config], match: str, only: int | None) -> dict[str, Config]:
    """The configs whose name the regular expression `match` finds (`--match`), the first `only` of them (`--only`)."""
    return dict([item for item in configs.items() if re.search(match, item[0])][:only])
