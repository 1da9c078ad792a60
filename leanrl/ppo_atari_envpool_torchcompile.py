"""Proximal Policy Optimization (PPO) on Atari through envpool, made fast.

The algorithm, defaults and, on the CPU, random numbers of `ppo_atari_envpool.py`; only the execution changes. Each
optimization is named, the same name in every pair, and each change from the eager script carries its name in its
comment, so that `diff -u ppo_atari_envpool.py ppo_atari_envpool_torchcompile.py` reads as this list (what each
measured: docs/optimizations.md):

- [channels-last] frames and convolution weights in the channels-last layout, which oneDNN's CPU kernels and
  cuDNN's tensor-core kernels work in (other layouts are transposed around them);
- [no-distribution] the categorical policy written out, without a `Distribution` object and its checks;
- [detached-policy] the policy that acts runs the trained weights detached, in a weightless copy;
- [gae-chunks] GAE's reverse scan over fixed-size chunks, its per-step terms for all steps at once: one compiled
  chunk, compiled once whatever the rollout's length;
- [lr-tensor] the learning rate a tensor annealed in place: no recompilation;
- [adam] gradients as values (`torch.autograd.grad`), clipping and Adam written out over tensors: nothing breaks a
  compiled graph, so that the minibatch update, up to the Adam step, can be one program;
- [compile] `--compile`: `torch.compile` of the acting step, of the GAE chunk and of the whole minibatch update;
- [cudagraphs] `--cudagraphs`: the acting step, GAE and the whole minibatch update each replayed as one CUDA graph
  (tensordict's `CudaGraphModule`);
- [no-sync] no `.item()` in the hot loop: statistics stay on the device until logging;
- [fallback-random] `--compile` on the CPU draws eager's random numbers (inductor's `fallback_random`), so that it
  reproduces the run without it; on a GPU inductor's own generator, fused, draws others;
- [async-envs] `--async-envs`: the envs in two halves (an envpool each, seeded as one pool's halves), each stepping
  while the policy acts on the other (`send`/`recv`): the same games and draws. Off by default: it gains only where
  stepping half the envs beats stepping all of them (fewer free cores than envs).

As in the eager script (its docstring says more): envpool's reset step after a done is no transition and is masked
out of the losses; the episode statistics are the real game's.

    python leanrl/ppo_atari_envpool_torchcompile.py --compile --cudagraphs
"""

import os
import random
import time
from dataclasses import asdict, dataclass

import envpool
import numpy as np
import torch
import torch.nn as nn
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy
from tensordict import from_module
from tensordict.nn import CudaGraphModule


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be used when it is available"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "leanrl"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (check out `videos` folder)"""
    save_model: bool = False
    """whether to save the trained model (and evaluate it) in the run's folder"""
    eval_episodes: int = 10
    """episodes played by the saved policy after training (with --save-model) (> 0)"""

    # Algorithm specific arguments
    env_id: str = "Breakout-v5"
    """the id of the environment"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (> 0)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer (> 0)"""
    num_envs: int = 8
    """the number of parallel game environments (> 0)"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout (> 0)"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation (in [0, 1])"""
    num_minibatches: int = 4
    """the number of mini-batches (> 0)"""
    update_epochs: int = 4
    """the K epochs to update the policy (> 0)"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient (>= 0)"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy (>= 0)"""
    vf_coef: float = 0.5
    """coefficient of the value function (>= 0)"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping (> 0)"""
    target_kl: float | None = None
    """the target KL divergence threshold (>= 0)"""
    measure_after: int = 1
    """iterations left out of the fps window (the warm-up: compilation, CUDA-graph capture) (>= 0)"""

    compile: bool = False
    """whether to use torch.compile"""
    cudagraphs: bool = False
    """whether to use CUDA graphs (needs CUDA)"""
    async_envs: bool = False
    """[async-envs] step each half of the envs while the policy acts on the other half (an even --num-envs)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed)"""
    minibatch_size: int = 0
    """the mini-batch size (computed)"""
    num_iterations: int = 0
    """the number of iterations (computed)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists, the minibatches divide the batch, the step budget holds whole batches;
    envpool renders no frames."""
    harness.known_env_id(args.env_id, "envpool")
    harness.check_batches(args, args.num_envs * args.num_steps)
    harness.no_video_with_envpool(args)


def make_envs(args: Args, num_envs: int | None = None, seed: int | None = None):
    """envpool's Atari vector env; a user's bad id stops here."""
    if args.env_id not in envpool.list_all_envs():
        harness.fail(f"--env-id {args.env_id!r}: envpool has no such environment (Atari ids look like Breakout-v5)")
    if type(envpool.make_spec(args.env_id)).__name__ != "AtariEnvSpec":
        harness.fail(f"--env-id {args.env_id!r}: not an Atari game (this script is for envpool's Atari ids, e.g. Breakout-v5)")
    envs = envpool.make(
        args.env_id,
        env_type="gymnasium",
        num_envs=num_envs or args.num_envs,
        episodic_life=True,
        reward_clip=True,
        seed=args.seed if seed is None else seed,
    )
    return envs


class EnvHalves:
    """[async-envs] The run's envs in two halves, each an envpool seeded as the halves of one pool (env i with seed + i:
    the same games), so that one half steps while the policy acts on the other (envpool's send/recv)."""

    def __init__(self, args: Args, seed: int):
        half = args.num_envs // 2
        self.pools = [make_envs(args, num_envs=half, seed=seed + i * half) for i in range(2)]
        self.slices = [slice(0, half), slice(half, args.num_envs)]
        self.stats = [EpisodeStats(half) for _ in self.pools]
        for pool in self.pools:  # their first frames are the run's pool's, which main() resets
            pool.reset()

    def collect(self, policy, rollout, global_step, next_obs, next_done, episodic_return, writer, progress):
        """The rollout of main()'s synchronous loop, the halves overlapped: at step t half A's results of step t - 1
        arrive (B simulated meanwhile), A acts and is sent off, then B the same way: the same transitions, and the
        same draws in the same order (the sampling's noise, drawn half by half)."""
        num_envs, num_steps, device = next_obs.shape[0], rollout["obs"].shape[0], next_obs.device
        next_obs, next_done = next_obs.clone(), next_done.clone()  # written half by half

        def receive(h, step, logged_step):
            nonlocal episodic_return
            obs, reward, terminations, truncations, infos = self.pools[h].recv()
            sl = self.slices[h]
            next_obs[sl] = torch.as_tensor(obs).to(device)
            next_done[sl] = torch.Tensor(np.logical_or(terminations, truncations)).to(device)
            rollout["rewards"][step, sl] = torch.tensor(reward).to(device).view(-1)
            for _, episodic_return, episodic_length in self.stats[h].update(infos, terminations, truncations):
                writer.add_scalar("charts/episodic_return", episodic_return, logged_step)
                writer.add_scalar("charts/episodic_length", episodic_length, logged_step)

        for step in range(num_steps):
            global_step += num_envs
            for h, sl in enumerate(self.slices):
                if step > 0:
                    receive(h, step - 1, global_step - num_envs)
                rollout["obs"][step, sl] = next_obs[sl]
                rollout["dones"][step, sl] = next_done[sl]
                action, logprob, value = policy(next_obs[sl])
                rollout["values"][step, sl] = value
                rollout["actions"][step, sl] = action
                rollout["logprobs"][step, sl] = logprob
                self.pools[h].send(action.cpu().numpy())
            progress.update(num_envs)
        for h in range(2):  # the last step's results: the observation GAE bootstraps from
            receive(h, num_steps - 1, global_step)
        return global_step, next_obs, next_done, episodic_return


class EpisodeStats:
    """Whole-game statistics from envpool's info: the unclipped rewards summed over all lives,
    reported once per game, when its last life is lost or it is truncated."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs)

    def update(self, info: dict, terminated: np.ndarray, truncated: np.ndarray) -> list[tuple[int, float, int]]:
        """Add one step; returns (env index, game return, game length in agent steps) of each finished game."""
        self.returns += info["reward"]  # unclipped (the env's reward is clipped for training)
        game_over = (terminated & (info["lives"] == 0)) | truncated
        finished = [(int(i), float(self.returns[i]), int(info["elapsed_step"][i])) for i in np.flatnonzero(game_over)]
        self.returns[game_over] = 0.0
        return finished


class Adam:
    """[adam] torch.optim.Adam's arithmetic (no weight decay, no amsgrad) written out over lists of tensors.

    torch.optim's step() breaks a compiled graph on purpose (before and after it) and reads its step
    count on the host; written out, torch.compile traces the step into the update's program, where
    inductor fuses its element-wise work into a few loops, and a CUDA graph can replay it: the step
    count, the learning rate and the bias corrections are device tensors."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params)
        self.beta1, self.beta2, self.eps = betas[0], betas[1], eps
        device = self.params[0].device
        self.lr = torch.tensor(lr, device=device)
        self.param_groups = [{"lr": self.lr}]  # where torch.optim keeps it, for the loop to anneal and log
        self.t = torch.zeros((), dtype=torch.float64, device=device)  # steps taken
        # the next step's bias corrections, kept ready: the compiled loops over the weights read two numbers
        self.inv_bias_correction1 = torch.tensor(1 / (1 - betas[0]), device=device)
        self.bias_correction2_sqrt = torch.tensor((1 - betas[1]) ** 0.5, device=device)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, grads) -> None:
        # one foreach call per operation over every tensor: a step is a few calls, not a few per weight
        torch._foreach_lerp_(self.exp_avg, grads, 1 - self.beta1)
        torch._foreach_mul_(self.exp_avg_sq, self.beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, 1 - self.beta2)
        denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(self.exp_avg_sq), self.bias_correction2_sqrt),
                                   self.eps)
        steps = torch._foreach_div(self.exp_avg, denom)
        torch._foreach_mul_(steps, -self.lr * self.inv_bias_correction1)
        torch._foreach_add_(self.params, steps)
        self.t += 1  # the next step's bias corrections, in float64 as torch.optim computes them
        self.inv_bias_correction1.copy_(1 / (1 - self.beta1 ** (self.t + 1)))
        self.bias_correction2_sqrt.copy_((1 - self.beta2 ** (self.t + 1)).sqrt())


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)
        self.to(memory_format=torch.channels_last)  # [channels-last] the convolutions' weights (see frames)

    @staticmethod
    def frames(x):
        # [channels-last] the uint8 frames as floats in [0, 1], in the layout the convolution kernels work in
        return x.contiguous(memory_format=torch.channels_last) / 255.0

    def get_value(self, x):
        return self.critic(self.network(self.frames(x)))

    def get_action_and_value(self, x, action=None):
        hidden = self.network(self.frames(x))
        logits = self.actor(hidden)
        # [no-distribution] torch.distributions.Categorical's formulas written out: no object, no argument checks
        logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        probs = logits.softmax(dim=-1)
        if action is None:
            # torch.multinomial's draw (the argmax of probs / exponential noise), without its checks: the same numbers
            action = (probs / torch.empty_like(probs).exponential_()).argmax(dim=-1)
        log_prob = logits.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(logits.clamp(min=torch.finfo(logits.dtype).min) * probs).sum(-1)
        return action, log_prob, entropy, self.critic(hidden)


def masked_mean(x, mask, count):
    """The mean of x over the entries where mask is 1, `count` of them."""
    return (x * mask).sum() / count


def gae_deltas(rewards, values, dones, next_value, next_done, gamma: float, gae_lambda: float):
    """[gae-chunks] The per-step terms of GAE, all steps at once: A[t] = delta[t] + coef[t] * A[t + 1]."""
    nextnonterminal = 1.0 - torch.cat([dones[1:], next_done[None]])
    nextvalues = torch.cat([values[1:], next_value])
    delta = rewards + gamma * nextvalues * nextnonterminal - values
    return delta, gamma * gae_lambda * nextnonterminal


def gae_chunk(delta, coef, lastgaelam):
    """[gae-chunks] The reverse scan over one chunk of steps; returns the chunk's advantages and the carry."""
    advantages = []
    for t in reversed(range(delta.shape[0])):
        lastgaelam = delta[t] + coef[t] * lastgaelam
        advantages.append(lastgaelam)
    return torch.stack(advantages[::-1]), lastgaelam


def chunk_size(num_steps: int, most: int = 64) -> int:
    """[gae-chunks] The largest divisor of num_steps up to `most`: every chunk has the same shape (one compilation)."""
    return max(c for c in range(1, min(most, num_steps) + 1) if num_steps % c == 0)


def main(args: Args) -> None:
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = harness.pick_device(args)  # CUDA if asked for and usable, else the CPU (saying why); CPU threads

    # env setup
    envs = make_envs(args, seed=harness.env_seed(args))  # --resume: new games (envpool cannot save its own)
    halves = EnvHalves(args, harness.env_seed(args)) if args.async_envs else None  # [async-envs] the same envs, halved

    # built on the CPU and moved: the initial weights come from the CPU generator, the same on any device
    agent = Agent(envs).to(device)
    # [detached-policy] the policy that acts reads the same weights detached: no autograd bookkeeping
    with torch.device("meta"):  # a shell without weights of its own: it runs the weights put into it
        agent_inference = Agent(envs)
    from_module(agent).data.to_module(agent_inference, preserve_module_state=False)

    def policy(obs):  # [detached-policy] the acting step, on the detached weights
        action, logprob, _, value = agent_inference.get_action_and_value(obs)
        return action, logprob, value.flatten()

    optimizer = Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)  # [adam] written out (above)
    episode_stats = EpisodeStats(args.num_envs)

    # ALGO Logic: Storage setup: the rollout's fields, by name (flattened into the batch, cut into minibatches)
    shape = (args.num_steps, args.num_envs)
    rollout = {key: torch.zeros(shape).to(device) for key in ("logprobs", "rewards", "dones", "values")}
    rollout["obs"] = torch.zeros(shape + envs.single_observation_space.shape, dtype=torch.uint8).to(device)
    rollout["actions"] = torch.zeros(shape, dtype=torch.long).to(device)  # integers, as sampled

    def gae(rewards, values, dones, next_obs, next_done):
        """[gae-chunks] GAE by chunks, bootstrapped from the value of the observation after the rollout's last step: the
        per-step terms for all steps at once, then the reverse scan chunk by chunk, from the last chunk back;
        returns the advantages and the returns. One function, for --cudagraphs to replay whole."""
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            delta, coef = gae_deltas(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)
            advantages, lastgaelam = torch.empty_like(delta), torch.zeros_like(delta[0])
            chunk = chunk_size(args.num_steps)
            for end in range(args.num_steps, 0, -chunk):
                advantages[end - chunk:end], lastgaelam = gae_chunk_fn(delta[end - chunk:end], coef[end - chunk:end],
                                                                       lastgaelam)
        return advantages, advantages + values

    def update(mb):
        """One minibatch update (`mb`: the batch's fields at the minibatch's indices); returns its logged losses."""
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], mb["actions"])
        logratio = newlogprob - mb["logprobs"]
        ratio = logratio.exp()
        # envpool resets an env on the step after it was done (dones[t]): that step ignored the
        # action and is no transition, so it is left out of the losses
        mb_valid = 1.0 - mb["dones"]
        n_valid = mb_valid.sum().clamp(min=1.0)

        with torch.no_grad():
            # calculate approx_kl http://joschu.net/blog/kl-approx.html
            old_approx_kl = masked_mean(-logratio, mb_valid, n_valid)
            approx_kl = masked_mean((ratio - 1) - logratio, mb_valid, n_valid)
            clipfrac = masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), mb_valid, n_valid)

        mb_advantages = mb["advantages"]
        if args.norm_adv:
            mean = masked_mean(mb_advantages, mb_valid, n_valid)
            std = (((mb_advantages - mean) ** 2 * mb_valid).sum() / (n_valid - 1).clamp(min=1.0)).sqrt()
            mb_advantages = (mb_advantages - mean) / (std + 1e-8)

        # Policy loss
        pg_loss1 = -mb_advantages * ratio
        pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mb_valid, n_valid)

        # Value loss
        newvalue = newvalue.view(-1)
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["returns"]) ** 2
            v_clipped = mb["values"] + torch.clamp(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
            v_loss_clipped = (v_clipped - mb["returns"]) ** 2
            v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
            v_loss = 0.5 * masked_mean(v_loss_max, mb_valid, n_valid)
        else:
            v_loss = 0.5 * masked_mean((newvalue - mb["returns"]) ** 2, mb_valid, n_valid)

        entropy_loss = masked_mean(entropy, mb_valid, n_valid)
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

        # [adam] gradients as values (torch.autograd.grad): nothing to zero; clip_grad_norm_'s formulas written out
        grads = torch.autograd.grad(loss, optimizer.params)
        clip_coef = (args.max_grad_norm / (nn.utils.get_total_norm(grads) + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, clip_coef)
        optimizer.step(grads)
        return dict(value_loss=v_loss.detach(), policy_loss=pg_loss.detach(), entropy=entropy_loss.detach(),
                    old_approx_kl=old_approx_kl, approx_kl=approx_kl, clipfrac=clipfrac)

    writer = harness.make_writer(args, run_name)
    # fps is measured from iteration `measure_after` + 1 on: the warm-up before it is logged apart
    progress = harness.Progress(args, writer, total=args.num_iterations * args.batch_size, start_step=0,
                                warmup_steps=args.measure_after * args.batch_size)
    episodic_return = float("nan")

    def collect(global_step, next_obs, next_done, episodic_return):
        """One rollout: `num_steps` steps of every env, written into `rollout`; returns the loop's values after it."""
        if args.async_envs:  # [async-envs] the envs in two halves, each stepping while the policy acts on the other
            return halves.collect(policy, rollout, global_step, next_obs, next_done, episodic_return, writer, progress)
        for step in range(0, args.num_steps):
            global_step += args.num_envs
            rollout["obs"][step] = next_obs
            rollout["dones"][step] = next_done

            # ALGO LOGIC: action logic
            action, logprob, value = policy(next_obs)
            rollout["values"][step] = value
            rollout["actions"][step] = action
            rollout["logprobs"][step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rollout["rewards"][step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.as_tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

            for _, episodic_return, episodic_length in episode_stats.update(infos, terminations, truncations):
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", episodic_length, global_step)
            progress.update(args.num_envs)
        return global_step, next_obs, next_done, episodic_return

    gae_chunk_fn = gae_chunk  # [compile] the GAE chunk, compiled with --compile
    if args.compile:  # [compile]
        if device.type == "cpu":
            # [fallback-random] compiled code draws from torch's generator, as eager code does: the same numbers
            torch._inductor.config.fallback_random = True
            torch._inductor.config.cpp_wrapper = True  # kernels called from C++: a smaller fixed cost per call
        # forward, backward (traced), clipping and the Adam step of a minibatch: one program, no graph break
        torch._dynamo.config.trace_autograd_ops = True
        policy = torch.compile(policy)
        gae_chunk_fn = torch.compile(gae_chunk)
        update = torch.compile(update)

    if args.cudagraphs:
        # [cudagraphs] the acting step, GAE and the minibatch update each one graph replay, captured once the warm-up
        # calls have let compilation finish (without CUDA: called directly, each tensor argument cloned)
        warmup = 4 if args.compile else 2
        policy = CudaGraphModule(policy, warmup=warmup)
        gae = CudaGraphModule(gae, warmup=warmup)
        update = CudaGraphModule(update, warmup=warmup)

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(agent=agent, optimizer=optimizer), envpool=True)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    next_obs, _ = envs.reset()
    next_obs = torch.as_tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)

    # --resume: the run as saved, at the start of an iteration (checkpoints fall there only)
    global_step, first, episodic_return = checkpoint.resume(global_step, 1, episodic_return)
    for iteration in range(first, args.num_iterations + 1):
        checkpoint.tick(global_step, iteration, episodic_return)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)
        global_step, next_obs, next_done, episodic_return = collect(global_step, next_obs, next_done, episodic_return)

        # bootstrap value if not done
        advantages, returns = gae(rollout["rewards"], rollout["values"], rollout["dones"], next_obs, next_done)  # [gae-chunks]

        # flatten the batch: each field, (steps, envs, ...) -> (steps x envs, ...)
        batch = {key: x.flatten(0, 1) for key, x in dict(rollout, advantages=advantages, returns=returns).items()}

        # Annealing the rate if instructed to do so (the update reads it, the rollout does not).
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"].copy_(frac * args.learning_rate)  # [lr-tensor] in place: no recompilation

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            # a torch permutation (CleanRL's is numpy's): on the CPU the eager and optimized scripts draw the same one
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]
                losses = update({key: x[mb_inds] for key, x in batch.items()})
                clipfracs += [losses["clipfrac"]]  # [no-sync] left on the device until logging

            if args.target_kl is not None and losses["approx_kl"] > args.target_kl:
                break

        # over the transitions only, as the losses: envpool's reset steps are left out
        kept = (1.0 - batch["dones"]).cpu().numpy() > 0
        y_pred, y_true = batch["values"].cpu().numpy()[kept], batch["returns"].cpu().numpy()[kept]
        var_y = np.var(y_true) if len(y_true) else 0.0
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes (the last minibatch's losses, the mean clip fraction)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        harness.log_losses(writer, dict(losses, clipfrac=torch.stack(clipfracs).mean(),  # [no-sync] one read, here
                                        explained_variance=explained_var), global_step)
        progress.log(global_step, episodic_return)
    checkpoint.close(global_step, args.num_iterations + 1, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save({"algo": "ppo_atari", "args": asdict(args), "agent": agent.state_dict()}, model_path)
        print(f"model saved to {model_path}")

        def act(obs):  # the policy samples its action, as in training
            return agent.get_action_and_value(torch.as_tensor(obs, device=device))[0].cpu().numpy()
        # whole games (unclipped rewards), on one environment seeded with the run's seed
        for idx, episodic_return in enumerate(evals.play(make_envs(args, num_envs=1), act, args.eval_episodes,
                                                         args.seed, stats=EpisodeStats(1))):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
