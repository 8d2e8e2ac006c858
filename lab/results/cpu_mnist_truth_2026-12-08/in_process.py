import time, torch, sys
sys.path.insert(0, "/work/main/benchmarks")
from autotune.config import Config
from autotune.loop.step import Step
from autotune.loop.loader import DeviceLoader
from autotune.workloads.builtins import mnist_cnn as W
from truthbench.data import OnDevice
dev = torch.device("cpu")
ds = W.build_dataset("/tmp/autotune-data-none")
cfg = Config(batch_size=1024, placement="device", amp="bf16")
def run(kind, secs=8):
    torch.manual_seed(0)
    model = W.build_model(); opt = W.build_optimizer(model.parameters(), 0.08); crit = W.build_loss()
    if kind == "autotune":
        step = Step(model, crit, opt, cfg, dev); loader = DeviceLoader(ds, 1024, shuffle=True, device=dev)
        f = lambda b: step(b)
    else:
        loader = OnDevice(ds, 1024, dev)
        def f(b):
            x, y = b
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = crit(model(x), y)
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    it = (b for _ in iter(int, 1) for b in loader)
    for _ in range(10): f(next(it))
    t = time.perf_counter(); n = 0
    while time.perf_counter() - t < secs:
        b = next(it); f(b); n += len(b[0])
    return n / (time.perf_counter() - t)
for r in range(3):
    for k in ("hand", "autotune"):
        print(k, round(run(k)), flush=True)
from autotune.trial.timing import measure
from autotune.trial.window import loop_cpu
for r in range(2):
    torch.manual_seed(0)
    model = W.build_model(); opt = W.build_optimizer(model.parameters(), 0.08); crit = W.build_loss()
    step = Step(model, crit, opt, cfg, dev); loader = DeviceLoader(ds, 1024, shuffle=True, device=dev)
    m = measure(step, loader, cpu=loop_cpu)
    print("measure", round(m.samples_per_s), round(m.steady_samples_per_s), flush=True)
    print("hand", round(run("hand")), flush=True)
