"""Probe hook: every trial process of a search also probes each device-resident CUDA-graph config it measured.

What it probes: why the `--gpus` finalist rounds measured mnist_cnn's fastest loop (batch 1024,
data on the GPU, CUDA graph, fp32) at 1.56M samples/s while one-GPU rounds measured up to 1.75M.
Put first on PYTHONPATH with KPROBE_OUT set, this file (Python imports `sitecustomize` at start-up)
wraps `autotune.runner.Runner.run` so that, after a device-resident CUDA-graph config is measured,
`kmeasure.probe` times it once more in the same process and appends one JSON line to KPROBE_OUT:

    PYTHONPATH=lab/probes KPROBE_OUT=/tmp/one.jsonl \
        python3 -m autotune search --recipe mnist_cnn --trials 40 --study one

Its output: lab/results/h200/scaleout_c/kernel_probe/one.jsonl (a one-GPU search) and
two.jsonl (a `--gpus 0,1` search); lab/results/h200/scaleout_c/README.md reads them. It
hooks the module layout of the code before commit 8e0457a (`autotune.runner`); that module has
moved since, so on the current layout the hook finds nothing to patch. Without KPROBE_OUT it does
nothing.
"""

import importlib.abc
import importlib.util
import os
import sys

if os.environ.get("KPROBE_OUT"):

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "autotune.runner":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            original = spec.loader.exec_module

            def exec_module(module):
                original(module)
                _patch(module)

            spec.loader.exec_module = exec_module
            return spec

    def _patch(module):
        run = module.Runner.run
        history = []

        def patched(self, config, lr, windows=None, on_window=None):
            if windows is not None:
                result = run(self, config, lr, windows, on_window)
            else:
                result = run(self, config, lr, on_window=on_window)
            history.append(f"{config.describe()} {result['samples_per_s'] / 1e6:.3f}M")
            probed = config.placement == "device" and config.cuda_graph and self.device.type == "cuda"
            if probed and not result.get("stopped_early"):
                try:
                    import kmeasure  # beside this file on PYTHONPATH

                    kmeasure.probe(self, config, lr, "child", history, result)
                except Exception as exc:  # noqa: BLE001
                    with open(os.environ["KPROBE_OUT"], "a") as f:
                        f.write('{"error": %r}\n' % repr(exc)[:300])
            return result

        module.Runner.run = patched

    sys.meta_path.insert(0, _Hook())
