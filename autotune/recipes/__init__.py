"""Built-in workloads. Each file is a workload (see autotune.workload); none is imported as a package module."""
