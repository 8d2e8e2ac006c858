"""A Hugging Face Trainer job on a tiny BERT, from the settings `autotune export --to hf` gives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autotune.config import Config
from autotune.tuned.export import export

transformers = pytest.importorskip("transformers")

from _profile import write_cpu_profile  # noqa: E402


class Sentences(torch.utils.data.Dataset):
    """64 random 12-token sentences with a label each: enough for a few steps."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, 100, (64, 12), generator=g)
        self.labels = torch.randint(0, 2, (64,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long), "labels": self.labels[i]}


@pytest.mark.slow  # one DataLoader worker process, as the exported num_workers asks
def test_a_trainer_trains_on_the_exported_settings(project: Path) -> None:
    write_cpu_profile(project, Config(batch_size=8, num_workers=1, persistent_workers=True, prefetch_factor=3), 3e-4)
    (item,) = export("tiny", "hf", hardware="cpu")
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    before = [p.detach().clone() for p in model.parameters()]
    args = transformers.TrainingArguments(output_dir=str(project / "out"), max_steps=3, use_cpu=True, report_to=[],
                                          save_strategy="no", **item.kwargs)
    with torch.random.fork_rng():  # the Trainer seeds the global generators; later tests keep theirs
        trainer = transformers.Trainer(model=model, args=args, train_dataset=Sentences())
        loader = trainer.get_train_dataloader()
        assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (1, True, 3)
        assert next(iter(loader))["input_ids"].shape == (8, 12)  # the tuned batch (accelerate wraps the sampler)
        trainer.train()
    assert trainer.state.global_step == 3 and args.learning_rate == 3e-4
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
