"""The training loop a config describes, shared by the trials and the user's own training code.

- ``loader``: the DataLoader, or the ``DeviceLoader`` that keeps the data set on the device;
- ``sourced``: a loader that makes its batches from a DataLoader's, and the arguments both share;
- ``buckets``: batches of similar length, padding to a multiple;
- ``device_normalize``, ``device_decode``, ``hybrid_decode``, ``crops``: the pipeline's tail, or its
  JPEG decoding and augmentation, on the device (whole or a share of each batch);
- ``step``: one training step, eager or captured in a CUDA graph; its options (``StepOptions``) and the checks
  it makes when built (``hooks``), the update after backward (``update``), the graph's capture and replay
  (``graph``), and the rates that graph captured as numbers (``recapture``);
- ``compiled``: the step's loss under ``torch.compile``, its compile time counted, its failures named;
- ``lr``: learning rates on the device, which a scheduler reaches under a graph.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DeviceLoader": "loader",
        "build_loader": "loader",
        "materialize": "loader",
        "AMP_DTYPES": "step",
        "Step": "step",
        "GraphOffWarning": "graph",
        "RecaptureWarning": "graph",
        "StepError": "hooks",
        "StepOptions": "hooks",
        "StepTypeError": "hooks",
        "DeviceLr": "lr",
    },
)
