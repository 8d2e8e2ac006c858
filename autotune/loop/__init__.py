"""The training loop a config describes, shared by the trials and the user's own training code.

- ``loader``: the DataLoader, or the ``DeviceLoader`` that keeps the data set on the device;
- ``step``: one training step, eager or captured in a CUDA graph, with its hooks (``hooks``);
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
        "GraphOffWarning": "step",
        "RecaptureWarning": "step",
        "DeviceLr": "lr",
    },
)
