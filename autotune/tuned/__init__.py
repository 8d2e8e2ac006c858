"""The tuned file (``recipes/<name>.tuned.toml``) and what training code reads from it.

- ``schema``: every key a profile may hold, validated without torch;
- ``file``: read, write (atomically), match a profile to this machine;
- ``api``: ``load_tuned``, ``tuned_loader``, ``tuned_step`` for the user's own training code;
- ``loading``: how ``tuned_loader`` sorts your arguments, orders, refuses and builds its loader;
- ``show``: a tuned file as a table;
- ``export``: a profile in Hugging Face, Lightning or plain PyTorch terms;
- ``distributed``: what a profile means under torchrun (per-process batch, global rate, cores per rank);
- ``torch_loop``: a profile's loop knobs as a plain PyTorch loop that fits the workload's batches (for export);
- ``caller``: where the API's warnings point, the user's own call.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TunedFileError": "file",
        "TunedFileWriteError": "file",
        "read": "file",
        "write_profile": "file",
        "match": "file",
        "NoProfileWarning": "api",
        "Tuned": "api",
        "load_tuned": "api",
        "tuned_loader": "api",
        "tuned_step": "api",
        "render": "show",
        "export": "export",
        "export_profile": "export",
    },
)
