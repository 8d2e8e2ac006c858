"""Built-in workloads: each file is a workload (autotune.workloads.contract), loaded by path; one may import another's
model as a module of this package (hf_stream_text takes text_transformer's encoder)."""
