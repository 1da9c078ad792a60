"""Where to put torch.compile: a measured answer to the scope questions, on the scripts' own networks.

    python -m benchmarks.compile_scope --out results/compile_scope          # every question, every workload
    python -m benchmarks.compile_scope --questions scope --workloads ppo_mlp --rounds 3

Workloads, built from the optimized scripts' classes, with the losses those scripts compute (written
here again: they are closures inside the scripts' main functions):
- sac_critic: SAC's critic update, the twin critics vmapped over stacked weights (HalfCheetah sizes,
  batch 256), targets from the actor's sampled next actions;
- ppo_mlp: continuous PPO's minibatch update (HalfCheetah sizes, minibatch 64 = 2048 / 32);
- ppo_atari: Atari PPO's minibatch update (Nature CNN, channels-last, minibatch 256 = 1024 / 4), the
  reset steps masked out.

Questions, each with its variants side by side:
- scope: nothing compiled; the network modules; the loss; the loss and its backward pass (what the
  scripts do; for SAC also without `trace_autograd_ops` and without `recompute_views`); the whole
  step with zero_grad and optimizer.step; and, on CUDA, the whole step under CUDA graphs (inductor's
  reduce-overhead, tensordict's CudaGraphModule over the compiled loss and backward).
- amp: bf16 autocast inside the compiled function, or the compiled function called under autocast
  (on CUDA also fp16 with a GradScaler).
- device: `.to(device)` before or after `torch.compile` (CUDA only).
- ddp: 2 processes (gloo on the CPU, NCCL on CUDA, loopback): `compile(DDP(m))` with each
  `torch._dynamo.config.optimize_ddp` ("ddp_optimizer", "python_reducer" with compiled autograd,
  False), `DDP(compile(m))`, one flat all-reduce of the gradients outside the compiled step (CleanRL's
  multi-GPU PPO), and no DDP at all.

Each variant runs in a process of its own (a DDP variant: two), so that it compiles, keeps and times
its own graphs (in one process, dynamo could hand one variant the graph compiled for another: see
measure). It first runs one update from the same weights on the same batch as the eager update, and
its loss and gradients must match eager's (stated tolerances) before its time counts; a variant that
computes something else is reported as a finding, and a compiled variant whose first call compiled no
graph fails. Then the variants of a question take turns in rounds, with recompilation an error; per
update: the median time with its 10th-90th percentile spread, the compile time (the first call), and the
graphs and graph breaks dynamo made at the first call (its counters). A question that needs CUDA is
reported "not measured" without it. Writes results.json, results.md and scope.png into --out.
"""

import argparse
import contextlib
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
from tensordict import from_modules

from benchmarks.common import built, device_sync, dynamo_counts, free_port, load_script, NoCompiling, one_line, percentile, provenance, save, \
    shell, time_calls

WORKLOADS = ["sac_critic", "ppo_mlp", "ppo_atari"]
QUESTIONS = ["scope", "amp", "device", "ddp"]
GAMMA, ALPHA, CLIP, ENT_COEF, VF_COEF, MAX_GRAD_NORM = 0.99, 0.2, 0.2, 0.0, 0.5, 0.5
TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "bf16": dict(rtol=3e-2, atol=3e-3), "fp16": dict(rtol=3e-2, atol=3e-3)}


# ---------------------------------------------------------------------------------------------------
# Workloads: an nn.Module whose forward(batch) is the loss, an optimizer factory and a batch maker.
# ---------------------------------------------------------------------------------------------------
class SACCritic(nn.Module):
    """SAC's critic loss (sac_continuous_action_torchcompile.py, critic_loss): stacked twin critics run
    by one vmapped call, targets from the actor's sampled next actions and the target critics."""

    def __init__(self, env, device):
        super().__init__()
        m = load_script("sac_continuous_action_torchcompile")
        self.actor = built(m.Actor, env, device=device).requires_grad_(False)  # the critic step does not train it
        self.qnet_params = from_modules(built(m.SoftQNetwork, env, device=device), built(m.SoftQNetwork, env, device=device),
                                        as_module=True)
        self.qnet_target = self.qnet_params.data.clone()
        self.qnet = shell(m.SoftQNetwork, env)
        self.qnet_params.to_module(self.qnet, preserve_module_state=False)

    def batched_qf(self, params, obs, action):
        with params.to_module(self.qnet, preserve_module_state=False):
            return self.qnet(obs, action)

    def forward(self, obs, actions, next_obs, rewards, dones):
        with torch.no_grad():
            next_actions, next_log_pi, _ = self.actor.get_action(next_obs)
            q_next = torch.vmap(self.batched_qf, (0, None, None))(self.qnet_target, next_obs, next_actions)
            target = rewards + (1 - dones) * GAMMA * (q_next.min(0).values - ALPHA * next_log_pi).view(-1)
        q = torch.vmap(self.batched_qf, (0, None, None))(self.qnet_params, obs, actions).view(2, -1)
        return (q - target).pow(2).mean(1).sum()

    def networks(self):  # what "compile the modules" compiles: (parent, attribute) pairs
        return [(self, "actor"), (self, "qnet")]

    @staticmethod
    def batch(env, n, device, g):
        obs, act = env.observation_space.shape[0], env.action_space.shape[0]
        return (torch.randn(n, obs, device=device, generator=g), torch.rand(n, act, device=device, generator=g) * 2 - 1,
                torch.randn(n, obs, device=device, generator=g), torch.randn(n, device=device, generator=g),
                (torch.rand(n, device=device, generator=g) < 0.01).float())


def ppo_loss(agent, obs, actions, logprobs, advantages, returns, values, valid):
    """The PPO minibatch loss of the optimized scripts: clipped surrogate and value losses, entropy bonus,
    normalized advantages; `valid` masks envpool's reset steps (all ones for continuous PPO)."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, actions)
    ratio = (newlogprob - logprobs).exp()
    n = valid.sum().clamp(min=1.0)
    mean = (advantages * valid).sum() / n
    std = (((advantages - mean) ** 2 * valid).sum() / (n - 1).clamp(min=1.0)).sqrt()
    adv = (advantages - mean) / (std + 1e-8)
    pg_loss = (torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)) * valid).sum() / n
    newvalue = newvalue.view(-1)
    v_clipped = values + torch.clamp(newvalue - values, -CLIP, CLIP)
    v_loss = 0.5 * (torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2) * valid).sum() / n
    return pg_loss - ENT_COEF * (entropy * valid).sum() / n + VF_COEF * v_loss


class PPOUpdate(nn.Module):
    def __init__(self, agent):
        super().__init__()
        self.agent = agent

    def forward(self, *mb):
        return ppo_loss(self.agent, *mb)

    def networks(self):  # the agent's networks (its acting methods call them: it has no forward of its own)
        return [(self.agent, name) for name, _ in self.agent.named_children()]


def build(workload: str, device: torch.device, batch: int | None = None):
    """(loss module, optimizer factory, batch maker) for a workload, with the scripts' sizes."""
    import gymnasium as gym

    if workload == "sac_critic":
        env = gym.make("HalfCheetah-v4")
        module = SACCritic(env, device)
        opt = lambda params: torch.optim.Adam(params, lr=1e-3, fused=True)  # noqa: E731
        n = batch or 256
        return module, opt, lambda g: SACCritic.batch(env, n, device, g)
    if workload == "ppo_mlp":
        m = load_script("ppo_continuous_action_torchcompile")
        envs = m.make_envs(m.Args(env_id="HalfCheetah-v4"), "", num_envs=1)
        module, n = PPOUpdate(built(m.Agent, envs, device=device)), batch or 64
        obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]

        def make(g):
            return (torch.randn(n, obs_dim, device=device, generator=g), torch.randn(n, act_dim, device=device, generator=g),
                    torch.randn(n, device=device, generator=g) - act_dim, torch.randn(n, device=device, generator=g),
                    torch.randn(n, device=device, generator=g), torch.randn(n, device=device, generator=g),
                    torch.ones(n, device=device))
    else:
        m = load_script("ppo_atari_envpool_torchcompile")
        envs = m.make_envs(m.Args(env_id="Breakout-v5"), num_envs=1)
        module, n = PPOUpdate(built(m.Agent, envs, device=device).to(memory_format=torch.channels_last)), batch or 256

        def make(g):
            return (torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, device=device, generator=g),
                    torch.randint(0, 4, (n,), device=device, generator=g), -torch.rand(n, device=device, generator=g) * 1.4,
                    torch.randn(n, device=device, generator=g), torch.randn(n, device=device, generator=g),
                    torch.randn(n, device=device, generator=g), (torch.rand(n, device=device, generator=g) > 0.02).float())
    opt = lambda params: torch.optim.Adam(params, lr=torch.tensor(2.5e-4, device=device), eps=1e-5, fused=True)  # noqa: E731
    return module, opt, make


# ---------------------------------------------------------------------------------------------------
# Variants: each builds its own copy of the weights (the same for all) and returns an update function.
# ---------------------------------------------------------------------------------------------------
@dataclass
class Result:
    question: str
    workload: str
    variant: str
    status: str = "ok"
    detail: str = ""
    matches_eager: str = ""
    compile_s: float = math.nan
    graphs: int = 0
    graph_breaks: int = 0
    p50_ms: float = math.nan
    p10_ms: float = math.nan
    p90_ms: float = math.nan
    calls: int = 0
    vs_first: float = math.nan


BACKEND = "inductor"  # set by --backend: the smoke test uses aot_eager, which compiles in a second


def compile_(fn):
    return torch.compile(fn, backend=BACKEND)


def clip(module):
    if isinstance(module, PPOUpdate):  # the PPO scripts clip the gradient norm after the backward pass
        nn.utils.clip_grad_norm_(module.parameters(), MAX_GRAD_NORM)


def variant(module: nn.Module, make_opt, scope: str, autocast=None, scaler=None):
    """An update function of one batch for a scope: 'eager', 'modules', 'loss', 'loss+backward'
    (the scripts'), 'whole step', with `autocast` ('inside' or 'outside', a context factory) if given."""
    params = [p for p in module.parameters() if p.requires_grad]
    opt = make_opt(params)
    loss_fn = module
    if scope == "modules":  # nn.Module.compile() on each network: its __call__ compiled in place
        for parent, name in module.networks():
            getattr(parent, name).compile(backend=BACKEND)
    if scope == "modules, torch.compile(module)":  # each network replaced by torch.compile(network)
        for parent, name in module.networks():
            setattr(parent, name, compile_(getattr(parent, name)))
    amp_inside = autocast is not None and autocast[0] == "inside"
    amp_ctx = autocast[1] if autocast is not None else contextlib.nullcontext

    def forward(*b):
        if amp_inside:
            with amp_ctx():
                return loss_fn(*b)
        return loss_fn(*b)

    if scope == "loss":
        forward = compile_(forward)

    def loss_backward(*b):
        loss = forward(*b)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler is None:
            clip(module)
        return loss.detach()

    if scope == "loss+backward":
        loss_backward = compile_(loss_backward)

    def update(*b):
        opt.zero_grad()
        loss = loss_backward(*b)
        if scaler is not None:
            scaler.unscale_(opt)
            clip(module)
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        return loss

    if scope == "whole step":
        update = compile_(update)
    if autocast is not None and not amp_inside:
        inner = update

        def update(*b):
            with amp_ctx():
                return inner(*b)
    return update, params


def fresh(workload, device, seed=0, batch=None):
    torch.manual_seed(seed)
    return build(workload, device, batch)


def check(update, params, batch, reference, dtype) -> tuple[str, float, int, int]:
    """Run the first update (it compiles), compare its loss and gradients with eager's; the graphs and
    graph breaks are those this first call made."""
    graphs0, breaks0 = dynamo_counts()
    torch.manual_seed(1)  # the same random draws as the reference (SAC samples next actions)
    start = time.perf_counter()
    loss = update(*batch)
    compile_s = time.perf_counter() - start
    graphs, breaks = dynamo_counts()
    graphs, breaks = graphs - graphs0, breaks - breaks0
    ref_loss, ref_grads = reference
    tol = TOLERANCE[dtype]
    mismatch = []
    if not torch.allclose(loss.float(), ref_loss.float(), **tol):
        mismatch.append(f"loss {loss.item():.6g} vs {ref_loss.item():.6g}")
    for i, (p, g) in enumerate(zip(params, ref_grads)):
        if p.grad is None or not torch.allclose(p.grad.float(), g.float(), **tol):
            err = "none" if p.grad is None else f"{(p.grad - g).abs().max().item():.3g}"
            mismatch.append(f"gradient {i}: max difference {err}")
            break
    return ("yes" if not mismatch else "no: " + "; ".join(mismatch)), compile_s, graphs, breaks


def reference_step(workload, device, batch, autocast=None, scaler=None):
    module, make_opt, make_batch = fresh(workload, device)
    update, params = variant(module, make_opt, "eager", autocast, scaler)
    torch.manual_seed(1)
    loss = update(*batch)
    return loss.detach(), [p.grad.detach().clone() for p in params]


def measure(question, workload, variants: dict, device, opts, dtype="float32", reference_kwargs=None,
            compiled=()) -> list[Result]:
    """Check every variant against eager, then time the ones that ran, taking turns.

    Each variant runs in a process of its own, forked from this one (which computes nothing itself): dynamo
    keeps its compiled graphs per code object, and its guards do not tell apart two variants built from the
    same functions and module classes (the settings a variant patches are no guards either), so in one
    process a variant could run another's graph without compiling its own. The processes start one after
    another (a variant's first call, its compilation, has the machine to itself), then take turns, each
    timing its update in rounds. A variant named in `compiled` whose first call made no graph fails; one
    that compiles anything while it is timed stops the benchmark."""
    results, workers = [], {}
    for name, factory in variants.items():
        r = Result(question, workload, name)
        results.append(r)
        if isinstance(factory, str):  # a reason why the variant is not run here
            r.status, r.detail = "not measured", factory
            continue

        def run(conn, factory=factory, must_compile=name in compiled):
            _, _, make_batch = fresh(workload, device, batch=opts.batch)
            batch = make_batch(torch.Generator(device=device).manual_seed(7))
            reference = reference_step(workload, device, batch, **(reference_kwargs or {}))
            update, params = factory()
            checked = check(update, params, batch, reference, dtype)
            if must_compile and checked[2] == 0:
                raise RuntimeError("its first call compiled no graph of its own")
            for _ in range(2):
                update(*batch)
            serve(conn, checked, lambda: update(*batch), device_sync(device))

        workers[name] = (r, start_worker(run, opts))
        if not ready(r, *workers[name][1], opts):
            print(f"  {workload} {name}: failed: {r.detail}", file=sys.stderr)
            del workers[name]
    take_turns({name: [worker] for name, (_, worker) in workers.items()}, {name: r for name, (r, _) in workers.items()},
               opts)
    first = next((r for r in results if r.status == "ok"), None)
    for r in results:
        if r.status == "ok" and first is not None:
            r.vs_first = r.p50_ms / first.p50_ms
    return results


# The protocol between measure() (or question_ddp()) and a variant's process: the process sends its check,
# then answers "calibrate" (time one call, keep a number of calls per round), "round" (time that many
# calls, send their times) and "stop". A variant of the DDP question has a process per rank.
def serve(conn, checked, call, sync, before_round=lambda: None) -> None:
    """A variant's process, after its check: time `call` when asked, with recompilation an error
    (`before_round`: the DDP ranks meet before each round, so that they start it together)."""
    conn.send(("ok", *checked))
    per_round = 1
    with NoCompiling() as no_compiling:
        while (message := conn.recv())[0] != "stop":
            before_round()
            if message[0] == "calibrate":
                _, round_time, min_calls, max_calls = message
                t = time_calls(call, 1, sync)[0]
                per_round = max(min_calls, min(max_calls, int(round_time / max(t, 1e-7))))
                conn.send(per_round)
            else:
                times = time_calls(call, per_round, sync)
                no_compiling.check()
                conn.send(times)


def start_worker(run, opts):
    """Fork a process that runs `run(conn)`; an exception there is sent back as a failure."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()

    def target():
        try:
            run(there)
        except Exception as err:
            there.send(("failed", one_line(err)))

    proc = ctx.Process(target=target, daemon=True)
    proc.start()
    return here, proc


def receive(conn, proc, timeout: float):
    if not conn.poll(timeout):
        proc.kill()
        raise SystemExit(f"compile_scope: a variant's process did not answer within {timeout:.0f} s")
    return conn.recv()


def ready(r: Result, conn, proc, opts) -> bool:
    """Wait for a variant's check; fill in its row. False if it failed (its process is then gone)."""
    status, *rest = receive(conn, proc, opts.variant_timeout)
    if status != "ok":
        r.status, r.detail = status, rest[0]
        proc.join()
        return False
    r.matches_eager, r.compile_s, r.graphs, r.graph_breaks = rest
    return True


def take_turns(workers: dict[str, list], rows: dict[str, Result], opts) -> None:
    """Time every variant's update, the variants taking turns in rounds so that the drift of a shared machine
    falls on all of them; the times are those of each variant's first process (rank 0 under DDP)."""
    times = {name: [] for name in workers}
    ask = lambda name, message: [conn.send(message) for conn, _ in workers[name]]  # noqa: E731
    answers = lambda name: [receive(conn, proc, opts.variant_timeout) for conn, proc in workers[name]]  # noqa: E731
    for name in workers:
        ask(name, ("calibrate", opts.round_time, max(1, opts.min_calls // opts.rounds), 10_000))
        calls = answers(name)
        if len(set(calls)) > 1:  # the ranks of a DDP variant must make the same calls: the smallest for all
            ask(name, ("calibrate", 0.0, min(calls), min(calls)))
            answers(name)
    for _ in range(opts.rounds):
        for name in workers:
            ask(name, ("round",))
            reply = answers(name)
            if any(isinstance(x, tuple) and x[0] == "failed" for x in reply):
                raise SystemExit(f"compile_scope: {name}: {next(x for x in reply if isinstance(x, tuple))[1]}")
            times[name] += reply[0]
    for name, procs in workers.items():
        ask(name, ("stop",))
        for _, proc in procs:
            proc.join(timeout=60)
        r = rows[name]
        r.calls, r.p50_ms, r.p10_ms, r.p90_ms = len(times[name]), *(percentile(times[name], q) * 1e3 for q in (50, 10, 90))


# ---------------------------------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------------------------------
def question_scope(workload, device, opts):
    def v(scope, **settings):
        def factory():
            module, make_opt, _ = fresh(workload, device, batch=opts.batch)
            update, params = variant(module, make_opt, scope)
            if not settings:
                return update, params
            def patched(*b):  # compiles (first call) under the changed settings, and runs under them
                with torch._dynamo.config.patch(**{k: v for k, v in settings.items() if k == "trace_autograd_ops"}), \
                        torch._functorch.config.patch(**{k: v for k, v in settings.items() if k == "recompute_views"}):
                    return update(*b)
            return patched, params
        return factory

    variants = {"eager (nothing compiled)": v("eager"), "the networks: Module.compile()": v("modules"),
                "the networks: torch.compile(module)": v("modules, torch.compile(module)"), "the loss": v("loss"),
                "loss + backward (the scripts)": v("loss+backward")}
    if workload == "sac_critic":
        variants["  same, without trace_autograd_ops"] = v("loss+backward", trace_autograd_ops=False)
        variants["  same, without recompute_views"] = v("loss+backward", recompute_views=False)
    variants["whole step (zero_grad, loss, backward, optimizer step)"] = v("whole step")
    compiled = [name for name in variants if name.startswith(("the loss", "loss + backward", "  same", "whole step"))]
    if device.type == "cuda":
        def reduce_overhead():
            module, make_opt, _ = fresh(workload, device, batch=opts.batch)
            update, params = variant(module, make_opt, "eager")
            compiled = torch.compile(update, mode="reduce-overhead")

            def call(*b):
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(*b)
            return call, params

        def cudagraphmodule():
            from tensordict.nn import CudaGraphModule

            module, make_opt, _ = fresh(workload, device, batch=opts.batch)
            update, params = variant(module, make_opt, "loss+backward")
            return CudaGraphModule(update, warmup=4), params
        variants["whole step, reduce-overhead (CUDA graphs)"] = reduce_overhead
        variants["loss + backward compiled, CudaGraphModule over the update"] = cudagraphmodule
    else:
        variants["whole step, reduce-overhead (CUDA graphs)"] = "needs CUDA"
        variants["loss + backward compiled, CudaGraphModule over the update"] = "needs CUDA"
    return measure("scope", workload, variants, device, opts, compiled=compiled)


def question_amp(workload, device, opts):
    dtypes = [("bf16", torch.bfloat16)] + ([("fp16", torch.float16)] if device.type == "cuda" else [])
    results = []
    for name, dtype in dtypes:
        ctx = lambda dtype=dtype: torch.autocast(device.type, dtype=dtype)  # noqa: E731
        scaler_for = (lambda: torch.amp.GradScaler("cuda")) if name == "fp16" else (lambda: None)

        def v(where):
            def factory():
                module, make_opt, _ = fresh(workload, device, batch=opts.batch)
                return variant(module, make_opt, "loss+backward", autocast=(where, ctx), scaler=scaler_for())
            return factory

        variants = {f"{name}: autocast inside the compiled function": v("inside"),
                    f"{name}: compiled function called under autocast": v("outside")}
        results += measure("amp", workload, variants, device, opts, dtype=name,
                           reference_kwargs=dict(autocast=("inside", ctx), scaler=scaler_for()), compiled=list(variants))
    return results


def question_device(workload, device, opts):
    if device.type != "cuda":
        return measure("device", workload, {".to(device) before torch.compile": "needs CUDA",
                                            ".to(device) after torch.compile": "needs CUDA"}, device, opts)

    def v(order):
        def factory():
            module, make_opt, _ = fresh(workload, torch.device("cpu"), batch=opts.batch)
            if order == "before":
                module.to(device)
            compiled_forward = torch.compile(module)
            if order == "after":
                module.to(device)
            params = [p for p in module.parameters() if p.requires_grad]
            opt = make_opt(params) if workload == "sac_critic" else torch.optim.Adam(params, lr=2.5e-4, eps=1e-5, fused=True)
            return stepping(opt, compiled_forward, module), params
        return factory

    variants = {".to(device) before torch.compile": v("before"), ".to(device) after torch.compile": v("after")}
    return measure("device", workload, variants, device, opts, compiled=list(variants))


def stepping(opt, forward, module):
    """An update of `module`: zeroed gradients, `forward` (eager, compiled or wrapped: it returns the loss), its
    backward, the gradient clipping and the optimizer's step; the loss, detached."""
    def update(*b):
        opt.zero_grad()
        loss = forward(*b)
        loss.backward()
        clip(module)
        opt.step()
        return loss.detach()
    return update


# DDP: 2 processes on loopback, each with its own batch; the reference is eager DDP (the mean gradient).
DDP_VARIANTS = ["no DDP (each process alone)", "eager DDP (the reference)", "compile(DDP(m)), optimize_ddp=ddp_optimizer",
                "compile(DDP(m)), optimize_ddp=python_reducer (compiled autograd)", "compile(DDP(m)), optimize_ddp=False",
                "DDP(compile(m))", "flat all-reduce outside the compiled step (CleanRL's multi-GPU PPO)"]


def ddp_rank(conn, rank, world, port, workload, device_type, opts, name):
    """One rank of one DDP variant, in a process of its own: its batch, eager DDP's averaged gradients for the
    check, then the variant, checked and timed when asked (see serve)."""
    import datetime

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=opts.variant_timeout))
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if device_type == "cuda" else "cpu")
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    _, _, make_batch = fresh(workload, device, batch=opts.batch)
    batch = make_batch(torch.Generator(device=device).manual_seed(100 + rank))  # each rank its own data

    def factory(name):
        module, make_opt, _ = fresh(workload, device, batch=opts.batch)
        params = [p for p in module.parameters() if p.requires_grad]
        opt = make_opt(params)
        if name.startswith("no DDP") or name.startswith("flat"):
            step = compile_(lambda *b: loss_and_backward(module, *b)) if name.startswith("flat") else \
                (lambda *b: loss_and_backward(module, *b))

            def update(*b):
                opt.zero_grad()
                loss = step(*b)
                if name.startswith("flat"):  # one all-reduce of all gradients, flattened
                    flat = torch.cat([p.grad.reshape(-1) for p in params])  # channels-last grads: a copy
                    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
                    flat /= world
                    offset = 0
                    for p in params:
                        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                        offset += p.numel()
                clip(module)
                opt.step()
                return loss
            return update, params
        if name.startswith("DDP(compile"):
            wrapped = DDP(compile_(module))
        else:
            wrapped = DDP(module)
        if name.startswith("compile(DDP"):
            forward = compile_(wrapped)
        else:
            forward = wrapped
        return stepping(opt, forward, module), params

    setting = name.split("optimize_ddp=")[1].split(" ")[0] if "optimize_ddp=" in name else "ddp_optimizer"
    settings = dict(optimize_ddp=False if setting == "False" else setting, compiled_autograd=setting == "python_reducer")
    update, params = factory("eager DDP (the reference)")
    torch.manual_seed(1)
    loss = update(*batch)
    reference = (loss.detach(), [p.grad.detach().clone() for p in params])
    with torch._dynamo.config.patch(**settings):  # the settings it compiles and runs under
        update, params = factory(name)
        if name.startswith("no DDP"):
            torch.manual_seed(1)
            start = time.perf_counter()
            update(*batch)
            checked = ("not compared (no gradient averaging)", time.perf_counter() - start, *dynamo_counts())
        else:
            checked = check(update, params, batch, reference, "float32")
        if name.startswith(("compile(", "DDP(compile", "flat")) and checked[2] == 0:
            raise RuntimeError("its first call compiled no graph of its own")
        for _ in range(2):
            update(*batch)
        serve(conn, checked, lambda: update(*batch), device_sync(device), before_round=dist.barrier)
    dist.destroy_process_group()


def loss_and_backward(module, *b):
    loss = module(*b)
    loss.backward()
    return loss.detach()


def question_ddp(workload, device, opts):
    """Each variant: 2 processes (ranks) of its own on loopback, started variant after variant, then the
    variants take turns (see measure). A row holds rank 0's check and times."""
    results, workers = [], {}
    for name in DDP_VARIANTS:
        rows = [Result("ddp", workload, name) for _ in (0, 1)]
        results.append(rows[0])
        port = free_port()
        ranks = [start_worker(lambda conn, rank=rank: ddp_rank(conn, rank, 2, port, workload, device.type, opts, name),
                              opts) for rank in (0, 1)]
        if all([ready(row, *worker, opts) for row, worker in zip(rows, ranks)]):
            workers[name] = ranks
            continue
        for _, proc in ranks:  # the other rank waits in a collective: stop it
            proc.kill()
        failed = next(row for row in rows if row.status != "ok")
        rows[0].status, rows[0].detail = failed.status, failed.detail
        print(f"  {workload} {name}: failed: {failed.detail}", file=sys.stderr)
    take_turns(workers, {r.variant: r for r in results}, opts)
    baseline = next((r for r in results if r.status == "ok"), None)
    for r in results:
        if r.status == "ok" and baseline is not None:
            r.vs_first = r.p50_ms / baseline.p50_ms
    return results


# ---------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------
def markdown(rows: list[Result], machine: dict, command: str) -> str:
    lines = ["# Where to put torch.compile: measurements", "",
             "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), "", f"Command: `{command}`", "",
             "Per variant: the median time of an update, with its 10th-90th percentile spread; the ratio to the first "
             "variant of the table; the first call's time (compilation); the graphs and graph breaks dynamo counted; "
             "and whether one update's loss and gradients equal eager's (float32: 1e-4 relative; bf16, fp16: 3e-2).", ""]
    for q in QUESTIONS:
        for w in WORKLOADS:
            sub = [r for r in rows if r.question == q and r.workload == w]
            if not sub:
                continue
            lines += [f"## {q}: {w}", "", "| variant | update (ms, p50) | p10-p90 | vs first | first call (s) | graphs | "
                      "graph breaks | loss and gradients = eager |", "|---|---|---|---|---|---|---|---|"]
            for r in sub:
                if r.status != "ok":
                    lines.append(f"| {r.variant} | {r.status} | | | | | | {r.detail} |")
                else:
                    lines.append(f"| {r.variant} | {r.p50_ms:.3f} | {r.p10_ms:.3f}-{r.p90_ms:.3f} | {r.vs_first:.2f}x | "
                                 f"{r.compile_s:.1f} | {r.graphs} | {r.graph_breaks} | {r.matches_eager} |")
            lines.append("")
    return "\n".join(lines)


def plot(rows: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [w for w in WORKLOADS if any(r.question == "scope" and r.workload == w and r.status == "ok" for r in rows)]
    if not workloads:
        return
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.8), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        sub = [r for r in rows if r.question == "scope" and r.workload == w and r.status == "ok"]
        ax.barh(range(len(sub)), [r.p50_ms for r in sub],
                xerr=[[r.p50_ms - r.p10_ms for r in sub], [r.p90_ms - r.p50_ms for r in sub]], capsize=2,
                color=["tab:gray" if r.matches_eager.startswith("yes") else "tab:red" for r in sub])
        ax.set_yticks(range(len(sub)), [r.variant.strip()[:38] for r in sub], fontsize=6)
        ax.invert_yaxis()
        ax.set_title(w, fontsize=9)
        ax.set_xlabel("ms per update (p50, p10-p90)", fontsize=7)
    fig.suptitle("Update time per compile scope (red: differs from eager)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", default=",".join(QUESTIONS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--batch", type=int, default=None, help="batch size of every workload (default: the scripts')")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-time", type=float, default=0.5)
    parser.add_argument("--min-calls", type=int, default=20, help="updates per variant at least, over all rounds")
    parser.add_argument("--variant-timeout", type=float, default=1800,
                        help="seconds a variant's process may take to answer (its compilation, a round)")
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend (the smoke test: aot_eager)")
    parser.add_argument("--out", type=Path, default=Path("results/compile_scope"))
    opts = parser.parse_args()
    global BACKEND
    BACKEND = opts.backend
    questions = [q for q in opts.questions.split(",") if q]
    workloads = [w for w in opts.workloads.split(",") if w]
    if bad := [q for q in questions if q not in QUESTIONS] + [w for w in workloads if w not in WORKLOADS]:
        parser.error(f"unknown question or workload: {bad}; questions: {QUESTIONS}; workloads: {WORKLOADS}")
    if opts.rounds < 1 or opts.min_calls < 1 or (opts.batch is not None and opts.batch < 2):
        parser.error("--rounds and --min-calls must be at least 1, --batch at least 2")
    device = torch.device(opts.device)
    if device.type == "cpu":
        torch._inductor.config.fallback_random = True  # as the scripts: compiled code draws eager's numbers
    torch._dynamo.config.trace_autograd_ops = True  # as the scripts (the scope question also times it off)
    torch._functorch.config.recompute_views = True
    torch._inductor.config.fx_graph_cache = False  # every variant compiles from scratch: a first run's compile time
    torch._functorch.config.enable_autograd_cache = False
    rows = []
    for q in questions:
        for w in workloads:
            print(f"{q}: {w}", file=sys.stderr)
            rows += globals()[f"question_{q}"](w, device, opts)
    machine, command = provenance()
    save(opts.out, markdown(rows, machine, command),
         {"machine": machine, "command": command, "rows": [asdict(r) for r in rows]})
    plot(rows, opts.out / "scope.png")
    print(opts.out / "results.md")


if __name__ == "__main__":
    main()
