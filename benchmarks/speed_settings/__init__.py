"""Settings without code (docs/speed_settings.md): `bash benchmarks/speed_settings/speed_settings.sh` (the thread
settings, by benchmarks/sps.py) and busy.py (`python -m benchmarks.speed_settings.busy`: a busy machine and an idle one)."""
