"""One policy served over torch.distributed.rpc (docs/rpc_serving.md): rpc_serving.py, `python -m benchmarks.rpc_serving`."""
