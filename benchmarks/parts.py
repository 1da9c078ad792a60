"""Time the pieces that the optimized scripts' comments and the README quote, in one process.

Each piece comes in the variants compared (eager against compiled, with a setting and
without it, one layout against another); the variants of a piece take turns for
`--rounds` rounds of `--calls` calls each, so that the drift of a shared machine falls
on all of them, and the table gives the median time per call with its min-max:

    python benchmarks/parts.py --rounds 15

Pieces, with the scripts' networks (imported from leanrl/) at the default sizes:
- SAC critic update on HalfCheetah shapes (batch 256): the eager script's (two critics,
  Adam), the optimized script's vmapped critics uncompiled, compiled with the optimizer
  step inside, compiled as forward and backward only (what the script does), and that
  last one without `recompute_views` or without `trace_autograd_ops`;
- the acting step at batch 1 (SAC's and TD3's), eager and compiled;
- writing a `bool` mask of a vmapped critic layer (2 x 256 x 256), eager and compiled;
- one 256 x 256 x 256 matmul with 1 and 2 torch threads;
- the Atari Nature CNN's forward and backward on 256 frames, channels-last or not.
Each compiled variant runs its own copy of the code (see `own_code`), compiled under its
own settings on its first call; a recompile while timing is an error.
"""

import argparse
import copy
import statistics
import sys
import time
import types
from pathlib import Path

import gymnasium as gym
import torch
from tensordict import from_modules

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import load_script as load  # noqa: E402


SAC = load("sac_continuous_action")
SAC_FAST = load("sac_continuous_action_torchcompile")
TD3_FAST = load("td3_continuous_action_torchcompile")
ATARI_FAST = load("ppo_atari_envpool_torchcompile")
GAMMA, ALPHA, BATCH = 0.99, 0.2, 256
# what the optimized SAC and TD3 scripts set under --compile
SCRIPT_SETTINGS = dict(trace_autograd_ops=True, recompute_views=True)


def batch(env, n: int = BATCH) -> dict:
    obs, act = env.observation_space.shape[0], env.action_space.shape[0]
    return dict(observations=torch.randn(n, obs), actions=torch.rand(n, act) * 2 - 1,
                next_observations=torch.randn(n, obs), rewards=torch.randn(n), dones=(torch.rand(n) < 0.01).float())


def eager_critic_update(env):
    """The eager script's critic update: two networks, two forward passes, Adam."""
    actor, qf1, qf2 = SAC.Actor(env), SAC.SoftQNetwork(env), SAC.SoftQNetwork(env)
    qf1_target, qf2_target = copy.deepcopy(qf1), copy.deepcopy(qf2)
    optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=1e-3)

    def update(d):
        with torch.no_grad():
            next_actions, next_log_pi, _ = actor.get_action(d["next_observations"])
            min_next = torch.min(qf1_target(d["next_observations"], next_actions),
                                 qf2_target(d["next_observations"], next_actions)) - ALPHA * next_log_pi
            target = d["rewards"] + (1 - d["dones"]) * GAMMA * min_next.view(-1)
        loss = (torch.nn.functional.mse_loss(qf1(d["observations"], d["actions"]).view(-1), target)
                + torch.nn.functional.mse_loss(qf2(d["observations"], d["actions"]).view(-1), target))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return update


def own_code(fn, tag: str):
    """`fn` with a copy of its code object. torch.compile keeps compiled graphs per code object and
    does not tell apart closures over other networks, so without a copy every variant would run the
    graph compiled for the first one, under the first one's settings."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{tag}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def fast_critic_update(env, compile_mode: str | None, **config):
    """The optimized script's critic update (vmapped critics, fused Adam). compile_mode: None (eager),
    "whole" (zero_grad, loss, backward and step in one compiled function) or "loss" (only the loss
    and its backward compiled, as the script does). `config` overrides the script's compile settings."""
    actor = SAC_FAST.Actor(env)
    params = from_modules(SAC_FAST.SoftQNetwork(env), SAC_FAST.SoftQNetwork(env), as_module=True)
    target_params = params.data.clone()
    qnet = SAC_FAST.SoftQNetwork(env, device="meta")
    params.to_module(qnet, preserve_module_state=False)
    optimizer = torch.optim.Adam(params.values(True, True), lr=1e-3, fused=True)

    def batched_qf(p, obs, action):
        with p.to_module(qnet, preserve_module_state=False):
            return qnet(obs, action)

    def loss_and_backward(d):
        with torch.no_grad():
            next_actions, next_log_pi, _ = actor.get_action(d["next_observations"])
            q_next = torch.vmap(batched_qf, (0, None, None))(target_params, d["next_observations"], next_actions)
            target = d["rewards"] + (1 - d["dones"]) * GAMMA * (q_next.min(0).values - ALPHA * next_log_pi).view(-1)
        q = torch.vmap(batched_qf, (0, None, None))(params, d["observations"], d["actions"]).view(2, -1)
        losses = (q - target).pow(2).mean(1)
        losses.sum().backward()
        return q.detach().mean(1), losses.detach()  # what the script logs

    def update(d):
        optimizer.zero_grad()
        loss_and_backward(d)
        optimizer.step()

    if compile_mode is None:
        return update
    tag = "_".join([compile_mode, *sorted(config)])
    if compile_mode == "whole":
        update = torch.compile(own_code(update, tag))
    else:
        loss_and_backward = torch.compile(own_code(loss_and_backward, tag))
    compiled = False

    def call(d):  # the first call compiles, under the script's settings with `config`'s changes
        nonlocal compiled
        if not compiled:
            settings = SCRIPT_SETTINGS | config
            with (torch._dynamo.config.patch(trace_autograd_ops=settings["trace_autograd_ops"]),
                  torch._functorch.config.patch(recompute_views=settings["recompute_views"])):
                update(d)
            compiled = True
        update(d)

    return call


def acting_step(module, env, compiled: bool):
    actor = module.Actor(env)
    policy = actor.get_action if hasattr(actor, "get_action") else actor
    fn = torch.no_grad()(torch.compile(policy) if compiled else policy)
    obs = torch.randn(1, env.observation_space.shape[0])
    return lambda _: fn(obs)


def bool_mask(compiled: bool):
    x = torch.randn(2, BATCH, 256)
    fn = torch.compile(lambda t: t > 0) if compiled else (lambda t: t > 0)
    return lambda _: fn(x)


def matmul(threads: int):
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def call(_):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return a @ b
        finally:
            torch.set_num_threads(before)

    return call


class FakeEnvs:
    """The spaces of envpool's Breakout, for building the Atari agent without envpool."""
    single_observation_space = gym.spaces.Box(0, 255, (4, 84, 84), dtype="uint8")
    single_action_space = gym.spaces.Discrete(4)


def atari_forward_backward(channels_last: bool):
    agent = ATARI_FAST.Agent(FakeEnvs())
    frames = torch.randint(0, 256, (BATCH, 4, 84, 84), dtype=torch.uint8)
    if channels_last:
        agent = agent.to(memory_format=torch.channels_last)
        prepare = ATARI_FAST.Agent.frames
    else:
        def prepare(x):
            return x.float() / 255.0

    def call(_):
        hidden = agent.network(prepare(frames))
        (agent.actor(hidden).sum() + agent.critic(hidden).sum()).backward()

    return call


def pieces(env_sac, env_td3):
    return {
        "SAC critic update (HalfCheetah, batch 256)": {
            "eager script (two critics, Adam)": eager_critic_update(env_sac),
            "optimized, no flag (vmapped critics, fused Adam)": fast_critic_update(env_sac, None),
            "compiled with the optimizer step inside": fast_critic_update(env_sac, "whole"),
            "  same, without recompute_views ": fast_critic_update(env_sac, "whole", recompute_views=False),
            "compiled forward+backward, step eager (the script)": fast_critic_update(env_sac, "loss"),
            "  same, without recompute_views": fast_critic_update(env_sac, "loss", recompute_views=False),
            "  same, without trace_autograd_ops": fast_critic_update(env_sac, "loss", trace_autograd_ops=False),
        },
        "SAC acting step (batch 1)": {
            "eager": acting_step(SAC_FAST, env_sac, False),
            "compiled": acting_step(SAC_FAST, env_sac, True),
        },
        "TD3 acting step (batch 1)": {
            "eager": acting_step(TD3_FAST, env_td3, False),
            "compiled": acting_step(TD3_FAST, env_td3, True),
        },
        "bool mask of a vmapped critic layer (2 x 256 x 256)": {
            "eager": bool_mask(False),
            "compiled": bool_mask(True),
        },
        "256 x 256 x 256 matmul": {
            f"{torch.get_num_threads()} threads (torch's default)": matmul(torch.get_num_threads()),
            "1 thread": matmul(1),
        },
        "Atari Nature CNN, forward+backward on 256 frames": {
            "contiguous (NCHW)": atari_forward_backward(False),
            "channels-last": atari_forward_backward(True),
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=0, help="calls per round (default: about 0.2 s of calls)")
    parser.add_argument("--only", default="", help="time only the pieces whose title contains this")
    args = parser.parse_args()
    if args.rounds < 1 or args.calls < 0:
        parser.error("--rounds must be at least 1 and --calls at least 0")

    torch.manual_seed(0)
    torch._inductor.config.fallback_random = True  # as in the scripts
    env_sac = gym.make("HalfCheetah-v4")
    todo = {k: v for k, v in pieces(env_sac, env_sac).items() if args.only in k}
    if not todo:
        parser.error(f"no piece's title contains {args.only!r}")
    d = batch(env_sac)
    for title, variants in todo.items():
        calls = {}
        for name, fn in variants.items():  # warm-up: compiles, allocator, oneDNN primitives
            for _ in range(3):
                fn(d)
            start = time.perf_counter()
            fn(d)
            calls[name] = args.calls or max(1, min(2000, int(0.2 / max(time.perf_counter() - start, 1e-6))))
        times = {name: [] for name in variants}
        torch._dynamo.config.error_on_recompile = True  # a recompile inside the timing would be a bug here
        for _ in range(args.rounds):
            for name, fn in variants.items():
                start = time.perf_counter()
                for _ in range(calls[name]):
                    fn(d)
                times[name].append((time.perf_counter() - start) / calls[name])
        torch._dynamo.config.error_on_recompile = False
        first = statistics.median(next(iter(times.values())))
        print(f"\n| {title} | median per call | min-max | vs first |\n|---|---|---|---|")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"| {name} | {fmt(med)} | {fmt(min(ts))}-{fmt(max(ts))} | {med / first:.2f}x |")
        sys.stdout.flush()


def fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


if __name__ == "__main__":
    main()
