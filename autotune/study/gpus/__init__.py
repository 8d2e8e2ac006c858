"""``autotune search --gpus``: a searcher process per GPU of this host (``searcher_main``, ``searcher``), all sharing
one study, which the search that started them sets up (``parallel``)."""
