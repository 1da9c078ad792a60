"""Proximal Policy Optimization (PPO) for continuous actions, made fast.

The algorithm, defaults and, on the CPU, random numbers of `ppo_continuous_action.py`; only the execution changes.
Each optimization is named, the same name in every pair, and each change from the eager script carries its name in
its comment, so that `diff -u ppo_continuous_action.py ppo_continuous_action_torchcompile.py` reads as this list
(what each measured: docs/optimizations.md):

- [no-distribution] the Gaussian policy written out, without a `Distribution` object and its argument checks;
- [device-rollout] the rollout one TensorDict on the training device, written in place (the acting step writes its
  row at a device counter), its flattened batch made once (views); rewards and done flags staged on the host and
  copied once per iteration; the one copy back to the host in a step is the action the environment needs;
- [detached-policy] the acting step and GAE's bootstrap run the trained weights detached, in a weightless copy;
- [gae-chunks] GAE's reverse scan over fixed-size chunks of steps: one compiled chunk, compiled once;
- [adam] gradients as values (`torch.autograd.grad`), clipping and Adam written out over tensors: the whole update,
  from its indices to the Adam step, can be one compiled program;
- [lr-tensor] the learning rate a tensor annealed in place: no recompilation;
- [compile] `--compile`: `torch.compile` of the acting step (with its rollout writes), of the GAE chunk and of the
  whole minibatch update;
- [cudagraphs] `--cudagraphs`: the acting step, GAE and the whole minibatch update each replayed as one CUDA graph
  (tensordict's `CudaGraphModule`);
- [no-sync] but the action and `--target-kl`'s check, nothing is read back to the host before a logging step;
- [fallback-random] `--compile` on the CPU draws eager's random numbers (inductor's `fallback_random`), so that it
  reproduces the run without it; on a GPU inductor's own generator, fused, draws others.

As the eager script, it asks gymnasium for same-step autoreset: no reset step enters the rollout as a transition.

    python leanrl/ppo_continuous_action_torchcompile.py --compile --cudagraphs
"""

import math
import os
import random
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy
from tensordict import TensorDict, from_module
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
    env_id: str = "HalfCheetah-v4"
    """the id of the environment"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments (> 0)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer (> 0)"""
    num_envs: int = 1
    """the number of parallel game environments (> 0)"""
    num_steps: int = 2048
    """the number of steps to run in each environment per policy rollout (> 0)"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation (in [0, 1])"""
    num_minibatches: int = 32
    """the number of mini-batches (> 0)"""
    update_epochs: int = 10
    """the K epochs to update the policy (> 0)"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient (>= 0)"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
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

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed)"""
    minibatch_size: int = 0
    """the mini-batch size (computed)"""
    num_iterations: int = 0
    """the number of iterations (computed)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists, the minibatches divide the batch, the step budget holds whole batches."""
    harness.known_env_id(args.env_id, "gymnasium")
    harness.check_batches(args, args.num_envs * args.num_steps)


def make_env(env_id, idx, capture_video, run_name, gamma):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        if not isinstance(env.action_space, gym.spaces.Box):
            harness.fail(f"--env-id {env_id!r}: this PPO needs a continuous (Box) action space, "
                         f"got {env.action_space}")
        env = gym.wrappers.FlattenObservation(env)  # deal with dm_control's Dict observation space
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
        return env

    return thunk


def make_envs(args: Args, run_name: str, num_envs: int | None = None) -> gym.vector.SyncVectorEnv:
    """The vector env, with same-step autoreset; a user's bad id or action space stops here."""
    if args.capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering
    try:
        envs = gym.vector.SyncVectorEnv(
            [make_env(args.env_id, i, args.capture_video, run_name, args.gamma) for i in range(num_envs or args.num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
    except gym.error.Error as e:
        harness.fail(f"--env-id {args.env_id!r}: {e}")
    return envs


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
        obs_dim = np.array(envs.single_observation_space.shape).prod()
        act_dim = np.prod(envs.single_action_space.shape)
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, act_dim), std=0.01),
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        # [no-distribution] torch.distributions.Normal's formulas written out: no object, no argument checks
        action_mean = self.actor_mean(x)
        action_logstd = self.actor_logstd.expand_as(action_mean)
        action_std = torch.exp(action_logstd)
        if action is None:
            action = action_mean + action_std * torch.randn_like(action_mean)
        log_std = torch.log(action_std)
        log_prob = -((action - action_mean) ** 2) / (2 * action_std**2) - log_std - math.log(math.sqrt(2 * math.pi))
        entropy = 0.5 + 0.5 * math.log(2 * math.pi) + log_std
        return action, log_prob.sum(1), entropy.sum(1), self.critic(x)


def gae_deltas(rewards, values, dones, next_value, next_done, gamma: float, gae_lambda: float):
    """The per-step terms of GAE, all steps at once: A[t] = delta[t] + coef[t] * A[t + 1]."""
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
    envs = make_envs(args, run_name)

    # the network is built on the CPU and moved: the same initial weights, drawn from the CPU generator, on
    # any device
    agent = Agent(envs).to(device)
    optimizer = Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # ALGO Logic: Storage setup, [device-rollout] one TensorDict on the device, GAE's advantages and returns too
    rollout = TensorDict(
        obs=torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape),
        actions=torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape),
        **{key: torch.zeros((args.num_steps, args.num_envs))
           for key in ("logprobs", "rewards", "dones", "values", "advantages", "returns")},
        batch_size=[args.num_steps, args.num_envs], device=device,
    )
    batch = rollout.view(-1)  # the flattened batch, made once: views of the rollout, written in place
    rewards_host = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)  # staged on the host, with dones
    dones_host = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    step_index = torch.zeros(1, dtype=torch.long, device=device)  # the rollout row the acting step writes

    def update(mb_inds):
        """One minibatch update, from its indices into the flattened rollout (`batch`, by field): the losses,
        their gradients and the Adam step. Returns the losses that are logged."""
        mb = batch[mb_inds]  # [device-rollout] one index of the TensorDict gathers every field
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], mb["actions"])
        logratio = newlogprob - mb["logprobs"]
        ratio = logratio.exp()

        with torch.no_grad():
            # calculate approx_kl http://joschu.net/blog/kl-approx.html
            old_approx_kl = (-logratio).mean()
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()  # [no-sync] no .item(): left on the device

        mb_advantages = mb["advantages"]
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

        # Policy loss
        pg_loss1 = -mb_advantages * ratio
        pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = torch.max(pg_loss1, pg_loss2).mean()

        # Value loss
        newvalue = newvalue.view(-1)
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["returns"]) ** 2
            v_clipped = mb["values"] + torch.clamp(
                newvalue - mb["values"],
                -args.clip_coef,
                args.clip_coef,
            )
            v_loss_clipped = (v_clipped - mb["returns"]) ** 2
            v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
            v_loss = 0.5 * v_loss_max.mean()
        else:
            v_loss = 0.5 * ((newvalue - mb["returns"]) ** 2).mean()

        entropy_loss = entropy.mean()
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

    # [detached-policy] the acting step and GAE's bootstrap read the trained weights detached: no autograd bookkeeping
    with torch.device("meta"):  # a shell without weights of its own: it runs the weights put into it
        agent_inference = Agent(envs)
    from_module(agent).data.to_module(agent_inference, preserve_module_state=False)

    def act(obs):
        """[device-rollout] The acting step: sample an action and write the step's observation, action, logprob and value
        into the rollout, in place, at `step_index` (a device counter): [compile] one program under --compile."""
        action, logprob, _, value = agent_inference.get_action_and_value(obs)
        for key, x in (("obs", obs), ("actions", action), ("logprobs", logprob), ("values", value.flatten())):
            rollout[key].index_copy_(0, step_index, x.unsqueeze(0))
        step_index.add_(1)
        return action

    chunk, gae_chunk_fn = chunk_size(args.num_steps), gae_chunk  # [gae-chunks] compiled with --compile

    # [gae-chunks] GAE by chunks, bootstrapped from the detached weights
    def gae(rewards, values, dones, next_obs, next_done):
        next_value = agent_inference.get_value(next_obs).reshape(1, -1)
        delta, coef = gae_deltas(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)
        advantages, lastgaelam = torch.empty_like(delta), torch.zeros_like(delta[0])
        for end in range(args.num_steps, 0, -chunk):
            advantages[end - chunk:end], lastgaelam = gae_chunk_fn(delta[end - chunk:end], coef[end - chunk:end], lastgaelam)
        return advantages, advantages + values

    if args.compile:  # [compile]
        if device.type == "cpu":
            # [fallback-random] compiled code draws from torch's generator, as eager code does: the same numbers
            torch._inductor.config.fallback_random = True
            torch._inductor.config.cpp_wrapper = True  # kernels called from C++: a smaller fixed cost per call
        # the gather, forward, backward (traced), clipping and Adam step of a minibatch: one program
        torch._dynamo.config.trace_autograd_ops = True
        act = torch.compile(act)
        gae_chunk_fn = torch.compile(gae_chunk)
        update = torch.compile(update)

    if args.cudagraphs:
        # [cudagraphs] the acting step, GAE and the minibatch update each one graph replay, captured once the warm-up
        # calls have let compilation finish (without CUDA: called directly, each tensor argument cloned)
        warmup = 4 if args.compile else 2
        act = CudaGraphModule(act, warmup=warmup)
        gae = CudaGraphModule(gae, warmup=warmup)
        update = CudaGraphModule(update, warmup=warmup)

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(agent=agent, optimizer=optimizer, envs=envs))

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)
    # [device-rollout] observations made on the device in one copy (here and in the loop); done flags stay on the host
    next_obs = torch.as_tensor(next_obs, device=device, dtype=torch.float32)
    next_done = np.zeros(args.num_envs, dtype=np.float32)

    # --resume: the run as saved, at the start of an iteration (checkpoints fall there only)
    global_step, first, next_obs, next_done, episodic_return = checkpoint.resume(
        global_step, 1, next_obs, next_done, episodic_return)
    for iteration in range(first, args.num_iterations + 1):
        checkpoint.tick(global_step, iteration, next_obs, next_done, episodic_return)
        progress.tick(global_step)
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.lr.copy_(lrnow)  # [lr-tensor] in place: no recompilation

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            dones_host[step] = next_done  # [device-rollout] staged on the host

            # ALGO LOGIC: action logic ([device-rollout] the step's writes into the rollout are in `act`)
            action = act(next_obs)

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            # as in CleanRL, a time-limit truncation ends the episode like a termination: GAE does not
            # bootstrap from the last observation (every HalfCheetah episode ends so, after 1000 steps)
            next_done = np.logical_or(terminations, truncations)
            rewards_host[step] = reward  # [device-rollout] staged on the host
            next_obs = torch.as_tensor(next_obs, device=device, dtype=torch.float32)  # [device-rollout] made on the device

            # same-step autoreset: a finished episode's statistics come in final_info, once
            if "final_info" in infos and "episode" in infos["final_info"]:
                stats = infos["final_info"]["episode"]
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    episodic_return = float(stats["r"][i])
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(stats["l"][i]), global_step)
            progress.update(args.num_envs)

        # bootstrap value if not done
        rollout["rewards"].copy_(torch.from_numpy(rewards_host))  # [device-rollout] the staged rows, one copy each
        rollout["dones"].copy_(torch.from_numpy(dones_host))
        next_done_t = torch.as_tensor(next_done, device=device, dtype=torch.float32)
        advantages, returns = gae(rollout["rewards"], rollout["values"], rollout["dones"], next_obs, next_done_t)
        rollout["advantages"].copy_(advantages)  # [device-rollout] in place: the flattened batch's views see them
        rollout["returns"].copy_(returns)
        step_index.zero_()  # [device-rollout] the row `act` writes next: a device counter, not a Python int

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            # a torch permutation (CleanRL shuffles with numpy): on the CPU the eager and optimized scripts draw
            # the same one
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]
                out = update(mb_inds)
                clipfracs.append(out["clipfrac"])

            if args.target_kl is not None and out["approx_kl"] > args.target_kl:  # [no-sync] a host sync, opt-in
                break

        y_pred, y_true = batch["values"].cpu().numpy(), batch["returns"].cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        # [no-sync] read back here, once per iteration: the learning rate, the losses, the mean clip fraction
        writer.add_scalar("charts/learning_rate", optimizer.lr.item(), global_step)
        harness.log_losses(writer, out | dict(clipfrac=torch.stack(clipfracs).mean(), explained_variance=explained_var),
                           global_step)
        progress.log(global_step, episodic_return)
    checkpoint.close(global_step, args.num_iterations + 1, next_obs, next_done, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        # the observation normalizer's statistics belong to the policy: save them beside it
        rms = envs.envs[0].get_wrapper_attr("obs_rms")
        obs_rms = {"mean": torch.as_tensor(rms.mean), "var": torch.as_tensor(rms.var), "count": float(rms.count)}
        torch.save({"algo": "ppo_continuous", "args": asdict(args), "agent": agent.state_dict(), "obs_rms": obs_rms},
                   model_path)
        print(f"model saved to {model_path}")

        # played in one environment (without video) under the training statistics, frozen
        eval_envs = make_envs(Args(env_id=args.env_id, gamma=args.gamma), "", num_envs=1)
        evals.freeze_normalization(eval_envs, obs_rms)

        def act(obs):  # the Gaussian policy's mean action: the trained policy without its exploration noise
            return agent.actor_mean(torch.as_tensor(obs, device=device, dtype=torch.float32)).cpu().numpy()
        for idx, episodic_return in enumerate(evals.play(eval_envs, act, args.eval_episodes, args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
