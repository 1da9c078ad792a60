"""SAC's and TD3's updates, matmul by matmul, in torch and in XLA: a part of the limits study (docs/limits.md).

    python -m benchmarks.limits.matmul --out docs/limits/matmul/<cpu>     # SAC and TD3 on the speed table's task
    python -m benchmarks.limits.matmul --pairs td3 --quick                # a quick look, nothing to keep

Where the speed table finds `--compile` and the JAX twin apart on SAC and TD3, this tells what is slower, down
to the operation, on the CPU it runs on. Everything comes from the scripts' own code, in one process per run:

1. The updates, built by the scripts. The optimized script's main() runs a few steps past `learning_starts`
   with `--compile`, torch.compile replaced by a recorder that keeps the update function as written (main()
   still sets inductor's options, as it does for a user: the C++ wrapper, eager's random numbers, autograd
   traced into the graph); the JAX twin's main() runs alike, its jitted `train_step` recorded with its last
   state, buffer and key. The kinds of update the runs called (with the delayed actor step and without: the
   scripts alternate them) are the variants measured, on the same batch size, networks and environment shapes.
2. The matmuls each update runs, recorded, not assumed:
   - eager: the update run once per variant under a dispatch mode that records every aten mm, addmm, bmm and
     baddbmm call, its operands' shapes and strides, and the autograd node it ran in (forward, or the backward
     of which op);
   - compiled: the update compiled as the script compiles it, except with inductor's Python wrapper (whose
     calls of its extern matmuls go through the dispatcher, where the profiler sees them), profiled with
     `record_shapes`: every matmul the compiled program calls, with shapes and strides. The script's own
     program (the C++ wrapper) calls the same externs through inductor's C shims: their counts per kind are
     checked against these;
   - JAX: every dot of the twin's compiled train_step (its optimized HLO), with its dimension numbers and
     operand layouts, and the thunk that runs it (a dot, or a fusion that holds one).
   A layout is named as BLAS names a row-major call C = A @ B: A is N when stored as used (m x k, k
   contiguous) and T when stored transposed; B is N when stored k x n (n contiguous) and T when stored n x k.
   So nn.Linear's forward, x @ W^T with W stored out x in, is NT; its input's gradient NN, its weight's TN.
   V marks an operand with a dimension of one (a vector: one layout either way), G a layout with neither
   dimension contiguous. Batched calls (the vmapped twin critics) have their batch in front; "A shared" is a
   batch of one operand broadcast (stride 0), as vmap passes the critics' common input.
3. Every layout found (eager, compiled or JAX, both pairs) timed alone in both frameworks: torch on operands
   with the recorded strides (torch.utils.benchmark's Timer, with the scripts' thread count: the Timer runs
   one thread unless told), XLA as a jitted dot_general of operands stored in the same layout (the bias of
   addmm and baddbmm added), block_until_ready, and which thunk XLA runs it with (a YNNPACK fusion or its own
   dot thunk); interleaved rounds, GFLOP/s = 2 x batch x m x n x k / the median over rounds of each round's time
   (the bias addition not counted), torch's rate over XLA's per round (above 1: torch faster) and their median,
   and the tie rule's verdict (docs/: apart only when the rounds' ranges do not overlap).
4. The whole update of each variant timed in both frameworks, interleaved rounds: the script's compiled
   program (C++ wrapper) against the twin's jitted train_step (each call waited for).
5. The split, per variant: torch.profiler on the script's compiled program (built with inductor's kernel
   profiling on, which puts a record-function around each generated kernel and extern call, a flag check when
   no profiler runs), each call's time into the matmuls (the extern calls, the bias copies they make
   included), inductor's generated C++ kernels, other aten calls (the random draws), and the rest (the wrapper,
   dynamo's guards, allocations: what no recorded call covers). The same for the Python-wrapper program, per
   layout. Against it jax.profiler on the twin's train_step: each thunk's time (XLA's CPU runtime records one
   event per thunk, on whichever of its threads runs it) into the matmuls (dot thunks, and fusions that hold a
   dot: a fused bias or activation counts with its matmul), the other thunks (elementwise fusions, copies,
   random bits), and the rest of the call, the time when no thunk ran. Thunks may run at once on XLA's threads:
   the overlap (the thunks' summed time beyond the time any ran) is given, so that the parts add up to the call.
   Profiled times run above unprofiled ones (the profiler's own cost per recorded call); the whole-update times
   of step 4 are the unprofiled ones.

Writes results.md and results.json into --out. The figures hold on the CPU they were measured on only: they
carry the machine (CPU model, family, vendor), the thread counts, the OMP, MKL and XLA settings the command
started with, and the load average at its start and end (a shared machine disturbs torch's threads most: their
barriers wait for a thread that another process holds). `--quick` is a test of the plumbing, not a measurement.
"""

import argparse
import contextlib
import inspect
import io
import math
import os
import re
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import NoCompiling, load_script, write_results
from benchmarks.limits.limits import TASKS, cpu_fields
from benchmarks.sps import verdict
from leanrl_utils.scripts import PAIRS

# torch's profiler records each call's shapes and strides (FunctionEvent.structured_input_shapes) from torch 2.12 on;
# the compiled update's layouts are read from them, so torch 2.11 is refused at the start
PROFILER_HAS_SHAPES = "structured_input_shapes" in inspect.getsource(torch.autograd.profiler_util.FunctionEvent.__init__)

MATMULS = ("mm", "addmm", "bmm", "baddbmm")
CALL = "update call"  # the record-function / trace annotation around each profiled call
# a matmul in a profile: an aten op (eager, inductor's Python wrapper) or inductor's C shim (its C++ wrapper)
MATMUL_EVENT = re.compile(r"^(?:aten::|aoti_torch_cpu_)(mm|addmm|bmm|baddbmm)(?:_out)?$")
KERNEL_EVENT = re.compile(r"cpp_fused|cpp_kernel|cpp_template")  # inductor's generated C++ kernels
OP_EVENT = re.compile(r"^(?:aten::|aoti_torch_)")  # any other aten call or C shim
CONTAINERS = ("while", "call", "conditional")  # XLA thunks that run other thunks (theirs are counted)


STARTED = time.monotonic()


def say(what: str) -> None:
    print(f"limits_matmul [{time.monotonic() - STARTED:.0f} s]: {what}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet():
    """A script's run without its progress bar, prints and warnings, in a folder of its own (its runs/)."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp), contextlib.redirect_stderr(io.StringIO()), \
            contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def script_args(pair: str, opts) -> dict:
    """The short run's arguments: the speed table's environment and learning start, past it by the steps that
    call each kind of update once (`policy_frequency` of them)."""
    flags = TASKS[pair]
    env_id = opts.env_id or flags[flags.index("--env-id") + 1]
    starts = opts.learning_starts
    if starts is None:
        starts = int(flags[flags.index("--learning-starts") + 1]) if "--learning-starts" in flags else None
    args = load_script(PAIRS[pair] + "_torchcompile").Args(env_id=env_id)
    starts = args.learning_starts if starts is None else starts
    kwargs = dict(env_id=env_id, learning_starts=starts, total_timesteps=starts + 1 + args.policy_frequency)
    if opts.batch_size:
        kwargs["batch_size"] = opts.batch_size
    return kwargs


# --------------------------------------------------------------------------------------------------
# The updates, built by the scripts
# --------------------------------------------------------------------------------------------------
def torch_update(pair: str, kwargs: dict) -> dict:
    """The optimized script's update function as written, from a short run of its main() with --compile
    (torch.compile replaced by a recorder): the function, the last batch's indices and the kinds of call."""
    module = load_script(PAIRS[pair] + "_torchcompile")
    real, kept, calls = torch.compile, {}, []

    def recording_compile(fn=None, **options):
        if fn is None:
            return lambda f: recording_compile(f, **options)
        kept[fn.__name__] = fn

        def call(*args, **kw):
            calls.append((fn.__name__, args, kw))
            return fn(*args, **kw)
        return call

    torch.compile = recording_compile
    try:
        with quiet():
            module.main(module.Args(**kwargs, compile=True, cuda=False))
    finally:
        torch.compile = real
    updates = [(args, kw) for name, args, kw in calls if name == "update"]
    variants = []
    for _, kw in updates:
        if kw not in variants:
            variants.append(dict(kw))
    return {"fn": kept["update"], "idx": updates[-1][0][0], "variants": sorted(variants, key=policy_first)}


class JaxRunner:
    """The twin's jitted train_step and its state, buffer and key, as its main() left them. The state is
    donated at each call: one runner holds it for every kind of call."""

    def __init__(self, pair: str, kwargs: dict):
        module = load_script(PAIRS[pair] + "_jax")
        real, got, variants = module.make_update_fns, {}, []

        def recording(*args, **kw):
            fns = real(*args, **kw)
            step = fns.train_step

            def train_step(state, rb, key, **flags):
                out = step(state, rb, key, **flags)
                got.update(step=step, state=out[0], rb=rb, key=out[1])
                if flags not in variants:
                    variants.append(dict(flags))
                return out
            fns.train_step = train_step
            return fns

        module.make_update_fns = recording
        try:
            with quiet():
                module.main(module.Args(**kwargs))
        finally:
            module.make_update_fns = real
        self.step, self.state, self.rb, self.key = got["step"], got["state"], got["rb"], got["key"]
        self.variants = sorted(variants, key=policy_first)

    def __call__(self, flags: dict) -> None:
        import jax

        self.state, self.key, info = self.step(self.state, self.rb, self.key, **flags)
        jax.block_until_ready((self.state, info))

    def hlo(self, flags: dict) -> str:
        return self.step.lower(self.state, self.rb, self.key, **flags).compile().as_text()


def policy_first(flags: dict) -> int:
    """Sorts the kinds of update: the one with the delayed actor step first."""
    return 0 if next(v for k, v in flags.items() if k.startswith("policy")) else 1


def variant_name(flags: dict) -> str:
    return "with actor step" if policy_first(flags) == 0 else "critic only"


# --------------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------------
def operand_letter(free: int, contracted: int, s_free: int, s_contracted: int, lhs: bool) -> str:
    """N or T as a row-major BLAS call names an operand (see the docstring); V for a vector, G for neither
    dimension contiguous."""
    if free == 1 or contracted == 1:
        return "V"
    if lhs:
        return "N" if s_contracted == 1 else "T" if s_free == 1 else "G"
    return "N" if s_free == 1 else "T" if s_contracted == 1 else "G"


def operands(op: str) -> int:
    """The tensor operands an aten matmul takes first: the bias of addmm and baddbmm, then the two factors."""
    return 3 if op in ("addmm", "baddbmm") else 2


def torch_layout(op: str, shapes: list, strides: list) -> dict:
    """A torch matmul call's layout, from its operands' shapes and strides (the bias if any, then the factors)."""
    (a, b), (sa, sb) = shapes[-2:], strides[-2:]
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    la = operand_letter(m, k, sa[-2], sa[-1], lhs=True)
    lb = operand_letter(n, k, sb[-1], sb[-2], lhs=False)
    notes = [f"{x} shared" for x, s, st in (("A", a, sa), ("B", b, sb)) if len(s) == 3 and s[0] > 1 and st[0] == 0]
    # a leading dimension other than the contiguous one (a view of wider rows, as the buffer's columns are)
    for x, letter, st, size in (("A", la, sa, (k, m)), ("B", lb, sb, (n, k))):
        if letter in "NT":
            lead, expected = (st[-2], size[0]) if letter == "N" else (st[-1], size[1])
            if lead != expected:
                notes.append(f"ld{x.lower()} {lead}")
    shape = f"{m}x{k} @ {k}x{n}"
    name = f"{op} {batch}x({shape}) {la}{lb}" if op in ("bmm", "baddbmm") else f"{op} {shape} {la}{lb}"
    return {"name": name + (f" ({', '.join(notes)})" if notes else ""), "op": op, "batch": batch, "m": m, "n": n,
            "k": k, "layout": la + lb, "shapes": [list(s) for s in shapes], "strides": [list(s) for s in strides],
            "flops": 2 * batch * m * n * k}


class MatmulRecorder(TorchDispatchMode):
    """Every aten matmul call below it: its op, operands and the autograd node it ran in."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = func.overloadpacket.__name__
        if op in MATMULS:
            tensors = args[:operands(op)]
            node = torch._C._current_autograd_node()
            layout = torch_layout(op, [list(t.shape) for t in tensors], [list(t.stride()) for t in tensors])
            self.calls.append(layout | {"role": "forward" if node is None else f"backward of {node.name()}"})
        return func(*args, **(kwargs or {}))


def eager_matmuls(update: dict) -> dict:
    """Per kind of update, the matmuls of one eager call of the optimized script's update."""
    out = {}
    for flags in update["variants"]:
        with MatmulRecorder() as rec:
            update["fn"](update["idx"], **flags)
        out[variant_name(flags)] = rec.calls
    return out


# XLA's optimized HLO, as jax's compiled.as_text() prints it
SHAPE = re.compile(r"\w+\[([\d,]*)\](?:\{([\d,]*)[^}]*\})?")


def split_shape(text: str) -> tuple[str, str]:
    """An instruction's shape (a tuple in parentheses, or one array) and the text after it."""
    if text.startswith("("):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return text[: i + 1], text[i + 1:].lstrip()
    shape, _, rest = text.partition(" ")
    return shape, rest


def parse_hlo(text: str) -> dict:
    """name -> {opcode, shape, operands, attrs, calls, computation} for every instruction of an HLO module."""
    instructions, computation = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            if line.rstrip().endswith("{"):  # a computation's header: [ENTRY] %name (params) -> shape {
                computation = line.removeprefix("ENTRY ").split(" ")[0].split("(")[0].lstrip("%")
            continue
        match = re.match(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$", line)
        if computation is None or not match:
            continue
        name, rest = match.groups()
        shape, rest = split_shape(rest)
        op = re.match(r"([\w\-]+)\(", rest)
        if not op:
            continue
        depth, end = 0, len(rest)
        for i in range(op.end() - 1, len(rest)):
            depth += rest[i] == "("
            depth -= rest[i] == ")"
            if depth == 0:
                end = i
                break
        attrs = rest[end + 1:]
        groups = re.findall(r"(?:calls|body|condition|to_apply|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)", attrs)
        called = [n for group in groups for n in re.findall(r"%?([\w.\-]+)", group)]
        instructions[name] = {"opcode": op.group(1), "shape": shape, "attrs": attrs, "calls": called,
                              "operands": re.findall(r"%([\w.\-]+)", rest[op.end():end]), "computation": computation}
    return instructions


def dims_and_layout(shape: str) -> tuple[list[int], list[int]]:
    match = SHAPE.match(shape)
    dims = [int(d) for d in match.group(1).split(",") if d] if match else []
    layout = [int(d) for d in (match.group(2) or "").split(",") if d] if match else []
    return dims, layout or list(reversed(range(len(dims))))


def xla_layout(dot: dict, instructions: dict) -> dict:
    """A dot's layout, named as torch's are (its operands' shapes and layouts, its dimension numbers)."""
    def numbers(key):
        found = re.search(key + r"=\{([\d,]*)\}", dot["attrs"])
        return [int(d) for d in found.group(1).split(",") if d] if found else []

    sides = []
    for operand, side in zip(dot["operands"][:2], ("lhs", "rhs")):
        dims, layout = dims_and_layout(instructions[operand]["shape"])
        batch, contracting = numbers(f"{side}_batch_dims"), numbers(f"{side}_contracting_dims")
        free = [d for d in range(len(dims)) if d not in batch and d not in contracting]
        minor = next((d for d in layout if dims[d] > 1 and d not in batch), None)
        sides.append((math.prod(dims[d] for d in batch), math.prod(dims[d] for d in free),
                      math.prod(dims[d] for d in contracting), minor in contracting, minor in free))
    (batch, m, k, a_minor_contracted, _), (_, n, _, b_minor_contracted, b_minor_free) = sides
    la = "V" if m == 1 or k == 1 else "N" if a_minor_contracted else "T"
    lb = "V" if n == 1 or k == 1 else "N" if b_minor_free else "T" if b_minor_contracted else "G"
    shape = f"{m}x{k} @ {k}x{n}"
    name = f"dot {batch}x({shape}) {la}{lb}" if batch > 1 else f"dot {shape} {la}{lb}"
    return {"name": name, "op": "dot", "batch": batch, "m": m, "n": n, "k": k, "layout": la + lb,
            "flops": 2 * batch * m * n * k}


def runs_as(thunk: str, instructions: dict) -> str:
    """What runs a dot: XLA's own dot thunk, or the fusion that holds it, named by its kind (`ynn_fusion`: XLA
    hands it to YNNPACK)."""
    if instructions[thunk]["opcode"] == "dot":
        return "XLA dot thunk"
    return re.sub(r"\.\d+$", "", thunk)


def dots_of(name: str, instructions: dict) -> list[str]:
    """The dots an instruction runs: itself, or those of the computations it calls (a fusion's)."""
    ins = instructions.get(name)
    if ins is None:
        return []
    if ins["opcode"] == "dot":
        return [name]
    return [d for comp in ins["calls"] for n, i in instructions.items() if i["computation"] == comp
            for d in dots_of(n, instructions)]


def xla_matmuls(hlo: str) -> tuple[list[dict], dict]:
    """The dots of a compiled module (each with the thunk that runs it), and the module's instructions."""
    instructions = parse_hlo(hlo)
    fused = {c for i in instructions.values() if i["opcode"] == "fusion" for c in i["calls"]}
    out = []
    for name, ins in instructions.items():
        if ins["computation"] in fused:
            continue  # reached through its fusion below
        for dot in dots_of(name, instructions) if ins["opcode"] not in CONTAINERS else []:
            out.append(xla_layout(instructions[dot], instructions) | {"thunk": name, "dot": dot,
                                                                       "runs as": runs_as(name, instructions)})
    return out, instructions


# --------------------------------------------------------------------------------------------------
# Timing each layout in both frameworks
# --------------------------------------------------------------------------------------------------
def strided(shape: list, stride: list) -> torch.Tensor:
    """Random float32 values viewed with exactly these shape and strides (a stride of 0 included)."""
    size = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
    return torch.randn(max(size, 1)).as_strided(shape, stride)


def canonical(row: dict) -> tuple[list, list]:
    """Torch operands for a layout found in XLA only: the factors stored as its letters say, contiguous."""
    b, m, n, k = row["batch"], row["m"], row["n"], row["k"]
    a = torch.randn(k, m).t() if row["layout"][0] == "T" else torch.randn(m, k)
    w = torch.randn(n, k).t() if row["layout"][1] == "T" else torch.randn(k, n)
    if b > 1:
        a = torch.randn(b, k, m).transpose(1, 2) if row["layout"][0] == "T" else torch.randn(b, m, k)
        w = torch.randn(b, n, k).transpose(1, 2) if row["layout"][1] == "T" else torch.randn(b, k, n)
    return [list(a.shape), list(w.shape)], [list(a.stride()), list(w.stride())]


def torch_call(row: dict):
    tensors = [strided(s, st) for s, st in zip(row["shapes"], row["strides"])]
    return getattr(torch, row["op"]), tensors


def xla_call(row: dict):
    """The layout as a jitted dot_general: each factor stored as its letter says (its batch broadcast inside the
    call where torch's is shared), the bias added for addmm and baddbmm."""
    import jax
    import jax.numpy as jnp

    b, m, n, k = row["batch"], row["m"], row["n"], row["k"]
    la, lb = row["layout"]
    shared = row["name"]
    a_shape = (k, m) if la == "T" else (m, k)
    w_shape = (n, k) if lb == "T" else (k, n)
    if b > 1:
        a_shape = a_shape if "A shared" in shared else (b, *a_shape)
        w_shape = w_shape if "B shared" in shared else (b, *w_shape)
    rng = np.random.default_rng(0)
    arrays = [jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in (a_shape, w_shape)]
    if row["op"] in ("addmm", "baddbmm"):
        arrays.append(jnp.asarray(rng.standard_normal(row["shapes"][0], dtype=np.float32)))

    def f(a, w, *bias):
        if b > 1:
            a = a if a.ndim == 3 else jnp.broadcast_to(a, (b, *a.shape))
            w = w if w.ndim == 3 else jnp.broadcast_to(w, (b, *w.shape))
        batch = ((0,), (0,)) if b > 1 else ((), ())
        ca = a.ndim - 2 if la == "T" else a.ndim - 1
        cw = w.ndim - 1 if lb == "T" else w.ndim - 2
        out = jax.lax.dot_general(a, w, (((ca,), (cw,)), batch))
        return out + bias[0] if bias else out

    fn = jax.jit(f)
    fn(*arrays).block_until_ready()  # compiled before timing
    dots, _ = xla_matmuls(fn.lower(*arrays).compile().as_text())
    row["xla runs as"] = ", ".join(sorted({d["runs as"] for d in dots})) or "no dot"
    return fn, arrays


def layout_rows(found: dict) -> list[dict]:
    """One row per layout to time: each torch call's (its op, shapes and strides), then each XLA dot's that no
    torch row has (same batch, sizes and letters), with the calls per pair and where each was found.
    `found`: pair -> {"eager": {variant: [layouts]}, "compiled": {...}, "jax": {...}}."""
    rows = {}

    def sizes(r):
        return r["batch"], r["m"], r["n"], r["k"], r["layout"]

    for source in ("compiled", "eager", "jax"):
        for pair, sources in found.items():
            for calls in sources[source].values():
                for call in calls:
                    name = call["name"]
                    if source == "jax":  # torch's row of the same layout, if there is one
                        name = next((r["name"] for r in rows.values() if sizes(r) == sizes(call)), name)
                    if name not in rows:
                        row = {k: call[k] for k in ("name", "op", "batch", "m", "n", "k", "layout", "flops")}
                        if source == "jax":  # timed in torch as its letters say, contiguous
                            row["op"] = "bmm" if call["batch"] > 1 else "mm"
                            row["shapes"], row["strides"] = canonical(call)
                        else:
                            row["shapes"], row["strides"] = call["shapes"], call["strides"]
                        rows[name] = row | {"found": {}, "roles": []}
                    counts = rows[name]["found"].setdefault(pair, {"eager": 0, "compiled": 0, "jax": 0})
                    counts[source] += 1
                    if call.get("role") and call["role"] not in rows[name]["roles"]:
                        rows[name]["roles"].append(call["role"])
    return list(rows.values())


def time_layouts(rows: list[dict], rounds: int, min_run_time: float, threads: int) -> None:
    """Each row's seconds per call, torch's and XLA's, one time per round each (Timer's median), the rows and the
    frameworks taking turns round after round: `torch_s` and `xla_s` in each row."""
    from torch.utils.benchmark import Timer

    calls = [(row, torch_call(row), xla_call(row)) for row in rows]
    for row in rows:
        row["torch_s"], row["xla_s"] = [], []
    for _ in range(rounds):
        for row, (op, tensors), (fn, arrays) in calls:
            timer = Timer("op(*t)", globals={"op": op, "t": tensors}, num_threads=threads)
            row["torch_s"].append(timer.blocked_autorange(min_run_time=min_run_time).median)
            timer = Timer("fn(*a).block_until_ready()", globals={"fn": fn, "a": arrays}, num_threads=threads)
            row["xla_s"].append(timer.blocked_autorange(min_run_time=min_run_time).median)


def rates(row: dict) -> dict:
    """A row's GFLOP/s (its FLOPs over the median of its rounds' times) and torch's rate over XLA's per round."""
    ratios = [x / t for t, x in zip(row["torch_s"], row["xla_s"])]
    return {"torch_gflops": row["flops"] / statistics.median(row["torch_s"]) / 1e9,
            "xla_gflops": row["flops"] / statistics.median(row["xla_s"]) / 1e9,
            "ratio": statistics.median(ratios), "ratios": ratios,
            "verdict": verdict([row["flops"] / t for t in row["torch_s"]], [row["flops"] / t for t in row["xla_s"]])}


# --------------------------------------------------------------------------------------------------
# The split: profiles of both updates
# --------------------------------------------------------------------------------------------------
def compile_update(update: dict, cpp_wrapper: bool):
    """The update compiled as the script compiles it (main() set inductor's options), with inductor's kernel
    profiling, and the C++ wrapper (the script's) or the Python one; each kind of call compiled before return."""
    torch._dynamo.reset()
    compiled = torch.compile(update["fn"])
    with torch._inductor.config.patch({"cpp_wrapper": cpp_wrapper, "cpp.enable_kernel_profile": True}), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flags in update["variants"]:
            compiled(update["idx"], **flags)
            compiled(update["idx"], **flags)
    return compiled


def torch_profile(fn, calls: int):
    """The profiler's events of `calls` calls of fn, each in a record-function of its own (CALL), with shapes."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with NoCompiling(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(calls):
            with record_function(CALL):
                fn()
    return prof.events()


def torch_split(events, calls: int) -> dict:
    """Each call's time (ms, per call) into matmuls (per kind, and per layout where the profile has the shapes),
    inductor's kernels, other aten calls and the rest. An event counts once, with what it calls."""
    split = {"call": 0.0, "matmul": 0.0, "kernels": 0.0, "other calls": 0.0}
    per_op, per_layout, others = {}, {}, {}

    def walk(event):
        for child in event.cpu_children:
            us = child.cpu_time_total
            if match := MATMUL_EVENT.match(child.name):
                split["matmul"] += us
                per_op[match.group(1)] = per_op.get(match.group(1), 0) + 1
                # the shapes and strides of the call (PROFILER_HAS_SHAPES; without them the call counts, not its layout)
                shapes = getattr(child, "structured_input_shapes", None)
                strides = getattr(child, "structured_input_strides", None)
                if shapes and strides:  # (the out= variant lists its output after the operands)
                    n = operands(match.group(1))
                    layout = torch_layout(match.group(1), shapes[:n], strides[:n])
                    entry = per_layout.setdefault(layout["name"], layout | {"calls": 0, "ms": 0.0})
                    entry["calls"] += 1
                    entry["ms"] += us / 1e3
            elif KERNEL_EVENT.search(child.name):
                split["kernels"] += us
            elif OP_EVENT.match(child.name):
                split["other calls"] += us
                others[child.name] = others.get(child.name, 0.0) + us / 1e3 / calls
            else:
                walk(child)

    for event in events:
        if event.name == CALL:
            split["call"] += event.cpu_time_total
            walk(event)
    out = {k: v / 1e3 / calls for k, v in split.items()}  # µs in all calls -> ms per call
    out["rest"] = out["call"] - out["matmul"] - out["kernels"] - out["other calls"]
    for entry in per_layout.values():
        entry["calls"] /= calls
        entry["ms"] /= calls
    return out | {"matmul calls per kind": {k: v / calls for k, v in per_op.items()}, "matmul per layout": per_layout,
                  "other calls by name": others}


def union(intervals: list[tuple[float, float]]) -> float:
    """The length of a union of intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def jax_profile(runner: JaxRunner, flags: dict, calls: int) -> list:
    """The thunk events (name, start, end in ns) and the calls' windows of `calls` profiled calls."""
    import jax

    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        try:
            for _ in range(calls):
                with jax.profiler.TraceAnnotation(CALL):
                    runner(flags)
        finally:
            jax.profiler.stop_trace()
        data = jax.profiler.ProfileData.from_file(str(next(Path(tmp).rglob("*.xplane.pb"))))
    plane = data.find_plane_with_name("/host:CPU")
    windows, thunks = [], []
    for line in plane.lines:
        for event in line.events:
            if event.name == CALL:
                windows.append((event.start_ns, event.end_ns))
                continue
            stats = dict(event.stats)
            if "hlo_op" in stats and str(stats.get("hlo_module", "")).startswith("jit_train_step"):
                thunks.append((str(stats["hlo_op"]), event.start_ns, event.end_ns))
    return windows, thunks


def jax_split(windows: list, thunks: list, dots: list[dict], instructions: dict) -> dict:
    """Each call's time (ms, per call) into matmul thunks (per layout), the other thunks, their overlap and the
    rest (the call's time when no thunk ran)."""
    by_thunk = {}
    for d in dots:
        by_thunk.setdefault(d["thunk"], []).append(d)
    split = {"call": 0.0, "matmul": 0.0, "other thunks": 0.0, "overlap": 0.0, "rest": 0.0}
    per_layout, others = {}, {}
    for start, end in windows:
        inside = [(name, max(a, start), min(b, end)) for name, a, b in thunks if start <= a < end
                  and instructions.get(name, {}).get("opcode") not in CONTAINERS]
        covered = union([(a, b) for _, a, b in inside])
        split["call"] += end - start
        split["rest"] += (end - start) - covered
        split["overlap"] += sum(b - a for _, a, b in inside) - covered
        for name, a, b in inside:
            if name in by_thunk:
                split["matmul"] += b - a
                key = " + ".join(d["name"] for d in by_thunk[name])
                entry = per_layout.setdefault(key, {"thunk": name, "runs as": by_thunk[name][0].get("runs as", "-"),
                                                    "calls": 0, "ms": 0.0,
                                                    "flops": sum(d["flops"] for d in by_thunk[name])})
                entry["calls"] += 1
                entry["ms"] += (b - a) / 1e6
            else:
                split["other thunks"] += b - a
                kind = instructions.get(name, {}).get("opcode", "unknown")
                others[kind] = others.get(kind, 0.0) + (b - a) / 1e6
    n = max(len(windows), 1)
    out = {k: v / 1e6 / n for k, v in split.items()}  # ns in all calls -> ms per call
    for entry in per_layout.values():
        entry["calls"] /= n
        entry["ms"] /= n
    return out | {"matmul per layout": per_layout, "other thunks by opcode": {k: v / n for k, v in others.items()},
                  "calls profiled": len(windows)}


def time_updates(arms: dict, rounds: int, min_run_time: float, threads: int) -> dict[str, list[float]]:
    """Seconds per call of each arm, one Timer median a round, the arms taking turns."""
    from torch.utils.benchmark import Timer

    times = {name: [] for name in arms}
    with NoCompiling():
        for _ in range(rounds):
            for name, fn in arms.items():
                times[name].append(Timer("fn()", globals={"fn": fn}, num_threads=threads)
                                   .blocked_autorange(min_run_time=min_run_time).median)
    return times


# --------------------------------------------------------------------------------------------------
def measure_pair(pair: str, opts, threads: int) -> dict:
    kwargs = script_args(pair, opts)
    say(f"{pair}: the scripts' short runs ({kwargs})")
    update = torch_update(pair, kwargs)
    runner = JaxRunner(pair, kwargs)
    names = [variant_name(f) for f in update["variants"]]
    if names != [variant_name(f) for f in runner.variants]:
        raise SystemExit(f"limits_matmul: {pair}: the twins ran other kinds of update ({update['variants']}, "
                         f"{runner.variants})")
    result = {"args": kwargs, "variants": names, "eager": eager_matmuls(update), "compiled": {}, "jax": {},
              "update_s": {}, "split": {}}
    hlo = {}
    for flags in runner.variants:
        dots, instructions = xla_matmuls(runner.hlo(flags))
        hlo[variant_name(flags)] = dots, instructions
        result["jax"][variant_name(flags)] = dots

    # the script's program (C++ wrapper): timed whole against the twin's train_step, then profiled
    say(f"{pair}: compiling the update (C++ wrapper)")
    compiled = compile_update(update, cpp_wrapper=True)
    say(f"{pair}: timing and profiling the updates")
    arms = {}
    for tflags, jflags in zip(update["variants"], runner.variants):
        name = variant_name(tflags)
        arms[f"compile, {name}"] = lambda f=tflags: compiled(update["idx"], **f)
        arms[f"jax, {name}"] = lambda f=jflags: runner(f)
    for fn in arms.values():
        fn()  # warm
    result["update_s"] = time_updates(arms, opts.rounds, opts.min_run_time, threads)
    for tflags, jflags in zip(update["variants"], runner.variants):
        name = variant_name(tflags)
        events = torch_profile(lambda f=tflags: compiled(update["idx"], **f), opts.profile_calls)
        split = result["split"].setdefault(name, {})
        split["compile"] = torch_split(events, opts.profile_calls)
        windows, thunks = jax_profile(runner, jflags, opts.profile_calls)
        split["jax"] = jax_split(windows, thunks, *hlo[name])
    # the same program with Python's wrapper: its matmuls with their shapes and strides
    say(f"{pair}: compiling the update (Python wrapper)")
    compiled = compile_update(update, cpp_wrapper=False)
    for tflags in update["variants"]:
        name = variant_name(tflags)
        events = torch_profile(lambda f=tflags: compiled(update["idx"], **f), opts.profile_calls)
        split = torch_split(events, opts.profile_calls)
        result["split"][name]["compile (Python wrapper)"] = split
        result["compiled"][name] = [layout for layout in split["matmul per layout"].values()
                                    for _ in range(round(layout["calls"]))]
        # the script's program calls the same matmuls (counted per kind: its C shims carry no shapes)
        cpp_counts = result["split"][name]["compile"]["matmul calls per kind"]
        result["split"][name]["same matmuls in both wrappers"] = cpp_counts == split["matmul calls per kind"]
    torch._dynamo.reset()
    return result


# --------------------------------------------------------------------------------------------------
def ms(x: float) -> str:
    return f"{x:.3f}"


def said(rule: str, first: str, second: str) -> str:
    """The tie rule's verdict on `first` against `second`, in words."""
    return {"faster": f"{first} faster", "slower": f"{second} faster"}.get(rule, "tie")


def render(data: dict) -> str:
    def loads(when):
        return ", ".join(f"{x:.1f}" for x in data.get("load_average", {}).get(when, [])) or "not recorded"

    lines = [f"CPU: {data['cpu']['vendor']} (family {data['cpu']['family']}, model {data['cpu']['model']}; "
             f"{data['cpu']['vector']}). Threads: torch {data['threads']} (the scripts' count, every torch arm); XLA "
             f"its own pool ({data['cores']} cores). Environment as started: "
             f"{', '.join(f'{k}={v}' for k, v in data['env'].items()) or 'no OMP, MKL or XLA settings'}. Load average "
             f"(1, 5, 15 min) at the start {loads('start')}, at the end {loads('end')}: other work on the machine "
             "shows there, and disturbs torch's threads most.", "",
             f"{data['rounds']} interleaved round{'s' if data['rounds'] != 1 else ''}; each time is a Timer median over at least {data['min_run_time']} s; "
             f"profiles over {data['profile_calls']} calls. Layout letters: row-major BLAS (A @ B; N stored as used, T "
             "stored transposed, V a vector); nn.Linear's forward is NT, its input gradient NN, its weight gradient TN.",
             "", "## The update, whole", "",
             "| pair | update | --compile (ms) | JAX (ms) | JAX time / --compile time | per round | verdict |",
             "|---|---|---|---|---|---|---|"]
    for pair, r in data["pairs"].items():
        for name in r["variants"]:
            t, j = r["update_s"][f"compile, {name}"], r["update_s"][f"jax, {name}"]
            ratios = [b / a for a, b in zip(t, j)]
            lines.append(f"| {pair} | {name} | {ms(statistics.median(t) * 1e3)} | {ms(statistics.median(j) * 1e3)} | "
                         f"{statistics.median(ratios):.2f}x | {', '.join(f'{x:.2f}' for x in ratios)} | "
                         f"{said(verdict([1 / x for x in t], [1 / x for x in j]), '--compile', 'JAX')} |")
    lines += ["", "## The split (ms per call, profiled)", "",
              "torch: the script's program (C++ wrapper) and the same graph with Python's wrapper; JAX: the twin's "
              "train_step. The parts add up to the call: matmul + kernels or other thunks + other calls - overlap "
              "+ rest.",
              "", "| pair | update | program | call | matmul | generated kernels / other thunks | other calls | overlap "
              "| rest |", "|---|---|---|---|---|---|---|---|---|"]
    for pair, r in data["pairs"].items():
        for name in r["variants"]:
            for program, s in r["split"][name].items():
                if not isinstance(s, dict):
                    continue
                lines.append(f"| {pair} | {name} | {program} | {ms(s['call'])} | {ms(s['matmul'])} | "
                             f"{ms(s.get('kernels', s.get('other thunks', 0.0)))} | {ms(s.get('other calls', 0.0))} | "
                             f"{ms(s.get('overlap', 0.0))} | {ms(s['rest'])} |")
            if not r["split"][name]["same matmuls in both wrappers"]:
                lines.append(f"| {pair} | {name} | (the two wrappers' programs call other matmuls: per layout below "
                             "is the Python wrapper's only) | | | | | | |")
    lines += ["", "## Matmul time per layout inside each update (ms per call, profiled)", "",
              "| pair | update | program | layout | XLA runs it as | calls | ms | GFLOP/s |",
              "|---|---|---|---|---|---|---|---|"]
    for pair, r in data["pairs"].items():
        for name in r["variants"]:
            for program in ("compile (Python wrapper)", "jax"):
                entries = r["split"][name][program]["matmul per layout"]
                for layout, e in sorted(entries.items(), key=lambda kv: -kv[1]["ms"]):
                    rate = e["flops"] * e["calls"] / (e["ms"] / 1e3) / 1e9 if e["ms"] else 0.0
                    lines.append(f"| {pair} | {name} | {program} | {layout} | {e.get('runs as', '-')} | "
                                 f"{e['calls']:g} | {ms(e['ms'])} | {rate:.1f} |")
    lines += ["", "## Every layout alone, torch against XLA", "",
              "Calls: in the two updates (with and without the actor step), eager / compiled / JAX twin.", "",
              "| layout | roles in eager | " + " | ".join(f"{p} calls" for p in data["pairs"]) +
              " | XLA runs it as | torch GFLOP/s | XLA GFLOP/s | torch/XLA | per round | verdict |",
              "|---|---|" + "---|" * len(data["pairs"]) + "---|---|---|---|---|---|"]
    for row in data["layouts"]:
        r = rates(row)
        counts = [row["found"].get(p, {"eager": 0, "compiled": 0, "jax": 0}) for p in data["pairs"]]
        lines.append(f"| {row['name']} | {'; '.join(row['roles']) or '-'} | " +
                     " | ".join(f"{c['eager']}/{c['compiled']}/{c['jax']}" for c in counts) +
                     f" | {row.get('xla runs as', '-')} | {r['torch_gflops']:.1f} | {r['xla_gflops']:.1f} | "
                     f"{r['ratio']:.2f}x | "
                     f"{', '.join(f'{x:.2f}' for x in r['ratios'])} | {said(r['verdict'], 'torch', 'XLA')} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="sac,td3")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds of each Timer measurement")
    parser.add_argument("--profile-calls", type=int, default=20, help="profiled calls per update and framework")
    parser.add_argument("--env-id", default=None, help="default: the speed table's task (benchmarks/limits/limits.py)")
    parser.add_argument("--learning-starts", type=int, default=None, help="default: the speed table's")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the scripts'")
    parser.add_argument("--quick", action="store_true", help="1 round, short timings, 3 profiled calls: a test")
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    if not PROFILER_HAS_SHAPES:
        raise SystemExit(f"limits_matmul: torch {torch.__version__}'s profiler records no shapes of the calls, which the "
                         "compiled update's layouts are read from: run it with torch 2.12 or later")
    if opts.quick:
        opts.rounds, opts.min_run_time, opts.profile_calls = 1, 0.01, 3
    pairs = opts.pairs.split(",")
    if bad := [p for p in pairs if p not in ("sac", "td3")]:
        parser.error(f"unknown pairs {bad}: sac, td3")
    try:
        import jax  # noqa: F401
    except ImportError:
        raise SystemExit("limits_matmul: needs JAX (the twins' side)") from None

    threads = torch.get_num_threads()
    # the settings that decide the thread pools and the code paths, as the command started (before the twins ran)
    env = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS", "XLA_FLAGS")
           if k in os.environ}
    load = {"start": os.getloadavg()}  # a machine shared while it ran shows here (torch's threads suffer most)
    results = {pair: measure_pair(pair, opts, threads) for pair in pairs}
    found = {pair: {source: r[source] for source in ("eager", "compiled", "jax")} for pair, r in results.items()}
    layouts = layout_rows(found)
    say(f"timing {len(layouts)} layouts")
    time_layouts(layouts, opts.rounds, opts.min_run_time, threads)
    load["end"] = os.getloadavg()
    fields = cpu_fields()
    flags = fields.get("flags", "").split()
    data = {"cpu": {"vendor": fields.get("vendor_id", "unknown"), "family": fields.get("cpu family", "?"),
                    "model": fields.get("model", "?"),
                    "vector": next((f for f in ("avx512f", "avx2") if f in flags), "no AVX2")},
            "threads": threads, "cores": os.cpu_count(), "load_average": load,
            "env": env,
            "rounds": opts.rounds, "min_run_time": opts.min_run_time, "profile_calls": opts.profile_calls,
            "pairs": results, "layouts": [row | {"rates": rates(row)} for row in layouts]}
    write_results(opts.out, render(data), data)


if __name__ == "__main__":
    main()
