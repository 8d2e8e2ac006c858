"""`autotune report`: parameter sensitivity, from the study a search stored.

- ``study``: find the study, draw its figures, put the report together (``report``, ``render``);
- ``trials``: its trials as the tables' rows: the fastest configs, failures by cause, importances;
- ``rounds``: the winner's numbers, from the finalists the search measured again;
- ``contents``: what a report holds (``StudyReport``);
- ``files``: the Markdown and HTML report files;
- ``figures``: the PNG heat map, history and importances.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ReportError": "study",
        "StudyReport": "contents",
        "report": "study",
        "render": "study",
    },
)
