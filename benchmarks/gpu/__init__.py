"""The GPU path (docs/gpu.md): a sitting on the GPU machine, `bash benchmarks/gpu/gpu.sh OUT --plan NAME` (gpu.sh, which
runs gpu.py: `python -m benchmarks.gpu`), its offline bundle (bundle.sh) and its limit study (limits.py:
`python -m benchmarks.gpu.limits`)."""
