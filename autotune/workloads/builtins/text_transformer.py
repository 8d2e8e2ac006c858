"""A Transformer encoder on sequences of 16 to 512 tokens: dict batches, a padding collate_fn, the model's own loss.

Written the way a Hugging Face-style loop is: each sample is a dict of token ids
and a label, ``collate_fn`` pads a batch to its longest sequence (rounded up to
``pad_to_multiple_of`` when given, as DataCollatorWithPadding does) and adds an
attention mask, and ``model(**batch)`` returns an object whose ``.loss`` is
trained. ``sample_lengths`` gives each sequence's length, so the search may
batch sequences of similar length together (the ``bucketing`` knob). AdamW,
as such loops use. The data are synthetic and offline: lengths follow a skewed
(log-normal) distribution like real text, and each class draws a share of its
tokens from a vocabulary band of its own, so the model can learn it and the
parity check means something. Tune it with:

    autotune search --recipe text_transformer
"""

import dataclasses
import math

import numpy as np
import torch
from torch import nn, optim
from torch.utils.data import Dataset

DEFAULTS = dict(
    batch_size=32,  # sequences per step
    lr=5e-4,  # AdamW at batch 32
    epochs=2,  # the declared run
    shuffle=True,
)
DETERMINISTIC_TRANSFORM = True  # a sample is the same token ids every time it is read

VOCAB = 2048
CLASSES = 4
MIN_LEN, MAX_LEN = 16, 512
PAD = 0


class Sequences(Dataset):
    """`n` token sequences with log-normal lengths (median about 70 tokens, 16 to 512) and a class each."""

    def __init__(self, n: int = 32_768, seed: int = 0):
        rng = np.random.default_rng(seed)
        lengths = np.clip(rng.lognormal(math.log(70), 0.8, n).astype(np.int64), MIN_LEN, MAX_LEN)
        self.labels = rng.integers(0, CLASSES, n)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        tokens = rng.integers(1, VOCAB, int(self.offsets[-1]))
        # A third of each sequence's tokens come from its class's band of the vocabulary.
        band = (VOCAB - 1) // CLASSES
        own = rng.random(len(tokens)) < 1 / 3
        owner = np.repeat(self.labels, lengths)
        tokens[own] = 1 + owner[own] * band + rng.integers(0, band, int(own.sum()))
        self.tokens = torch.from_numpy(tokens)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return {"input_ids": self.tokens[lo:hi], "labels": int(self.labels[i])}


def collate_fn(samples, pad_to_multiple_of=None):
    """Pad to the batch's longest sequence, rounded up to a multiple of `pad_to_multiple_of` (at most MAX_LEN, the
    positions the model has); the mask marks real tokens."""
    longest = max(len(s["input_ids"]) for s in samples)
    if pad_to_multiple_of:
        longest = min(MAX_LEN, -(-longest // pad_to_multiple_of) * pad_to_multiple_of)
    ids = torch.full((len(samples), longest), PAD, dtype=torch.long)
    mask = torch.zeros((len(samples), longest), dtype=torch.bool)
    for row, sample in enumerate(samples):
        n = len(sample["input_ids"])
        ids[row, :n] = torch.as_tensor(sample["input_ids"], dtype=torch.long)  # a tensor, or a stream's list
        mask[row, :n] = True
    labels = torch.tensor([s["labels"] for s in samples], dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


@dataclasses.dataclass
class Output:
    loss: torch.Tensor
    logits: torch.Tensor


class Encoder(nn.Module):
    def __init__(self, dim: int = 128, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.position = nn.Embedding(MAX_LEN, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, input_ids, attention_mask, labels=None):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.embed(input_ids) + self.position(positions)
        h = self.encoder(h, src_key_padding_mask=~attention_mask)
        # The mean over real tokens only: padding must not change what a sequence says.
        weights = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * weights).sum(1) / weights.sum(1).clamp(min=1)
        logits = self.head(pooled)
        loss = nn.functional.cross_entropy(logits.float(), labels) if labels is not None else None
        return Output(loss, logits)


def build_dataset(root):
    return Sequences()


def sample_lengths(dataset):
    return np.diff(dataset.offsets)  # each sequence's tokens, read off the offsets: no sample is loaded


def build_model():
    return Encoder()


def compute_loss(model, batch):
    return model(**batch).loss


def tokens_in(batch):
    return batch["attention_mask"].sum()  # a tensor: autotune reads it at window edges, never inside a step


def build_optimizer(params, lr):
    return optim.AdamW(params, lr=lr)
