"""Built-in workloads: each file is a workload (autotune.workloads.contract), never imported as a package module."""
