"""`autotune report`: the second seed's stage 3 from the study a search stored.

- ``study``: read the study, group its trials, compute importances (``report``);
- ``files``: the Markdown and HTML report files;
- ``figures``: the PNG heat map, history and importances.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ReportError": "study",
        "StudyReport": "study",
        "report": "study",
        "render": "study",
    },
)
