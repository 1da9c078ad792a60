"""Soft Actor-Critic (SAC) for continuous actions, made fast.

The algorithm, defaults and, on the CPU, random numbers of `sac_continuous_action.py`; only the execution changes.
Each optimization is named, the same name in every pair, and each change from the eager script carries its name in
its comment, so that `diff -u sac_continuous_action.py sac_continuous_action_torchcompile.py` reads as this list
(what each measured: docs/optimizations.md):

- [no-distribution] the Gaussian sample written out, without a `Distribution` object;
- [vmap-q] the twin Q-networks one `torch.vmap`'d ensemble: one batched matmul per layer for both critics, one
  optimizer over their stacked weights;
- [device-buffer] the replay buffer's rows preallocated on the training device (staged on the host and copied over
  together; on the CPU written straight into their row); the update takes a batch's indices and gathers it itself;
- [detached-policy] the policy that acts runs the trained weights detached, in a weightless copy;
- [adam] gradients as values (`torch.autograd.grad`) and Adam written out over tensors, so that the whole update
  (critic, delayed actor and temperature, target networks) can be one compiled program;
- [lerp-target] the target networks move with one fused `lerp_`;
- [compile] `--compile`: `torch.compile` of the whole update, one program per variant that runs (a delayed actor
  step or not, a target step or not), and of the acting step (`COMPILED_ACTING`);
- [cudagraphs] `--cudagraphs`: each variant of the update, and the acting step, replayed as a CUDA graph
  (tensordict's `CudaGraphModule`);
- [no-sync] alpha a device tensor: no `.item()` in an update, values read back at logging steps only;
- [fallback-random] `--compile` on the CPU draws eager's random numbers (inductor's `fallback_random`), so that it
  reproduces the run without it; on a GPU inductor's own generator, fused, draws others.

    python leanrl/sac_continuous_action_torchcompile.py --compile --cudagraphs
"""

import functools
import math
import os
import random
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy
from tensordict import from_module, from_modules
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
    """the environment id of the task"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments (> --learning-starts)"""
    buffer_size: int = int(1e6)
    """the replay memory buffer size (>= --batch-size)"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    tau: float = 0.005
    """target smoothing coefficient (in (0, 1])"""
    batch_size: int = 256
    """the batch size of sample from the replay memory (> 0)"""
    learning_starts: int = 5000
    """timestep to start learning (>= 0)"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer (> 0)"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer (> 0)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed) (> 0)"""
    target_network_frequency: int = 1
    """the frequency of updates for the target networks (> 0)"""
    alpha: float = 0.2
    """entropy regularization coefficient (>= 0)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: compilation, CUDA-graph capture) (>= 0)"""

    compile: bool = False
    """whether to use torch.compile"""
    cudagraphs: bool = False
    """whether to use CUDA graphs (needs CUDA)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists."""
    harness.known_env_id(args.env_id, "gymnasium")


# [compile] the devices where --compile compiles the acting step (the actor and its sample, at batch 1): an acting step
# that samples is compiled everywhere (a GPU's graph needs it; on a CPU the sample fuses into the forward's kernels)
COMPILED_ACTING = ("cuda", "cpu")


def make_env(env_id: str, seed: int, capture_video: bool = False, run_name: str = "") -> gym.Env:
    """One environment with episode statistics; a user's bad id or action space stops here."""
    if capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering
    try:
        env = gym.make(env_id, render_mode="rgb_array" if capture_video else None)
    except gym.error.Error as e:
        harness.fail(f"--env-id {env_id!r}: {e}")
    if not isinstance(env.action_space, gym.spaces.Box):
        harness.fail(f"--env-id {env_id!r}: SAC needs a continuous (Box) action space, got {env.action_space}")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        harness.fail(f"--env-id {env_id!r}: needs a flat Box observation space, got {env.observation_space}")
    if capture_video:
        env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env.action_space.seed(seed)
    return env


# ALGO LOGIC: initialize agent here:
class SoftQNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        obs_dim = np.prod(env.observation_space.shape)
        act_dim = np.prod(env.action_space.shape)
        self.fc1 = nn.Linear(obs_dim + act_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


LOG_STD_MAX = 2
LOG_STD_MIN = -5


class Actor(nn.Module):
    def __init__(self, env):
        super().__init__()
        obs_dim = np.prod(env.observation_space.shape)
        act_dim = np.prod(env.action_space.shape)
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, act_dim)
        self.fc_logstd = nn.Linear(256, act_dim)
        # action rescaling
        high, low = env.action_space.high, env.action_space.low
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = self.fc_logstd(x)
        log_std = torch.tanh(log_std)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # From SpinUp / Denis Yarats
        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        std = log_std.exp()
        # [no-distribution] the reparameterized Gaussian sample written out: no Distribution object, no argument checks
        noise = torch.randn_like(mean)
        x_t = mean + std * noise
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        # Enforcing Action Bound
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


class ReplayBuffer:
    """[device-buffer] The eager script's buffer of rows, preallocated on the training device: the rows written since the last draw
    are staged on the host and reach the device together when a batch is drawn (one copy of the rows, one of their
    places), where the eager script moves each batch to the device field by field; on the CPU a transition goes
    straight into its row. The update takes a batch's indices and gathers the batch itself, inside its program."""

    def __init__(self, size: int, obs_dim: int, act_dim: int, device: torch.device, stage: int = 64):
        self.widths = [obs_dim, obs_dim, act_dim, 1, 1]  # observations, next_observations, actions, rewards, dones
        self.size, self.pos, self.full, self.n_staged, self.device = size, 0, False, 0, device
        harness.check_memory("--buffer-size", size * sum(self.widths) * 4, device)  # float32 rows: refused if too many
        self.rows = torch.zeros(size, sum(self.widths), device=device)
        self.staged = torch.zeros(stage, sum(self.widths))
        self.staged_np = self.staged.numpy()
        # [device-buffer] on the CPU the rows are host memory already: a transition goes straight into its row
        self.rows_np = self.rows.numpy() if self.rows.device.type == "cpu" else None
        self.ends = np.cumsum(self.widths)

    def add(self, obs, next_obs, action, reward, done):
        row = self.staged_np[self.n_staged] if self.rows_np is None else self.rows_np[self.pos]
        for value, start, end in zip((obs, next_obs, action, reward, done), self.ends - self.widths, self.ends):
            row[start:end] = value
        if self.rows_np is not None:
            self.full = self.full or self.pos + 1 >= self.size
            self.pos = (self.pos + 1) % self.size
            return
        self.n_staged += 1
        if self.n_staged == len(self.staged_np):
            self.flush()

    def flush(self):
        n, self.n_staged = self.n_staged, 0
        idx = (self.pos + torch.arange(n)) % self.size
        self.rows[idx.to(self.device)] = self.staged[:n].to(self.device)
        self.full = self.full or self.pos + n >= self.size
        self.pos = (self.pos + n) % self.size

    def sample_indices(self, batch_size: int) -> torch.Tensor:
        """A batch's indices; the update gathers the batch itself. The indices come from the CPU generator,
        as in the eager script: the same batches on a GPU too, for one small copy (no sync) to the device."""
        if self.n_staged:
            self.flush()
        return torch.randint(0, self.size if self.full else self.pos, (batch_size,)).to(self.device, non_blocking=True)

    def batch(self, idx: torch.Tensor) -> dict:
        """The transitions at `idx`, field by field (views of one gathered block of rows)."""
        keys = ("observations", "next_observations", "actions", "rewards", "dones")
        return dict(zip(keys, self.rows[idx].split(self.widths, dim=1)))


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
        self.t = torch.zeros((), dtype=torch.float64, device=device)
        # the next step's bias corrections (float64, as torch.optim's), kept ready: the compiled loops read two numbers
        self.inv_bias_correction1 = torch.tensor(1 / (1 - betas[0]), device=device)
        self.bias_correction2_sqrt = torch.tensor((1 - betas[1]) ** 0.5, device=device)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, grads) -> None:
        torch._foreach_lerp_(self.exp_avg, grads, 1 - self.beta1)
        torch._foreach_mul_(self.exp_avg_sq, self.beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, 1 - self.beta2)
        denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(self.exp_avg_sq), self.bias_correction2_sqrt),
                                   self.eps)
        steps = torch._foreach_div(self.exp_avg, denom)
        torch._foreach_mul_(steps, -self.lr * self.inv_bias_correction1)
        torch._foreach_add_(self.params, steps)
        self.t += 1
        self.inv_bias_correction1.copy_(1 / (1 - self.beta1 ** (self.t + 1)))
        self.bias_correction2_sqrt.copy_((1 - self.beta2 ** (self.t + 1)).sqrt())


def optimize(optimizer: Adam, loss: torch.Tensor) -> None:
    """[adam] One gradient step of `optimizer` on `loss`, its gradients as values (torch.autograd.grad), not accumulated
    into .grad: nothing to zero, and only the gradients of the optimizer's own weights are computed (the actor's
    step skips the critics' weights, which it does not update)."""
    optimizer.step(torch.autograd.grad(loss, optimizer.params))


def main(args: Args) -> None:
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = harness.pick_device(args)  # CUDA if asked for and usable, else the CPU (saying why); CPU threads

    # env setup
    env = make_env(args.env_id, args.seed, args.capture_video, run_name)

    # the networks are built on the CPU and moved: their initial weights come from the CPU generator, on any device
    actor = Actor(env).to(device)
    qf1 = SoftQNetwork(env).to(device)
    qf2 = SoftQNetwork(env).to(device)
    # [vmap-q] the twin critics' weights stacked (the targets start as exact copies), run by one weightless shell
    qnet_params = from_modules(qf1, qf2, as_module=True)
    qnet_target = qnet_params.data.clone()
    with torch.device("meta"):
        qnet = SoftQNetwork(env)
    qnet_params.to_module(qnet, preserve_module_state=False)

    def batched_qf(params, obs, action):
        with params.to_module(qnet, preserve_module_state=False):
            return qnet(obs, action)

    def qfs(params, obs, action):  # both critics' values, stacked: one vmapped call, a batched matmul per layer
        return torch.vmap(batched_qf, (0, None, None))(params, obs, action)

    q_optimizer = Adam(qnet_params.values(True, True), lr=args.q_lr)  # [vmap-q] one Adam over both critics
    actor_optimizer = Adam(list(actor.parameters()), lr=args.policy_lr)

    # Automatic entropy tuning
    if args.autotune:
        target_entropy = -torch.prod(torch.Tensor(env.action_space.shape).to(device)).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        a_optimizer = Adam([log_alpha], lr=args.q_lr)

    # the replay buffer: every step's transition (its true next observation, done only where the episode terminated),
    # from which each update draws a uniform batch
    rb = ReplayBuffer(args.buffer_size, env.observation_space.shape[0], env.action_space.shape[0], device)

    def update(idx: torch.Tensor, policy_step: bool, target_step: bool) -> dict:  # [device-buffer] the batch's indices
        """One update on a batch: the critics; with `policy_step` the actor and the temperature, `policy_frequency`
        times; with `target_step` the target networks. Returns the values to log, detached from autograd's graph."""
        data = rb.batch(idx)  # [device-buffer] the batch gathered inside the update, fused with its first reads
        alpha = log_alpha.detach().exp() if args.autotune else args.alpha  # [no-sync] a tensor: no sync to read it
        with torch.no_grad():
            next_state_actions, next_state_log_pi, _ = actor.get_action(data["next_observations"])
            qf1_next_target, qf2_next_target = qfs(qnet_target, data["next_observations"], next_state_actions)  # [vmap-q]
            min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
            next_q_value = data["rewards"].flatten() + (1 - data["dones"].flatten()) * args.gamma * (min_qf_next_target).view(-1)

        qf1_a_values, qf2_a_values = qfs(qnet_params, data["observations"], data["actions"]).view(2, -1)  # [vmap-q]
        qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
        qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
        qf_loss = qf1_loss + qf2_loss

        # optimize the model
        optimize(q_optimizer, qf_loss)
        out = dict(qf1_values=qf1_a_values.detach().mean(), qf2_values=qf2_a_values.detach().mean(),
                   qf1_loss=qf1_loss.detach(), qf2_loss=qf2_loss.detach(), qf_loss=qf_loss.detach() / 2.0)

        if policy_step:  # TD 3 Delayed update support
            for _ in range(args.policy_frequency):  # compensate for the delay by doing 'policy_frequency' instead of 1
                pi, log_pi, _ = actor.get_action(data["observations"])
                qf1_pi, qf2_pi = qfs(qnet_params, data["observations"], pi)  # [vmap-q]
                min_qf_pi = torch.min(qf1_pi, qf2_pi)
                actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
                optimize(actor_optimizer, actor_loss)
                out["actor_loss"] = actor_loss.detach()

                if args.autotune:
                    with torch.no_grad():
                        _, log_pi, _ = actor.get_action(data["observations"])
                    alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                    optimize(a_optimizer, alpha_loss)
                    alpha = log_alpha.detach().exp()  # [no-sync]
                    out["alpha_loss"] = alpha_loss.detach()

        out["alpha"] = alpha

        # update the target networks: each target weight moves `tau` of the way to its network's (Polyak
        # averaging), so that the critics' targets change slowly
        if target_step:
            # [lerp-target] one fused lerp over every target weight instead of a Python loop of copies
            qnet_target.lerp_(qnet_params.data, args.tau)
        return out

    writer = harness.make_writer(args, run_name)
    # fps is measured from the `measure_after`-th update on: the warm-up before it is logged apart
    progress = harness.Progress(args, writer, total=args.total_timesteps, start_step=args.learning_starts + 1,
                                warmup_steps=args.measure_after)
    # the latest episode's return; the latest losses (the actor's and temperature's from the last policy step)
    episodic_return, losses = float("nan"), {}

    # [detached-policy] the policy that acts reads the trained weights detached, in a weightless shell
    with torch.device("meta"):
        actor_detach = Actor(env)
    from_module(actor).data.to_module(actor_detach, preserve_module_state=False)
    policy = actor_detach.get_action
    if args.compile:  # [compile] the whole update one program, autograd traced; process-wide settings first
        if device.type == "cpu":
            # [fallback-random] compiled code draws from torch's generator, as eager code does: the same numbers
            torch._inductor.config.fallback_random = True
            torch._inductor.config.cpp_wrapper = True  # kernels called from C++: a smaller fixed cost per call
        torch._dynamo.config.trace_autograd_ops = True
        # torch before 2.12 cannot compile this update on CUDA without an option (the harness says why)
        update = torch.compile(update, options=harness.inductor_options(device))
        if device.type in COMPILED_ACTING:
            policy = torch.compile(policy)
    # [compile] the update's variants (a policy step or not, a target step or not): under --compile a program each
    updates = {(p, t): functools.partial(update, policy_step=p, target_step=t)
               for p in (False, True) for t in (False, True)}
    if args.cudagraphs:
        # [cudagraphs] each variant of the update, and the acting step, one graph replay, captured once the warm-up
        # calls have let compilation finish (without CUDA: called directly, each tensor argument cloned)
        warmup = 4 if args.compile else 2
        updates = {key: CudaGraphModule(fn, warmup=warmup) for key, fn in updates.items()}
        policy = CudaGraphModule(policy, warmup=warmup)

    def run_update(idx, policy_step, target_step):  # [compile] the loop's update: its variant's program
        return updates[policy_step, target_step](idx)

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(
        actor=actor, qnet_params=qnet_params, qnet_target=qnet_target, q_optimizer=q_optimizer,
        actor_optimizer=actor_optimizer, rb=rb, env=env,
        **(dict(log_alpha=log_alpha, a_optimizer=a_optimizer) if args.autotune else {})))

    # TRY NOT TO MODIFY: start the game
    obs, _ = env.reset(seed=args.seed)
    first, obs, episodic_return, losses = checkpoint.resume(0, obs, episodic_return, losses)  # --resume: as saved
    for global_step in range(first, args.total_timesteps):
        checkpoint.tick(global_step, obs, episodic_return, losses)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)  # the bar; the fps window opens and closes at its bounds
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            action = env.action_space.sample()
        else:
            action, _, _ = policy(torch.as_tensor(obs, device=device, dtype=torch.float32)[None])  # [detached-policy]
            action = action[0].cpu().numpy()

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, reward, terminated, truncated, info = env.step(action)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        if "episode" in info:
            episodic_return = float(info["episode"]["r"])
            writer.add_scalar("charts/episodic_return", episodic_return, global_step)
            writer.add_scalar("charts/episodic_length", int(info["episode"]["l"]), global_step)

        # the buffer keeps the true next observation; only a termination (not a time-limit truncation)
        # cuts the bootstrap
        rb.add(obs, next_obs, action, reward, terminated)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            idx = rb.sample_indices(args.batch_size)  # [device-buffer] the batch's indices: the update gathers it
            losses |= run_update(idx, policy_step=global_step % args.policy_frequency == 0,
                             target_step=global_step % args.target_network_frequency == 0)

            if global_step % 100 == 0:
                harness.log_losses(writer, losses, global_step)  # read back to the host here, at logging steps only
                progress.log(global_step, episodic_return)
    checkpoint.close(args.total_timesteps, obs, episodic_return, losses)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        qf1_state, qf2_state = (qnet_params.data[i].flatten_keys(".").to_dict() for i in range(2))  # [vmap-q] eager's layout
        torch.save({"algo": "sac", "args": asdict(args), "actor": actor.state_dict(), "qf1": qf1_state, "qf2": qf2_state},
                   model_path)
        print(f"model saved to {model_path}")

        def act(obs):  # the policy's mean action, as CleanRL's evaluation plays it
            return actor.get_action(torch.as_tensor(obs, device=device, dtype=torch.float32)[None])[2][0].cpu().numpy()
        for idx, episodic_return in enumerate(evals.play(make_env(args.env_id, args.seed), act, args.eval_episodes,
                                                         args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
