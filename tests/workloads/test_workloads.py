"""Resolving --recipe and loading a workload: names, paths, built-ins, and the errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.workloads import WorkloadError, load, resolve
from autotune.workloads.locate import BUILTIN_DIR


def test_name_in_local_recipes(project: Path) -> None:
    ref = resolve("tiny")
    assert (ref.workload_path, ref.tuned_path, ref.builtin) == (
        project / "recipes" / "tiny.py",
        project / "recipes" / "tiny.tuned.toml",
        False,
    )


def test_builtin_from_any_directory_tunes_into_local_recipes(project: Path) -> None:
    ref = resolve("mnist_cnn")
    assert ref.builtin and ref.workload_path == BUILTIN_DIR / "mnist_cnn.py"
    assert ref.tuned_path == project / "recipes" / "mnist_cnn.tuned.toml"


def test_path_to_a_py_file(project: Path) -> None:
    (project / "elsewhere").mkdir()
    (project / "recipes" / "tiny.py").rename(project / "elsewhere" / "mine.py")
    ref = resolve("elsewhere/mine.py")
    assert ref.name == "mine" and ref.tuned_path == project / "elsewhere" / "mine.tuned.toml"


def test_builtins_load_and_declare_their_defaults() -> None:
    mnist = load(resolve("mnist_cnn"))
    assert mnist.defaults == {"batch_size": 128, "lr": 1e-2, "epochs": 10, "shuffle": False, "pin_memory": True}
    assert mnist.default("num_workers") == 0 and mnist.deterministic_transform is True
    cifar = load(resolve("cifar10_resnet18"))
    assert cifar.device_augment is not None and cifar.defaults["shuffle"] is True


def test_cifar_device_augment_draws_from_the_same_crops_as_the_pil_transform() -> None:
    """Each augmented image is one of the 81 x 2 crops RandomCrop(32, padding=4) + flip can give.

    The PIL path pads black pixels and then normalises; padding the normalised batch with
    zeros would pad with the mean colour instead, which the parity check caught on an H200
    (the model never met black borders in training: probe loss 3.1 against 0.0015).
    """
    import torch
    from PIL import Image
    from torchvision.transforms import functional as F

    from autotune.workloads.builtins import cifar10_resnet18 as cifar

    torch.manual_seed(0)
    images = [Image.fromarray(torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8).numpy()) for _ in range(6)]
    batch = torch.stack([F.normalize(F.to_tensor(img), cifar.MEAN, cifar.STD) for img in images])
    out = cifar.device_augment(batch)
    assert out.shape == batch.shape
    shifted = 0
    for img, got in zip(images, out):
        padded = F.normalize(F.to_tensor(F.pad(img, 4, fill=0)), cifar.MEAN, cifar.STD)
        crops = {
            (dy, dx, flip): padded[:, dy : dy + 32, dx : dx + 32].flip(2)
            if flip
            else padded[:, dy : dy + 32, dx : dx + 32]
            for dy in range(9)
            for dx in range(9)
            for flip in (False, True)
        }
        found = [key for key, crop in crops.items() if torch.allclose(crop, got, atol=1e-5)]
        assert found, "the augmented image is none of the PIL transform's crops"
        shifted += found[0][:2] != (4, 4)
    assert shifted >= 4, "crops are drawn at random offsets"


@pytest.mark.parametrize(
    "recipe,message",
    [
        (
            "nosuch",
            "unknown recipe 'nosuch': not ./recipes/nosuch.py, not a path, not a built-in. Known recipes: "
            "cifar10_resnet18, hf_stream_text, imagenet_resnet50, mnist_cnn, text_transformer, tiny, "
            "webdataset_resnet50.",
        ),
        ("recipes/tiny.txt", "a recipe path must name a `.py` file, but got 'recipes/tiny.txt'."),
        ("missing/file.py", "recipe file 'missing/file.py' does not exist."),
    ],
)
def test_bad_recipe_names(project: Path, recipe: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=__import__("re").escape(message)):
        resolve(recipe)


def test_loading_a_workload_writes_nothing_into_the_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python writes bytecode beside an imported file by default; a workload's import must not (a __pycache__ in
    recipes/ would be a file autotune left in the user's project, with nothing to show for it)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # Python's default, whatever this machine's environment says
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    assert load(resolve("tiny")).defaults["batch_size"] == 16
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before


def test_import_error_names_file_and_line(project: Path) -> None:
    path = project / "recipes" / "broken.py"
    path.write_text(
        "import torch\n\nDEFAULTS = dict(batch_size=8, lr=0.1, epochs=1)\nraise ImportError('no module named fancy')\n"
    )
    with pytest.raises(
        WorkloadError, match=rf"workload {path}, line 4 failed to import: ImportError: no module named fancy"
    ):
        load(resolve("broken"))


def test_every_contract_problem_is_listed(project: Path) -> None:
    path = project / "recipes" / "sloppy.py"
    path.write_text("DEFAULTS = dict(batchsize=8, lr='fast', epochs=0)\ndef build_model():\n    pass\n")
    with pytest.raises(WorkloadError) as info:
        load(resolve("sloppy"))
    text = str(info.value)
    assert text.startswith(f"workload {path} has 7 problem(s):")
    for line in (
        "DEFAULTS lacks 'batch_size'",
        "DEFAULTS has unknown key 'batchsize'",
        "DEFAULTS['lr'] must be a number, but got 'fast'",
        "DEFAULTS['epochs'] must be >= 1, but got 0",
        "missing function build_dataset()",
        "missing function build_loss()",
        "missing function build_optimizer()",
    ):
        assert line in text


@pytest.mark.gpu
def test_cifar_device_augment_never_waits_for_the_gpu() -> None:
    """It runs per batch outside the graph: a host sync there would stall every step."""
    import torch

    from autotune.workloads.builtins import cifar10_resnet18 as cifar

    batch = torch.randn(256, 3, 32, 32, device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call raises
    try:
        out = cifar.device_augment(batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert out.shape == batch.shape
