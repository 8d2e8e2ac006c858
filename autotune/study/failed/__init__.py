"""What failed trials teach: knob values that cannot work on this workload (``hopeless``), seeds measured again
without them (``seed_retry``), and failures measured again once the workload changed (``content``); why:
docs/search.md#failure-learning."""
