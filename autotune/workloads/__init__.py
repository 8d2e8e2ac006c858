"""Workloads: the user's training loop as one plain file, and how ``--recipe`` finds it.

- ``locate``: a recipe name or path to the workload file and its tuned file;
- ``contract``: what a workload declares, imported and validated (``load``);
- ``datasets``: torchvision data sets that fall back to learnable synthetic data offline;
- ``imagenet``, ``shards``, ``parquet_text``: the built-ins' own data written once: an ImageNet-class folder of JPEGs,
  the same JPEGs in webdataset tar shards, synthetic text in parquet files;
- ``decode``, ``pixels``, ``stages``: what a data set's own transform allows (device decode, ``device_normalize``), a
  webdataset pipeline's read off its last stage;
- ``builtins/``: the workloads shipped with autotune.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "RecipeRef": "locate",
        "WorkloadError": "locate",
        "builtin_names": "locate",
        "resolve": "locate",
        "Workload": "contract",
        "load": "contract",
        "data_root": "locate",
    },
)
