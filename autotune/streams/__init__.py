"""Streams: a workload whose data set is an ``IterableDataset`` (webdataset shards, a Hugging Face
``streaming=True`` data set, a user's own generator).

A stream has no sampler and no length the DataLoader owns; its order is the user's, and autotune never changes it.
What it adds to a search (docs/streams.md):

- ``sources``: what kind of stream it is, how many shards it has, the length it declares;
- ``keys``: one sample's identity: webdataset's ``__key__``, else a digest of its content;
- ``bounded``: a bounded part of a stream (a fixed subset of its shards, read without decoding) to make whole
  passes over;
- ``passes``: the check that a worker count keeps the stream's samples: over one pass, none lost, none repeated,
  every worker yielding;
- ``ranks``: each torchrun rank's share of the shards, and the rule that refuses ranks reading the same shards.
"""
