"""The studies: one package per study X, its page docs/X.md and its outputs docs/X/ (CONTRIBUTING.md, "Figures"),
run from the repository root as `python -m benchmarks.X` (or a part, `python -m benchmarks.X.part`; a shell script,
`bash benchmarks/X/X.sh`), and the two modules they share: common.py (the scripts as modules, timing, the results
files) and sps.py (the fps of scripts taking turns: `python -m benchmarks.sps`, run by most studies)."""
