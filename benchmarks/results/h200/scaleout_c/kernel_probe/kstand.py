# Fresh processes measuring the fast loop as a trial does, then probed: GPU 0, GPU 1, both at once.
import sys, time
from pathlib import Path
import torch
from autotune.config import Config
from autotune.measure import Windows
from autotune.runner import Runner
from autotune.workload import resolve, load
sys.path.insert(0, str(Path(__file__).parent))
import kmeasure

dev, share, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if share < torch.get_num_threads():
    torch.set_num_threads(share)
torch.cuda.set_device(torch.device(dev))
runner = Runner(load(resolve("mnist_cnn")), torch.device(dev), cpu_share=share)
runner.dataset
cfg = Config(batch_size=1024, placement="device", cuda_graph=True)
hist = []
for i in range(2):
    r = runner.run(cfg, 0.08, Windows(window_s=0.2))
    hist.append(f"{r['samples_per_s']/1e6:.3f}M")
rec = kmeasure.probe(runner, cfg, 0.08, tag, hist, r)
print(tag, hist, "host", rec["host_us"], "wall", rec["wall_us"], "gpu", rec["gpu_event_us"], "replay", rec["replay_us"], rec["profile"], flush=True)
