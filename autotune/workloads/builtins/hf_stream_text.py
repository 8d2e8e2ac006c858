"""A Transformer encoder on a text stream: Hugging Face ``datasets`` reading local parquet shards, tokenised as it goes.

    autotune search --recipe hf_stream_text

Written the way a Hugging Face streaming loop is: ``load_dataset("parquet", ...,
streaming=True)`` over 16 parquet files under $AUTOTUNE_DATA (synthetic texts of 8 to
128 words in 4 learnable classes, written on first use: ``autotune.workloads.parquet_text``),
and ``.map(tokenize)`` in the stream, so each DataLoader worker reads its own files and
tokenises their rows. ``collate_fn`` pads a batch to its longest text
(rounded up to ``pad_to_multiple_of`` when given), and the model returns its own loss:
text_transformer's encoder, with AdamW. The tokenizer is a word-level one written here,
over the texts' own vocabulary: nothing is downloaded.
"""

import re

from datasets import load_dataset
from torch import optim

# Its batches are text_transformer's: padded by its collate_fn (to pad_to_multiple_of when given), a mask of the
# real tokens.
from autotune.workloads.builtins.text_transformer import MAX_LEN, Encoder, collate_fn  # noqa: F401 (a hook)
from autotune.workloads.locate import data_root
from autotune.workloads.parquet_text import text_samples, text_shards, vocabulary

DEFAULTS = dict(
    batch_size=32,  # texts per step
    lr=5e-4,  # AdamW at batch 32
    epochs=2,  # the declared run
    samples_per_epoch=text_samples(data_root()),  # one pass over the parquet files: every text once
)

UNKNOWN = 1  # the id of a word outside the vocabulary; 0 pads
IDS = {word: i + 2 for i, word in enumerate(vocabulary())}  # 2,046 words: ids 2..2047 of the encoder's 2,048
WORD = re.compile(r"[a-z]+")


def tokenize(row):
    """A row's text as word ids (lower-cased words; punctuation dropped), at most the encoder's MAX_LEN."""
    ids = [IDS.get(word, UNKNOWN) for word in WORD.findall(row["text"].lower())]
    return {"input_ids": ids[:MAX_LEN], "labels": row["label"]}


def build_dataset(root):
    # No shuffle buffer: the files hold independent draws in random order already, and datasets' buffer reads its
    # files through threads that it waits seconds for whenever an iterator ends (each pass, each worker).
    stream = load_dataset("parquet", data_files=text_shards(root), split="train", streaming=True)
    return stream.map(tokenize, remove_columns=["text", "label"])


def build_model():
    return Encoder(dim=64)  # text_transformer's at half the width: its steps take a CPU tenths of a second


def compute_loss(model, batch):
    return model(**batch).loss


def tokens_in(batch):
    return batch["attention_mask"].sum()  # a tensor: autotune reads it at window edges, never inside a step


def build_optimizer(params, lr):
    return optim.AdamW(params, lr=lr)
