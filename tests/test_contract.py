"""The promises of the script contract (CONTRIBUTING.md) where each script's own code takes part, checked on each
script: its flags and ranges, its environment's checks, its logs, its checkpoint and play-back, its networks' first
weights, and each pair's diff as a lesson. The plumbing every script shares (the one-line mistakes, Ctrl-C, the
NaN stop, threads, devices) is the harness's, tested once in test_harness.py; pair-specific checks (numerics,
learning) live in test_<algorithm>.py.
"""

import math
import re
from dataclasses import dataclass, fields

import pytest
import torch
from helpers import CHECKED, SPECS, assert_user_error, ctrl_c_inside, load_script, run_in_process, saved_run, \
    short_run, wandb_history, with_flag
from leanrl_utils import evals, harness


# SPECS (each script's short run, an action space it refuses, bad sizes; CHECKED: their names) and
# assert_user_error: helpers.py's, which test_devices.py and test_mistakes.py read too


@pytest.mark.parametrize("script", CHECKED)
def test_help_lists_every_flag(script, tmp_path):
    run = run_in_process(script, "--help", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    module = load_script(script)
    for f in fields(module.Args):
        flag = "--" + f.name.replace("_", "-")
        assert flag in run.stdout, f"{flag} missing from --help"
    if script.endswith("_torchcompile"):
        assert "--compile" in run.stdout and "--cudagraphs" in run.stdout


# Bad input, run in this process (harness.run with the script's main() and checks, without a new interpreter's
# seconds of start-up; test_harness.py runs one real process for all).
@pytest.mark.parametrize("script", CHECKED)
def test_unknown_env_id(script, tmp_path):
    run = run_in_process(script, "--env-id", "NoSuchEnv-v9", cwd=tmp_path)
    assert_user_error(run, "--env-id")


@pytest.mark.parametrize("script", CHECKED)
def test_unsupported_action_space(script, tmp_path):
    env_id, word = SPECS[script].wrong_space
    run = run_in_process(script, "--env-id", env_id, cwd=tmp_path)
    assert_user_error(run, "--env-id")
    assert word in run.stderr


@pytest.mark.parametrize("script,flag,value", [(s, f, v) for s in CHECKED for f, v in SPECS[s].bad_sizes])
def test_bad_sizes(script, flag, value, tmp_path):
    run = run_in_process(script, *SPECS[script].short, flag, value, cwd=tmp_path)
    assert_user_error(run, flag)


@pytest.mark.parametrize("script", CHECKED)
def test_every_float_flag_refuses_a_negative_value(script, tmp_path):
    """No float flag of any script takes a negative value (rates, coefficients, noises, probabilities, times):
    each refuses -1 with one line naming the flag, the same way in the three scripts of a family (each script's
    own ranges: its check_args; nan and inf are refused by the harness, for every float flag)."""
    floats = [f.name for f in fields(load_script(script).Args) if f.type in (float, "float", float | None, "float | None")]
    for name in floats:
        flag = "--" + name.replace("_", "-")
        run = run_in_process(script, *SPECS[script].short, flag, "-1", cwd=tmp_path / name)
        assert_user_error(run, flag)


FAMILIES = sorted({s.removesuffix("_torchcompile").removesuffix("_jax") for s in CHECKED})


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_checks_its_flags_in_one_way(family):
    """Every int and float flag declares its range where its docstring ends (--help shows it; the harness checks
    it), and a family's scripts declare the same ranges and check the rest with the same check_args: one place
    per family, copied into each script as the single-file rule asks."""
    import inspect

    scripts = [s for s in (family, f"{family}_torchcompile", f"{family}_jax") if s in CHECKED]
    modules = {s: load_script(s) for s in scripts}
    ranges = {s: harness.declared_ranges(m.Args) for s, m in modules.items()}
    for s, m in modules.items():
        numbers = [f.name for f in fields(m.Args) if re.search(r"\b(int|float)\b", str(f.type))
                   and "list" not in str(f.type) and f.name != "seed"]
        assert [n for n in numbers if n not in ranges[s]] == [], f"{s}: flags without a declared range"
        assert ranges[s] == ranges[family], f"{s} declares other ranges than {family}"
        assert inspect.getsource(m.check_args) == inspect.getsource(modules[family].check_args), s


@pytest.mark.parametrize("script", ["sac_continuous_action_torchcompile", "td3_continuous_action_torchcompile"])
def test_ctrl_c_inside_a_to_module_context(script, tmp_path):
    # tensordict's `to_module` context, which these scripts' critics run in, turns a KeyboardInterrupt raised in
    # its body into a RuntimeError on exit; a SIGINT lands there at random (it once failed CI), so this test puts
    # it there on purpose: the harness still ends the run as a Ctrl-C
    run = ctrl_c_inside("batched_qf", script, *SPECS[script].short, cwd=tmp_path)
    assert run.returncode == 130, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "interrupted" in run.stderr
    assert run.values("charts/episodic_return"), sorted(run.scalars)


def saved_and_tracked(script, cached_run):
    """One short run per script with --save-model (2 episodes played back) and --track (offline), shared by the
    tests below: its family's short run with SAVED (helpers.saved_run), which its same-seed test compares with
    the short run."""
    return saved_run(cached_run, script).check()


@pytest.mark.parametrize("script", CHECKED)
def test_save_model_loads_back_and_acts(script, cached_run):
    run = saved_and_tracked(script, cached_run)
    models = list(run.run_dir.glob("*.pt"))
    assert len(models) == 1, list(run.run_dir.iterdir())
    assert len(run.values("eval/episodic_return")) == 2
    said = [line for line in run.stdout.splitlines() if line.startswith("evaluation: ")]  # the returns, one line
    assert len(said) == 1 and said[0].startswith("evaluation: 2 episodes, return "), run.stdout[-2000:]
    policy, saved_args = evals.load_policy(str(models[0]))[:2]
    args = short_run(script)
    assert saved_args["env_id"] == args[args.index("--env-id") + 1]
    returns = evals.evaluate(str(models[0]), eval_episodes=1)
    assert len(returns) == 1 and math.isfinite(returns[0])


TWINS = [(s.removesuffix("_jax"), s) if s.endswith("_jax") else (s, f"{s}_torchcompile")
         for s in CHECKED if not s.endswith("_torchcompile") and (s.endswith("_jax") or f"{s}_torchcompile" in CHECKED)]


@pytest.mark.parametrize("eager,twin", TWINS, ids=[twin for _, twin in TWINS])
def test_every_twin_saves_the_eager_script_s_checkpoint(eager, twin, cached_run):
    """A model saved by any script of a pair loads the same way: same algorithm, same networks, same tensor
    names and shapes (the optimized SAC and TD3 keep their critics stacked, and save them apart; the JAX
    twins convert their parameters to the eager script's layout)."""
    a, b = (torch.load(next(saved_and_tracked(s, cached_run).run_dir.glob("*.pt")), weights_only=True)
            for s in (eager, twin))
    assert sorted(a) == sorted(b) and a["algo"] == b["algo"]
    for key in a:
        if isinstance(a[key], dict) and key != "args":
            layout = lambda d: {k: getattr(v, "shape", type(v)) for k, v in d.items()}  # noqa: E731
            assert layout(a[key]) == layout(b[key]), key


@pytest.mark.parametrize("script", CHECKED)
def test_track_offline_holds_the_scalars(script, cached_run):
    run = saved_and_tracked(script, cached_run)
    offline = list((run.cwd / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1, "no offline wandb run was written"
    history = wandb_history(offline[0])
    assert "charts/SPS" in run.scalars, f"the run logged no fps: {sorted(run.scalars)}"
    for tag, points in run.scalars.items():
        assert len(history.get(tag, [])) == len(points), f"{tag}: {len(points)} logged, {history.get(tag)} in wandb"


@pytest.mark.parametrize("script", CHECKED)
def test_no_placeholder_is_left_in_a_script(script):
    """A docstring or comment left as a placeholder (a `SOMETHING_NOTE`, a TODO) reads as a finished sentence
    to nobody."""
    from helpers import SCRIPT_DIR

    text = (SCRIPT_DIR / f"{script}.py").read_text()
    assert not re.findall(r"\b[A-Z]{3,}_NOTE\b|\bTODO\b|\bFIXME\b|\bXXX\b", text)


# What a script of leanrl/ leaves to the harness (leanrl_utils/harness.py), found by its marks: the plumbing's own
# imports and calls, and its functions defined again.
PLUMBING = re.compile(r"^\s*(import (tqdm|tyro|atexit|signal|warnings|logging|importlib)\b|from torch.utils.tensorboard import"
                      r"|def (fail|parse_args|pick_threads|pick_device|use_device|make_writer|log_losses|diverged"
                      r"|run)\(|class (Speed|Writer)\b)|sys\.stderr|warnings\.filterwarnings|logging\.getLogger", re.M)


@pytest.mark.parametrize("script", CHECKED)
def test_no_plumbing_is_left_in_a_script(script):
    """A script holds its algorithm; the contract's plumbing (flags, errors, threads, devices, logging, progress,
    warnings and log levels) is the harness's, called, never written again (CONTRIBUTING.md)."""
    from helpers import SCRIPT_DIR

    text = (SCRIPT_DIR / f"{script}.py").read_text()
    assert [m.group(0).strip() for m in PLUMBING.finditer(text)] == []
    assert text.rstrip().endswith("harness.run(main, Args, check_args)"), "the entry point is harness.run"


# The scripts' lengths (wc -l), kept near the references' for the same algorithm (issue 52): eager scripts within
# 15% of CleanRL's script, optimized twins within 35% of LeanRL's where LeanRL has one (theirs take Adam and the
# replay buffer from libraries; ours write them out).
MOST_LINES = {
    "sac_continuous_action": 373, "sac_continuous_action_torchcompile": 504,
    "td3_continuous_action": 365, "td3_continuous_action_torchcompile": 466,
    "ppo_continuous_action": 406, "ppo_continuous_action_torchcompile": 544,
    "ppo_atari_envpool": 396, "ppo_atari_envpool_torchcompile": 579,
    "dqn": 285, "dqn_torchcompile": 366, "dqn_atari_envpool": 312,
}


# ... plus the lines that name a run's state for its checkpoints and go on from one (issue 65: the Checkpoint
# statement, resume, the safe point in the loop, the last state saved), which no reference has
CHECKPOINT_LINES = 8


@pytest.mark.parametrize("script", sorted(MOST_LINES))
def test_a_script_stays_near_its_reference_s_length(script):
    from helpers import SCRIPT_DIR

    lines = len((SCRIPT_DIR / f"{script}.py").read_text().splitlines())
    most = MOST_LINES[script] + CHECKPOINT_LINES
    assert lines <= most, f"{script}.py: {lines} lines, {most} at most"


def test_the_declared_surface():
    """What the benchmarks, the tests and evals.load_policy use of a script is declared (SURFACE in
    leanrl_utils/scripts.py), for every script; every declared name is there; and the loader refuses any other,
    so that a script's insides can change without breaking a caller nobody knew of."""
    from leanrl_utils.scripts import SURFACE

    assert sorted(SURFACE) == CHECKED
    for name, names in SURFACE.items():
        assert [n for n in names if not hasattr(load_script(name).module, n)] == [], name
    with pytest.raises(AttributeError, match=r"'linear_schedule' is not in the declared surface of leanrl/dqn\.py"):
        load_script("dqn").linear_schedule


def test_nothing_a_script_runs_loads_a_script_back():
    """A script imports the harness and evals.play's module, and nothing of either loads a script: the loader
    serves the benchmarks and tests (and load_policy, theirs) only."""
    import inspect

    from helpers import SCRIPT_DIR

    for script in CHECKED:
        text = (SCRIPT_DIR / f"{script}.py").read_text()
        assert re.findall(r"^(?:from leanrl_utils\S* import .+|import leanrl_utils.*)$", text, re.M) == \
            ["from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), "
             "playing a policy"], script
    assert "load_script" not in inspect.getsource(harness)
    for used in (evals.play, evals.epsilon_greedy, evals.freeze_normalization):
        assert "load_script" not in inspect.getsource(used)


def test_the_readme_stays_short():
    """The README is the quick start and the map: under 250 lines; the long rules live in docs/ (issue 52)."""
    from helpers import REPO

    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines < 250, f"README.md: {lines} lines"


def test_every_script_has_a_spec():
    from helpers import SCRIPT_DIR

    scripts = sorted(p.stem for p in SCRIPT_DIR.glob("*.py"))
    assert scripts == CHECKED, "add the new script to SPECS"


class _NetworksBuilt(Exception):
    """Stops a script's main() once its networks are built (at its writer, which comes after them)."""


PYTORCH = [s for s in CHECKED if not s.endswith("_jax") and "multigpu" not in s]  # main() runs alone in-process


@pytest.mark.parametrize("script", PYTORCH)
def test_networks_are_built_on_the_cpu_and_moved(script, monkeypatch, tmp_path):
    """Every script of a pair draws its initial weights from the CPU generator, on any device: its layers are
    built without a device (by argument or `with torch.device(...)`) and moved, so that on a GPU the
    optimized script starts from the eager script's weights, as it does here. A layer built on the training
    device (the CPU here) fails this; shells built on "meta" (they hold no weights of their own) pass."""
    import torch.nn as nn
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    module, built = load_script(script), []
    for layer in (nn.Linear, nn.Conv2d):
        init = layer.__init__

        def recording(self, *args, _init=init, **kwargs):
            contexts = [m.device for m in _get_current_function_mode_stack() if isinstance(m, DeviceContext)]
            device = torch.device(kwargs.get("device") or (contexts[-1] if contexts else "cpu"))
            # a device given, by argument or context, other than "meta"
            built.append((type(self).__name__, device.type != "meta" and ("device" in kwargs or bool(contexts)),
                          device.type))
            _init(self, *args, **kwargs)
        monkeypatch.setattr(layer, "__init__", recording)

    def stop(*args, **kwargs):
        raise _NetworksBuilt
    monkeypatch.setattr(harness, "make_writer", stop)
    monkeypatch.chdir(tmp_path)
    args = SPECS[script].short
    with pytest.raises(_NetworksBuilt):
        module.main(module.Args(**{a[2:].replace("-", "_"): type(getattr(module.Args, a[2:].replace("-", "_")))(v)
                                   for a, v in zip(args[::2], args[1::2])}))
    real = [(name, explicit) for name, explicit, device in built if device != "meta"]
    assert real, "no layer was built"
    assert not [name for name, explicit in real if explicit], f"layers built on a given device: {real}"
    assert {device for _, _, device in built} <= {"cpu", "meta"}, built


def prose(lines: list[str]) -> list[str]:
    """Each line's prose: its comment, or its part of a string that spans lines (a docstring); '' for code."""
    import io
    import tokenize

    text = [""] * len(lines)
    for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
        if tok.type == tokenize.COMMENT:
            text[tok.start[0] - 1] += tok.string
        elif tok.type == tokenize.STRING and tok.string.startswith('"""'):  # a docstring, line by line
            for row, part in enumerate(tok.string.splitlines(), start=tok.start[0]):
                text[row - 1] += part
    return text


# The lines of a pair's diff that are not its lesson, named once: the module docstring, the imports, and the Args
# fields of the optimization flags (with their one-line docstrings).
OPTIMIZATION_FLAGS = ("compile", "cudagraphs")
FLAG_FIELD = re.compile(rf'\s*({"|".join(OPTIMIZATION_FLAGS)}): bool = False$|\s*"""whether to use ')
IMPORT = re.compile(r"\s*(import \w|from [\w.]+ import )")


def checkpoint_lines(lines: list[str]) -> set[int]:
    """The lines of the statement that names a run's state for its checkpoints (`checkpoint = harness.Checkpoint(`
    to its closing parenthesis): plumbing, where a twin's state has other names than its eager script's."""
    found, depth = set(), 0
    for i, line in enumerate(lines):
        code = line.split("  #")[0]
        if depth or "harness.Checkpoint(" in code:
            found.add(i)
            depth += code.count("(") + code.count("[") - code.count(")") - code.count("]")
    return found
# what the lesson asks of every pair (issue 58): every hunk tagged, most with one optimization, none too long
MOST_CHANGED, ONE_TAG_SHARE = 60, 0.8
TAG = re.compile(r"\[([a-z][a-z0-9]*(?:-[a-z0-9]+)*)\]")  # an optimization's name, as a twin's prose writes it
LISTED = re.compile(r"^- \[([a-z][a-z0-9-]*)\] ", re.M)  # an item of a twin's docstring list


def optimizations_table() -> dict[str, str]:
    """docs/optimizations.md's table of every optimization: {name: its "used by" cell}."""
    from helpers import REPO

    text = (REPO / "docs" / "optimizations.md").read_text()
    table = text.split("## Every optimization, pair by pair")[1].split("\n\n|")[1].split("\n\n")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in ("|" + table).splitlines()[2:]]
    return {re.fullmatch(r"`\[(.+)\]`", row[0]).group(1): row[2] for row in rows}


def listed(script: str) -> list[str]:
    """The names a script's docstring lists, in order."""
    from helpers import SCRIPT_DIR

    return LISTED.findall((SCRIPT_DIR / f"{script}.py").read_text().split('"""')[1])


@dataclass
class Hunk:
    """One hunk of `diff -u eager optimized` (3 lines of context): its header, its changed lines (removed and
    added), the tags `[N]` in the prose of its added lines, whether it is plumbing only, and the changes of shape
    riding along (`shape_only`)."""
    header: str
    changed: int
    tags: set
    plumbing: bool
    renames: list


def shape_only(old: str, new: str) -> bool:
    """Whether two lines of code differ only by a change of shape, not of what they compute: a field read as an
    attribute and as an item (data.actions -> data["actions"]), parentheses added or dropped, spacing."""
    import io
    import tokenize

    def tokens(line):
        try:
            toks = [tok for tok in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline)
                    if tok.type in (tokenize.NAME, tokenize.OP, tokenize.STRING, tokenize.NUMBER)]
        except (tokenize.TokenError, IndentationError, SyntaxError):
            return None
        out = []
        for tok in toks:
            if tok.type == tokenize.STRING and out and out[-1] == "[":  # x["k"] -> x . k
                out[-1] = "."
                out.append(tok.string.strip("\"'"))
            elif tok.string == "]" and len(out) > 1 and out[-2] == ".":
                continue
            elif tok.string not in "()":
                out.append(tok.string)
        return out

    a, b = tokens(old), tokens(new)
    return a is not None and a == b and old.strip() != new.strip()


def diff_hunks(old: list[str], new: list[str], names=None) -> list[Hunk]:
    """The hunks of the unified diff of two scripts' lines, as `diff -u` cuts them (difflib's grouped opcodes with
    3 lines of context: the hunks of difflib.unified_diff)."""
    import difflib

    def docstring_end(lines):  # the line after the module docstring
        quotes = [i for i, line in enumerate(lines) if '"""' in line]
        return quotes[1] + 1 if quotes and quotes[0] == 0 and len(quotes) > 1 else 0

    ends, new_prose = (docstring_end(old), docstring_end(new)), prose(new)
    state = (checkpoint_lines(old), checkpoint_lines(new))
    names = set(names) if names is not None else set(optimizations_table())

    def plumbing(side, i):
        line = (old, new)[side][i]
        return i < ends[side] or not line.strip() or i in state[side] or bool(IMPORT.match(line) or FLAG_FIELD.match(line))

    hunks = []
    for group in difflib.SequenceMatcher(None, old, new, autojunk=False).get_grouped_opcodes(3):
        changed, tags, renames = [], set(), []
        for op, i1, i2, j1, j2 in group:
            if op == "equal":
                continue
            changed += [(0, i) for i in range(i1, i2)] + [(1, j) for j in range(j1, j2)]
            for j in range(j1, j2):
                tags |= set(TAG.findall(new_prose[j])) & names
            for i in range(i1, i2):  # a removed line and an added one that differ by their shape only
                for j in range(j1, j2):
                    code_old, code_new = old[i].split("  #")[0], new[j].split("  #")[0]
                    if shape_only(code_old, code_new):
                        renames.append(f"{code_old.strip()!r} -> {code_new.strip()!r}")
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        hunks.append(Hunk(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@", len(changed), tags,
                          all(plumbing(side, i) for side, i in changed), renames))
    return hunks


def lesson_faults(old: list[str], new: list[str], name: str, names=None) -> list[str]:
    """What keeps `diff -u` of a pair from reading as its lesson (the contract): a hunk that is not plumbing and
    carries no name, or a name its optimized script's docstring does not list; fewer than ONE_TAG_SHARE of those
    hunks carrying exactly one optimization; a hunk of more than MOST_CHANGED changed lines; a change of shape
    riding along (a removed and an added line that compute the same: `shape_only`); an optimization of the
    docstring's list that no hunk carries. `names`: the optimizations' names (docs/optimizations.md's)."""
    items = set(LISTED.findall("\n".join(new).split('"""')[1]))
    if not items:
        return [f"{name}: its docstring lists no optimization (- [name] ...)"]
    lesson = [h for h in diff_hunks(old, new, names) if not h.plumbing]
    faults = [f"{name} {h.header}: untagged" for h in lesson if not h.tags]
    faults += [f"{name} {h.header}: tagged {sorted(h.tags - items)}, not in the docstring's list"
               for h in lesson if h.tags - items]
    faults += [f"{name} {h.header}: {h.changed} changed lines, more than {MOST_CHANGED}"
               for h in lesson if h.changed > MOST_CHANGED]
    faults += [f"{name} {h.header}: a change of shape rides along: {r}" for h in lesson for r in h.renames]
    one = sum(len(h.tags) == 1 for h in lesson)
    if lesson and one < ONE_TAG_SHARE * len(lesson):
        faults.append(f"{name}: {one} of {len(lesson)} hunks carry exactly one optimization, fewer than "
                      f"{ONE_TAG_SHARE:.0%}: " + ", ".join(f"{h.header} {sorted(h.tags)}" for h in lesson
                                                             if len(h.tags) > 1))
    used = set().union(*(h.tags for h in lesson)) if lesson else set()
    return faults + [f"{name}: optimization [{n}] of the docstring tags no hunk" for n in sorted(items - used)]


PAIR_NAMES = [s for s in CHECKED if f"{s}_torchcompile" in CHECKED]


@pytest.mark.parametrize("eager", PAIR_NAMES)
def test_the_diff_of_a_pair_is_its_lesson(eager):
    """`diff -u X.py X_torchcompile.py` reads as a lesson (the contract): beside the plumbing (docstring, imports,
    the optimization flags, the statement naming the run's state for its checkpoints), every hunk is an optimization, tagged with its number in the optimized script's
    docstring, most hunks exactly one, none long, no rename riding along, and every listed optimization shows."""
    from helpers import SCRIPT_DIR

    old = (SCRIPT_DIR / f"{eager}.py").read_text().splitlines()
    new = (SCRIPT_DIR / f"{eager}_torchcompile.py").read_text().splitlines()
    assert lesson_faults(old, new, eager) == []


def test_the_diff_test_sees_a_rename_a_bare_hunk_and_a_long_one():
    """The lesson's checks fail on broken copies of a pair: a field's access changed (an attribute read as an item)
    next to a tagged line, parentheses dropped, an untagged hunk, a hunk too long, most hunks holding two
    optimizations."""
    old = ["def update(data):", "    x = data.obs", "    y = net(x)", "    loss = (y).mean()", "    a = 1", "    b = 2",
           "    c = 3", "    d = 4", "    e = 5", "    f = 6", "    g = 7", "    return loss"]
    doc = ['"""Fast.', "", "- [one] one", "- [two] two", '"""']
    names = {"one", "two"}
    new = doc + old[:2] + ["    y = vnet(x)  # [one] vmapped"] + old[3:]
    assert lesson_faults(doc + old, new, "pair", names) == ["pair: optimization [two] of the docstring tags no hunk"]
    renamed = new[:6] + ['    x = data["obs"]'] + new[7:]
    assert any("a change of shape" in f for f in lesson_faults(doc + old, renamed, "pair", names))
    shaped = new[:8] + ["    loss = y.mean()"] + new[9:]
    assert any("a change of shape" in f for f in lesson_faults(doc + old, shaped, "pair", names))
    bare = new[:-2] + ["    g = 8"] + new[-1:]
    assert any("untagged" in f for f in lesson_faults(doc + old, bare, "pair", names))
    long = new[:-1] + [f"    h{i} = {i}" for i in range(61)] + ["    # [two] many", new[-1]]
    assert any("more than 60" in f for f in lesson_faults(doc + old, long, "pair", names))
    both = new[:7] + ["    y = vnet(x)  # [one] vmapped [two] compiled"] + new[8:]
    assert any("fewer than 80%" in f for f in lesson_faults(doc + old, both, "pair", names))
    foreign = new[:7] + ["    y = vnet(x)  # [three] vmapped"] + new[8:]  # a name that is no optimization's: no tag
    assert any("untagged" in f for f in lesson_faults(doc + old, foreign, "pair", names))


# Runs an optimized script's main() with --compile --cudagraphs on the CPU (where CudaGraphModule calls its
# function directly) and records, per compiled function and kind of call, at which of its calls dynamo
# compiled a graph, and the warm-up each CudaGraphModule was given. COMPILED_ACTING takes the CPU in too:
# the acting steps that --compile compiles on CUDA only are compiled here as well.
SETTLE = """
import atexit, json, sys
import torch, tyro
from tensordict.nn import CudaGraphModule
from leanrl_utils.scripts import load_script

out, name = sys.argv[1], sys.argv[2]
calls, compiles, warmups = {}, {}, []
counters = torch._dynamo.utils.counters
compile_ = torch.compile


def kind(args, kwargs):
    plain = [repr(a) for a in args if isinstance(a, bool)]
    plain += [f"{k}={v!r}" for k, v in sorted(kwargs.items()) if isinstance(v, (bool, int, str))]
    return f"({', '.join(plain)})" if plain else ""


def recording_compile(fn=None, **options):
    if fn is None:
        return lambda f: recording_compile(f, **options)
    compiled, fname = compile_(fn, **options), getattr(fn, "__qualname__", repr(fn))

    def call(*args, **kwargs):
        key = fname + kind(args, kwargs)
        n = calls[key] = calls.get(key, 0) + 1
        before = counters["stats"]["unique_graphs"]
        result = compiled(*args, **kwargs)
        if counters["stats"]["unique_graphs"] != before:
            compiles.setdefault(key, []).append(n)
        return result
    return call


init = CudaGraphModule.__init__


def recording_init(self, module, *args, warmup=2, **kwargs):
    warmups.append(warmup)
    init(self, module, *args, warmup=warmup, **kwargs)


torch.compile, CudaGraphModule.__init__ = recording_compile, recording_init
module = load_script(name)
if hasattr(module, "COMPILED_ACTING"):
    module.COMPILED_ACTING = (*module.COMPILED_ACTING, "cpu")
atexit.register(lambda: open(out, "w").write(json.dumps({"calls": calls, "compiles": compiles, "warmups": warmups})))
module.main(tyro.cli(module.Args, args=sys.argv[3:]))
"""
SETTLE_RUNS = {  # long enough that every compiled kind of call runs past its capture (PPO Atari: 8 iterations)
    "ppo_atari_envpool_torchcompile": lambda short: with_flag(short, "--total-timesteps", "512"),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", [s for s in PYTORCH if s.endswith("_torchcompile")])
def test_compilation_settles_well_before_the_capture(script, tmp_path):
    """Under --cudagraphs, each function is captured after its warm-up calls: a graph that dynamo compiled
    again after them would be compiled inside the capture, or never captured. On the CPU (the same code,
    compiled, called directly), every compiled function's last compilation comes at least two calls before
    its capture, for each kind of call (SAC's update with and without its actor step are two), and every
    kind runs past it. The acting steps compiled on CUDA only (TD3, DQN, DQN Atari) are compiled here too,
    and run."""
    import json
    import subprocess
    import sys

    from helpers import ENV, Run

    args = SETTLE_RUNS.get(script, list)(list(SPECS[script].short))
    cmd = [sys.executable, "-c", SETTLE, str(tmp_path / "settle.json"), script, *args, "--compile", "--cudagraphs"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    Run(proc.returncode, proc.stdout, proc.stderr, tmp_path).check()
    record = json.loads((tmp_path / "settle.json").read_text())
    warmup = set(record["warmups"])
    assert len(warmup) == 1, f"one warm-up for every graph of a script: {record['warmups']}"
    warmup = warmup.pop()
    assert record["compiles"] and set(record["compiles"]) == set(record["calls"]), record
    for key, at in record["compiles"].items():
        assert max(at) <= warmup - 2, f"{key}: compiled at calls {at}; its capture comes at call {warmup + 1}"
        assert record["calls"][key] > warmup + 1, f"{key}: {record['calls'][key]} calls, not past its capture"
    acting = {"td3_continuous_action_torchcompile": "main.<locals>.policy", "dqn_torchcompile": "main.<locals>.policy",
              "dqn_atari_envpool_torchcompile": "main.<locals>.policy"}.get(script)
    assert acting is None or acting in record["calls"], sorted(record["calls"])


# Runs a script with tensordict's CudaGraphModule replaced by one that does on the CPU what a CUDA graph whose
# input copies are off does on a GPU: from the call that captures on (the `warmup`-th), every call runs the
# function on that call's inputs again.
FROZEN = """
import runpy, sys
import torch
import tensordict.nn
from torch.utils._pytree import tree_map


class FrozenInputs:
    def __init__(self, module, *args, warmup=2, **kwargs):
        self.module, self.warmup, self.calls, self.frozen = module, warmup, 0, None

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.warmup:
            self.frozen = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, (args, kwargs))
        if self.frozen is not None:
            args, kwargs = self.frozen
        return self.module(*args, **kwargs)


tensordict.nn.CudaGraphModule = FrozenInputs
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("pair", ["sac", "td3", "ppo_continuous", "ppo_atari", "dqn", "dqn_atari"])
def test_the_gpu_comparison_catches_frozen_inputs(pair, tmp_path):
    """tests/test_gpu.py compares each optimized script's first updates under CUDA graphs with the eager twin's,
    and asks that comparison to fail when the graphs replay stale inputs. Shown here on the CPU with the same
    runs, tags, steps and tolerance: inputs frozen at the capture call make some value leave the tolerance,
    and the same run without freezing stays within it."""
    import subprocess
    import sys

    from helpers import ENV, GPU_RUNS as RUNS, GPU_TOL as TOL, SCRIPT_DIR, Run, assert_close_logs, log_differences, \
        run_script

    eager, fast, args, tags, upto, _ = RUNS[pair]
    reference = run_script(eager, *args, cwd=tmp_path / "eager").check()
    graphs = run_script(fast, *args, "--cudagraphs", cwd=tmp_path / "graphs").check()
    assert_close_logs(graphs, reference, tags, upto_step=upto, **TOL)
    frozen_dir = tmp_path / "frozen"
    frozen_dir.mkdir()
    proc = subprocess.run([sys.executable, "-c", FROZEN, str(SCRIPT_DIR / f"{fast}.py"), *args, "--cudagraphs"],
                          cwd=frozen_dir, env=ENV, capture_output=True, text=True, timeout=900)
    frozen = Run(proc.returncode, proc.stdout, proc.stderr, frozen_dir).check()
    assert log_differences(frozen, reference, tags, upto_step=upto, **TOL), "frozen inputs went unnoticed"


# docs/optimizations.md's "used by" cells: a name per optimized twin, and the JAX twins after "JAX:"
TWINS = {"SAC": "sac_continuous_action", "TD3": "td3_continuous_action", "PPO": "ppo_continuous_action",
         "PPO Atari": "ppo_atari_envpool", "torchrun": "ppo_atari_envpool_multigpu", "DQN": "dqn",
         "DQN Atari": "dqn_atari_envpool"}


def test_the_optimizations_table_holds_every_twin_s_list():
    """docs/optimizations.md's table has one row per optimization, its name unique; each twin (optimized and JAX)
    lists in its docstring exactly the names whose row says it uses them, so the table follows the twins."""
    table = optimizations_table()
    users = {name: set() for name in table}
    for name, cell in table.items():
        torch_part, _, jax_part = cell.partition("JAX:")
        for pair in filter(None, (x.strip() for x in torch_part.strip().rstrip(";").split(","))):
            users[name].add(f"{TWINS[pair]}_torchcompile")
        for pair in filter(None, (x.strip() for x in jax_part.split(","))):
            users[name].add(f"{TWINS[pair]}_jax")
    twins = [s for s in CHECKED if s.endswith(("_torchcompile", "_jax"))]
    for twin in twins:
        names = listed(twin)
        assert len(names) == len(set(names)), (twin, names)
        assert sorted(names) == sorted(n for n, who in users.items() if twin in who), twin


def test_one_name_names_one_optimization_everywhere():
    """A name in brackets in any script's prose (comments, docstrings) is an optimization's name, and in a twin one
    of its own list: no number left from the numbered lists, no name of another twin's optimization, no name that
    is in no table row."""
    from helpers import SCRIPT_DIR

    names = set(optimizations_table())
    for script in CHECKED:
        lines = (SCRIPT_DIR / f"{script}.py").read_text().splitlines()
        text = "\n".join(prose(lines))
        assert not re.findall(r"\[\d+\]", text), (script, re.findall(r".{30}\[\d+\].{30}", text))
        used = set(TAG.findall(text)) & names
        own = set(listed(script)) if script.endswith(("_torchcompile", "_jax")) else set()
        assert used <= own, (script, sorted(used - own))


