"""autotune export: a profile in Hugging Face, Lightning and plain PyTorch terms, with what each cannot express."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.config import Config
from autotune.tuned import file as tuned_file
from autotune.tuned.export import export_profile, render

PROFILE = {
    "samples_per_s": 40000.0,
    "baseline_samples_per_s": 10000.0,
    "speedup": 4.0,
    "spread": 0.02,
    "lr": 0.4,
    "lr_rule": "linear",
    "cpu_share": 8,
    "knobs": tuned_file.config_to_knobs(
        Config(batch_size=512, num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=4,
               cudnn_benchmark=True, channels_last=True, amp="bf16", cuda_graph=True, device_normalize=True)
    ),
    "versions": {"torch": "2.14"},
}


def test_hf_gets_training_arguments_and_the_lost_knobs_with_the_files_rates() -> None:
    item = export_profile("tiny", "NVIDIA H200", PROFILE, "hf", shuffle=True)
    assert item.kwargs == {
        "per_device_train_batch_size": 512,
        "learning_rate": 0.4,
        "dataloader_num_workers": 4,
        "dataloader_pin_memory": True,
        "dataloader_persistent_workers": True,
        "dataloader_drop_last": False,
        "bf16": True,
        "fp16": False,
        "dataloader_prefetch_factor": 4,
    }
    assert item.loader_kwargs == {}
    assert sorted(item.code) == ["channels_last", "cudnn_benchmark"]
    assert [(lost.knob, lost.value) for lost in item.lost] == [("device_normalize", True), ("cuda_graph", True)]
    assert item.cost == [
        "measured with every tuned knob: 40,000 samples/s (spread ±2%).",
        "the workload's own config, measured in the same run: 10,000 samples/s (25.0% of it).",
        "the best trial without device_normalize=True, cuda_graph=True is in the study, which is not at hand "
        "(pass --storage).",
    ]


def test_the_cost_of_lost_knobs_is_the_studys_best_trial_without_them() -> None:
    trials = [
        {"config": Config(batch_size=512, amp="bf16", cuda_graph=True).as_dict(), "samples_per_s": 39000.0},
        {"config": Config(batch_size=512, amp="bf16", num_workers=4).as_dict(), "samples_per_s": 30000.0},
        {"config": Config(batch_size=512, amp="bf16", device_normalize=True).as_dict(), "samples_per_s": 35000.0},
        {"config": Config(batch_size=512, num_workers=8).as_dict(), "samples_per_s": 31000.0},  # fp32: not counted
        {"config": Config(batch_size=4096, amp="bf16").as_dict(), "samples_per_s": 90000.0},  # another batch size
    ]
    item = export_profile("tiny", "NVIDIA H200", PROFILE, "lightning", study_trials=trials)
    assert item.cost[2:] == [
        "the study's best trial without device_normalize=True, cuda_graph=True (bs=512 workers=4 bf16): 30,000 "
        "samples/s (75.0% of it; one trial's measurement, not re-measured).",
        "the study's best trial without device_normalize=True (bs=512 workers=0 graph bf16): 39,000 samples/s "
        "(97.5% of it; one trial's measurement, not re-measured).",
        "the study's best trial without cuda_graph=True (bs=512 workers=0 device-normalize bf16): 35,000 samples/s "
        "(87.5% of it; one trial's measurement, not re-measured).",
    ]
    none = export_profile("tiny", "NVIDIA H200", PROFILE, "lightning", study_trials=trials[3:])
    assert none.cost[2] == (
        "the study measured no trial at batch size 512, amp=bf16 without device_normalize=True, cuda_graph=True."
    )


def test_lightning_gets_trainer_and_dataloader_arguments() -> None:
    item = export_profile("tiny", "NVIDIA H200", PROFILE, "lightning", shuffle=True, drop_last=True)
    assert item.kwargs == {"precision": "bf16-mixed", "benchmark": True}
    assert item.loader_kwargs == {"batch_size": 512, "shuffle": True, "drop_last": True, "num_workers": 4,
                                  "pin_memory": True, "persistent_workers": True, "prefetch_factor": 4}
    assert sorted(item.code) == ["channels_last"]
    assert [lost.knob for lost in item.lost] == ["device_normalize", "cuda_graph"]


def test_torch_gets_a_dataloader_and_the_loop_its_knobs_make() -> None:
    text = render(export_profile("tiny", "NVIDIA H200", {**PROFILE, "parity": {}}, "torch", shuffle=True))
    loop = text[text.index('device = "cuda"') : text.index("\n\n# not expressible")]
    assert loop == "\n".join([
        'device = "cuda"',
        "torch.backends.cudnn.benchmark = True",
        "model.to(device, memory_format=torch.channels_last)",
        "optimizer = YourOptimizer(model.parameters(), lr=0.4)",
        "for x, y in loader:",
        "    x = x.to(device, non_blocking=True, memory_format=torch.channels_last)",
        "    y = y.to(device, non_blocking=True)",
        '    with torch.autocast("cuda", dtype=torch.bfloat16):',
        "        loss = loss_fn(model(x), y)",
        "    optimizer.zero_grad(set_to_none=True)",
        "    loss.backward()",
        "    optimizer.step()",
    ])
    assert "# batch size 512 is per process: N processes (torchrun, DDP) train on N x 512 per step" in text
    assert "tune one's share with `autotune search --recipe tiny --cpus N`" in text


def test_an_unknown_target_is_one_error() -> None:
    with pytest.raises(ValueError, match=r"target must be one of hf, lightning, torch, but got 'keras'"):
        export_profile("tiny", "cpu", PROFILE, "keras")


def test_the_command_exports_the_committed_mnist_cnn_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "recipes").mkdir()
    committed = Path(__file__).parents[2] / "recipes" / "mnist_cnn.tuned.toml"
    (tmp_path / "recipes" / committed.name).write_bytes(committed.read_bytes())
    monkeypatch.chdir(tmp_path)  # no study here: the cost says it is not at hand
    result = CliRunner().invoke(main, ["export", "--recipe", "mnist_cnn", "--to", "hf", "--hardware", "NVIDIA H200"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# mnist_cnn, profile 'NVIDIA H200', for Hugging Face Trainer\n")
    assert "    per_device_train_batch_size=512,\n    learning_rate=0.04,\n" in result.output
    assert "#   placement=device: " in result.output and "#   cuda_graph=True: " in result.output
    assert "#   the workload's own config, measured in the same run: 14,617 samples/s (1.2% of it).\n" in result.output


def test_the_command_names_the_profiles_a_file_has(project: Path) -> None:
    tuned_file.write_profile(project / "recipes" / "tiny.tuned.toml", "tiny", "cpu", PROFILE)
    result = CliRunner().invoke(main, ["export", "--recipe", "tiny", "--to", "torch", "--hardware", "tpu"])
    assert result.exit_code == 2
    assert "tiny.tuned.toml has no profile for 'tpu'; it has 'cpu'" in result.output


def test_a_kept_tuned_file_and_its_study_give_measured_costs() -> None:
    """lab/results/h200: a real H200 search of mnist_cnn, its tuned file and its study."""
    result = CliRunner().invoke(main, [
        "export", "--recipe", "lab/results/h200/scaleout_one_gpu.tuned.toml", "--to", "torch",
        "--storage", "sqlite:///lab/results/h200/scaleout_one_gpu.db",
    ])
    assert result.exit_code == 0, result.output
    assert (
        "#   the study's best trial without placement=device, cuda_graph=True (bs=1024 workers=8 pinned persistent "
        "prefetch=2 cudnn.benchmark): 75,484 samples/s (4.4% of it; one trial's measurement, not re-measured).\n"
    ) in result.output


def test_show_says_the_batch_is_per_process() -> None:
    from autotune.tuned.show import render

    path = Path("recipes/mnist_cnn.tuned.toml")
    assert render(tuned_file.read(path), path).splitlines()[-1] == (
        "batch_size is per process: N processes (torchrun) train on N x batch_size per step, at the rate "
        "load_tuned(recipe, world_size=N).lr gives by the lr rule (docs/integrations.md)."
    )


def test_torch_export_of_text_transformer_fits_its_dict_batches_and_names_every_knob() -> None:
    """The committed H200 profile pads to 64 and buckets: the loader passes the padding, the loop scores a dict batch
    with the workload's compute_loss, and bucketing is listed as lost."""
    result = CliRunner().invoke(main, ["export", "--recipe", "text_transformer", "--to", "torch"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "    collate_fn=functools.partial(collate_fn, pad_to_multiple_of=64),\n)\n" in out
    assert ("# set in your own code:\n#   pad_multiple: the DataLoader above passes pad_to_multiple_of=64 to the "
            "workload's collate_fn\n") in out
    assert ("# not expressible here (tuned_loader/tuned_step apply them), and what that costs:\n"
            "#   bucketing=True: batches of samples of similar length (tuned_loader's length buckets)\n") in out
    assert "for x, y in loader" not in out and "loss_fn" not in out
    assert ("for batch in loader:\n    batch = to_device(batch)\n"
            '    with torch.autocast("cuda", dtype=torch.bfloat16):\n'
            "        loss = compute_loss(model, batch)\n") in out


def test_every_tuned_knob_is_in_the_torch_export_or_listed_as_lost() -> None:
    config = Config(batch_size=64, num_workers=2, pin_memory=True, persistent_workers=True, prefetch_factor=3,
                    cudnn_benchmark=True, channels_last=True, amp="fp16", cuda_graph=True, placement="device",
                    decode="gpu", decode_share=0.5, device_normalize=True, pad_multiple=8, bucketing=True,
                    compile="default")
    profile = {**PROFILE, "knobs": tuned_file.config_to_knobs(config)}
    item = export_profile("tiny", "NVIDIA H200", profile, "torch")
    assert [lost.knob for lost in item.lost] == ["placement", "decode", "device_normalize", "cuda_graph", "bucketing"]
    assert item.code == {"pad_multiple": "a collate_fn that pads to a multiple of 8 (pad_to_multiple_of=8)"}
    assert item.loader_kwargs == {"batch_size": 64, "shuffle": True, "drop_last": False, "num_workers": 2,
                                  "pin_memory": True, "persistent_workers": True, "prefetch_factor": 3}
    text = render(item)
    for line in ("torch.backends.cudnn.benchmark = True", "model.to(device, memory_format=torch.channels_last)",
                 'score = torch.compile(lambda model, x, y: loss_fn(model(x), y), fullgraph=True, mode="default")',
                 '    with torch.autocast("cuda", dtype=torch.float16):', "        loss = score(model, x, y)",
                 "    scaler.scale(loss).backward()"):
        assert f"\n{line}\n" in text, line
    for target in ("hf", "lightning"):  # compile is theirs to lose too, not dropped without a word
        assert "compile" in [lost.knob for lost in export_profile("tiny", "cpu", profile, target).lost]


def test_the_torch_loop_for_a_dict_batch_workload_trains_as_printed() -> None:
    """The printed loader and loop run as written on text_transformer's own data set, collate_fn and model."""
    import torch

    from autotune.tuned.torch_loop import Batches
    from autotune.workloads import load, resolve

    workload = load(resolve("text_transformer"))
    config = Config(batch_size=16, amp="bf16", pad_multiple=64, compile="off")
    profile = {**PROFILE, "knobs": tuned_file.config_to_knobs(config)}
    text = render(export_profile("text_transformer", "cpu", profile, "torch",
                                 batches=Batches(collate_fn=True, compute_loss=True)))
    code = text[: text.index("\n# set in your own code:")]
    torch.manual_seed(0)
    model = workload.build_model()
    before = [p.detach().clone() for p in model.parameters()]
    lengths: list[int] = []

    def collate_fn(samples: list, pad_to_multiple_of: int | None = None) -> dict:
        batch = workload.collate_fn(samples, pad_to_multiple_of=pad_to_multiple_of)
        lengths.append(batch["input_ids"].shape[1])
        return batch

    dataset = workload.build_dataset(None)
    names = {"train_dataset": torch.utils.data.Subset(dataset, range(32)), "collate_fn": collate_fn, "model": model,
             "compute_loss": workload.compute_loss, "YourOptimizer": torch.optim.AdamW}
    exec(compile(code, "<export>", "exec"), names)  # noqa: S102 (the printed code, run as a user pastes it)
    assert len(lengths) == 2 and all(n % 64 == 0 for n in lengths), lengths
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters())), "the optimizer stepped"


def _damaged_study_file(folder: Path) -> Path:
    import optuna

    whole = folder / "whole.db"
    study = optuna.create_study(storage=f"sqlite:///{whole}", study_name="mnist_cnn@nvidia-h200")
    for _ in range(20):
        study.enqueue_trial({"x": 1})
    damaged = folder / "damaged.db"
    damaged.write_bytes(whole.read_bytes()[:20_000])  # the header and a few pages: SQLite opens it, reading fails
    return damaged


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("sqlite:///{tmp}/missing.db", "Error: cannot open study storage sqlite:///{tmp}/missing.db: there is no file "
         "{tmp}/missing.db; give the URL of the study's storage (`autotune search` creates it).\n"),
        ("postgresql://autotune:hunter2@127.0.0.1:1/nowhere",
         "Error: cannot open study storage postgresql://autotune:***@127.0.0.1:1/nowhere: "),
        ("sqlite:///{tmp}/damaged.db", "Error: cannot open study storage sqlite:///{tmp}/damaged.db: "
         "(sqlite3.DatabaseError) database disk image is malformed; the file is damaged or is not an SQLite "
         "database. Move it aside to start the study afresh (mv {tmp}/damaged.db {tmp}/damaged.db.damaged), or "
         "give --storage and --study to keep it and use another.\n"),
    ],
    ids=["missing-file", "unreachable-postgresql", "damaged-file"],
)
def test_export_with_a_storage_it_cannot_open_fails_as_search_and_report_do(
    tmp_path: Path, url: str, error: str
) -> None:
    _damaged_study_file(tmp_path)
    url, error = url.format(tmp=tmp_path), error.format(tmp=tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["export", "--recipe", "mnist_cnn", "--to", "hf", "--storage", url])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(error), result.output
    assert "hunter2" not in result.output and "not at hand" not in result.output
    assert not (tmp_path / "missing.db").exists(), "reading a study creates no file"
    report = runner.invoke(main, ["report", "--recipe", "mnist_cnn", "--storage", url, "--out", str(tmp_path)])
    assert report.exit_code == 2 and report.output.startswith(error), report.output
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("damage", ["not-sqlite", "cut-short"])
def test_export_refuses_a_damaged_default_study_file_as_report_does(project: Path, damage: str) -> None:
    """No --storage: the search's own .autotune/tiny.db is read, and a damaged one is an error, not "not at hand"."""
    tuned_file.write_profile(project / "recipes" / "tiny.tuned.toml", "tiny", "cpu", {**PROFILE, "study": "tiny@cpu"})
    (project / ".autotune").mkdir()
    db = project / ".autotune" / "tiny.db"
    if damage == "not-sqlite":
        db.write_text("a study file overwritten with text, long enough to be read as a database's header\n")
        said = "file is not a database"
    else:
        db.write_bytes(_damaged_study_file(project).read_bytes())
        said = "database disk image is malformed"
    runner = CliRunner()
    result = runner.invoke(main, ["export", "--recipe", "tiny", "--to", "torch"])
    assert result.exit_code == 2, result.output
    error = (f"Error: cannot open study storage sqlite:///{db}: (sqlite3.DatabaseError) {said}; the file is damaged or "
             f"is not an SQLite database. Move it aside to start the study afresh (mv {db} {db}.damaged), or give "
             f"--storage and --study to keep it and use another.")
    assert result.output.splitlines() == [error]
    report = runner.invoke(main, ["report", "--recipe", "tiny"])
    assert (report.exit_code, report.output.splitlines()) == (2, [error])
