"""Learning against wall-clock time (docs/learning.md, whose runs are `bash run.sh`'s): the checks beside them, in parts:
check.py, random_policy.py and legs.py, each `python -m benchmarks.learning.<part>`."""
