"""Speed per family (docs/speed.md): `bash benchmarks/speed/speed.sh`, one `python -m benchmarks.sps` per family."""
