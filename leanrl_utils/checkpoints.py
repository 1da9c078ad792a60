"""Checkpoints of a whole run, and `--resume`: the plumbing behind `harness.Checkpoint` (not the lesson).

A script says *what* its state is (its networks, optimizers, buffers, environments, and the values its loop
carries from one step to the next); this module says *how* that state is written and put back:

- `encode(x)` turns a live object into what `torch.save` writes and `torch.load(weights_only=True)` reads back:
  a module's or an optimizer's `state_dict`, a tensor on the CPU, a tensordict's leaves, a numpy array or a JAX
  array as a tensor (marked, so that it comes back as what it was), a random generator's state, an environment's
  state (`env_state`), and any other object as its attributes (a replay buffer's rows and write position, the
  written-out Adam's moments and step count).
- `decode(live, saved)` puts a saved state back: in place where the live object can take it (a tensor's
  `copy_`, `load_state_dict`, a numpy array's `[...] =`, an object's attributes), so that what holds a reference
  to it (a compiled update, a CUDA graph, a weightless shell) sees the restored values; as a new value where it
  cannot (a number, a JAX array, a tuple).
- `env_state` / `set_env_state`: gymnasium's environments, wrappers and vector environments, walked from the
  outside in: every wrapper's counters and statistics (the time limit's step count, the episode statistics,
  the normalization's running moments), every space's and environment's random generator, and MuJoCo's whole
  integration state (`mj_getState` of `mjSTATE_INTEGRATION`, warm-start included, then `mj_forward`).
- `rng_state` / `set_rng_state`: Python's, numpy's global, torch's CPU generator and every CUDA device's.

A checkpoint is one file, `checkpoint.pt` in the run's folder, written to a temporary file in the same folder,
flushed to the disk, then renamed over the previous one: a kill at any moment leaves the previous checkpoint
whole.
"""

import collections
import enum
import os
import random
import sys

import numpy as np
import torch

FILE = "checkpoint.pt"
FORMAT = 1  # the layout of a checkpoint file; a file of another layout is refused

# attributes of gymnasium's objects that are not state: constructor arguments kept for pickling, and the like
_SKIPPED = {"_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs", "metadata", "_metadata", "spec", "_cached_spec",
            "env_fns", "render_mode", "fullpath", "mujoco_renderer"}


class Mismatch(ValueError):
    """A checkpoint that does not fit the run resuming it (another network's shape, another environment)."""


def check_names(saved: dict, live: dict) -> None:
    """The checkpoint names the same objects as the run resuming it."""
    if sorted(saved) != sorted(live):
        raise Mismatch(f"the checkpoint holds {sorted(saved)} where this run has {sorted(live)}")


def _tensor(x: torch.Tensor) -> torch.Tensor:
    """A tensor as saved: detached, on the CPU, holding its own storage only (a view would save its base)."""
    x = x.detach().cpu()
    return x.clone() if x.untyped_storage().nbytes() != x.nbytes else x


def _is_jax(x) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def encode(x):
    """What a checkpoint keeps of `x` (see the module's docstring): plain dicts, lists, numbers and tensors."""
    if isinstance(x, np.generic):  # before float: numpy's float64 is one, but adds to a float32 as a float64
        return {"__np_scalar__": torch.from_numpy(np.asarray(x).copy())}
    if isinstance(x, (bool, int, float, str, type(None))):
        return x
    if isinstance(x, enum.Enum):
        raise TypeError(f"a checkpoint keeps no {type(x).__name__} (a setting, not state)")
    if isinstance(x, torch.Tensor):
        return _tensor(x)
    if isinstance(x, np.ndarray):
        return {"__numpy__": torch.from_numpy(np.ascontiguousarray(x).copy())}
    if _is_jax(x):
        import jax

        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # a typed key: its raw bits
            return {"__jax_key__": torch.from_numpy(np.asarray(jax.random.key_data(x)).copy())}
        return {"__jax__": torch.from_numpy(np.asarray(x).copy())}
    if isinstance(x, (torch.nn.Module, torch.optim.Optimizer)):
        return {"__state_dict__": _state_dict(x.state_dict())}
    if type(x).__module__.startswith("tensordict"):  # a TensorDict / TensorDictParams: its leaves, flat
        return {"__tensordict__": {k: _tensor(v) for k, v in x.items(True, True)}}
    if isinstance(x, torch.Generator):
        return {"__generator__": x.get_state()}
    if isinstance(x, np.random.Generator):
        return {"__np_generator__": x.bit_generator.state}
    if isinstance(x, collections.deque):
        return {"__deque__": [encode(v) for v in x]}
    if isinstance(x, dict):
        return {"__dict__": [(encode(k), encode(v)) for k, v in x.items()]}
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a named tuple (a JAX twin's state): its fields
        return {"__fields__": {f: encode(getattr(x, f)) for f in x._fields}}
    if isinstance(x, (list, tuple)):
        return {"__list__": [encode(v) for v in x]}
    if _is_space(x):  # an action or observation space: its random generator (what `sample()` draws from)
        rng = getattr(x, "_np_random", None)
        return {"__space__": None if rng is None else rng.bit_generator.state}
    if _is_env(x):
        return {"__env__": env_state(x)}
    if _is_pytree(x):  # a flax struct or another registered JAX pytree: its leaves, in order
        import jax

        return {"__leaves__": [encode(v) for v in jax.tree_util.tree_leaves(x)]}
    if hasattr(x, "__dict__") and not isinstance(x, type):
        return {"__object__": {k: encode(v) for k, v in vars(x).items() if _kept(k, v)}}
    raise TypeError(f"a checkpoint cannot hold a {type(x).__name__}")


def _state_dict(sd):
    """A state_dict's values encoded (an optimizer's is nested: its per-parameter state, its groups)."""
    if isinstance(sd, torch.Tensor):
        return _tensor(sd)
    if isinstance(sd, dict):
        return {k: _state_dict(v) for k, v in sd.items()}
    if isinstance(sd, (list, tuple)):
        return type(sd)(_state_dict(v) for v in sd)
    return sd


def _kept(name: str, value) -> bool:
    """Whether an attribute of a plain object is part of its state: not a numpy view of a tensor it also holds
    (saved through the tensor), not a device, a function or a class."""
    if isinstance(value, np.ndarray) and not value.flags.owndata and value.base is not None:
        return False
    return not (callable(value) or isinstance(value, (torch.device, torch.dtype, type)) or name in _SKIPPED)


def _is_space(x) -> bool:
    gym = sys.modules.get("gymnasium")
    return gym is not None and isinstance(x, gym.spaces.Space)


def _is_env(x) -> bool:
    gym = sys.modules.get("gymnasium")
    return gym is not None and isinstance(x, (gym.Env, gym.vector.VectorEnv))


def _is_pytree(x) -> bool:
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    leaves, treedef = jax.tree_util.tree_flatten(x)
    return not (len(leaves) == 1 and leaves[0] is x)


def decode(live, saved):
    """`saved` (from `encode`) put back into `live`, in place where it can be; returns the restored value."""
    if not isinstance(saved, dict) or len(saved) != 1 or not next(iter(saved)).startswith("__"):
        if isinstance(saved, torch.Tensor):
            if isinstance(live, torch.Tensor):
                _copy_into(live, saved)
                return live
            return saved
        return saved
    (kind, value), = saved.items()
    if kind == "__np_scalar__":
        return value.numpy()[()]
    if kind == "__numpy__":
        array = value.numpy()
        if isinstance(live, np.ndarray) and live.shape == array.shape and live.flags.writeable:
            live[...] = array
            return live
        return array.copy()
    if kind in ("__jax__", "__jax_key__"):
        import jax

        array = jax.numpy.asarray(value.numpy())
        if kind == "__jax_key__":
            array = jax.random.wrap_key_data(array, impl=jax.random.key_impl(live) if live is not None else None)
        return jax.device_put(array, live.sharding) if _is_jax(live) else array
    if kind == "__state_dict__":
        _check(live is not None, "a network or optimizer", type(live))
        live.load_state_dict(value)
        return live
    if kind == "__tensordict__":
        leaves = dict(live.items(True, True))
        _check(sorted(leaves) == sorted(value), f"weights {sorted(value)[:3]}...", sorted(leaves)[:3])
        for key, tensor in value.items():
            _copy_into(leaves[key].data, tensor)
        return live
    if kind == "__generator__":
        live.set_state(value)
        return live
    if kind == "__np_generator__":
        live.bit_generator.state = value
        return live
    if kind == "__deque__":
        live.clear()
        live.extend(decode(None, v) for v in value)
        return live
    if kind == "__dict__":
        if not isinstance(live, dict):
            return {decode(None, k): decode(None, v) for k, v in value}
        restored = {decode(None, k): decode(live.get(decode(None, k)), v) for k, v in value}
        live.clear()
        live.update(restored)
        return live
    if kind == "__fields__":
        return type(live)(**{f: decode(getattr(live, f), v) for f, v in value.items()})
    if kind == "__list__":
        if live is None:
            return [decode(None, v) for v in value]
        _check(len(live) == len(value), f"{len(value)} items", len(live))
        items = [decode(x, v) for x, v in zip(live, value)]
        if isinstance(live, list):
            live[:] = items
            return live
        return type(live)(items)
    if kind == "__space__":
        if value is not None:
            live.seed(0)  # makes its generator, whose state is then replaced
            live._np_random.bit_generator.state = value
        return live
    if kind == "__env__":
        set_env_state(live, value)
        return live
    if kind == "__leaves__":
        import jax

        leaves, treedef = jax.tree_util.tree_flatten(live)
        _check(len(leaves) == len(value), f"{len(value)} arrays", len(leaves))
        return jax.tree_util.tree_unflatten(treedef, [decode(x, v) for x, v in zip(leaves, value)])
    if kind == "__object__":
        for name, v in value.items():
            setattr(live, name, decode(getattr(live, name, None), v))
        return live
    raise Mismatch(f"unknown entry {kind}")


def _copy_into(live: torch.Tensor, saved: torch.Tensor) -> None:
    _check(live.shape == saved.shape and live.dtype == saved.dtype, f"a {saved.dtype} tensor of shape "
           f"{tuple(saved.shape)}", f"{live.dtype} {tuple(live.shape)}")
    with torch.no_grad():
        live.copy_(saved)


def _check(ok: bool, saved: str, live) -> None:
    if not ok:
        raise Mismatch(f"the checkpoint holds {saved} where this run has {live}")


def same(a, b) -> bool:
    """Whether two encoded states are equal: the same structure, tensors equal element for element (NaN equal to
    NaN), numbers and strings equal."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        return torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                     and torch.equal(a.nan_to_num(), b.nan_to_num()))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:  # NaN
        return True
    return type(a) is type(b) and a == b


# --- environments


def _children(env):
    """The environments an environment wraps or holds (a wrapper's, a vector environment's)."""
    if hasattr(env, "envs"):
        return list(env.envs)
    inner = vars(env).get("env")
    return [inner] if inner is not None else []


def env_state(env) -> dict:
    """A gymnasium environment's whole state, outside in: see the module's docstring."""
    state = {}
    for name, value in vars(env).items():
        if name in ("env", "envs") or name in _SKIPPED or callable(value):
            continue
        if type(value).__module__.startswith("mujoco"):
            if name == "data":
                state["__mujoco__"] = _mujoco_state(env)
            continue
        try:
            state[name] = encode(value)
        except TypeError:  # a renderer, a recorder: not part of what the environment computes
            continue
    return {"state": state, "children": [env_state(child) for child in _children(env)], "type": type(env).__name__}


def set_env_state(env, saved: dict) -> None:
    _check(saved["type"] == type(env).__name__, f"an environment {saved['type']}", type(env).__name__)
    children = _children(env)
    _check(len(children) == len(saved["children"]), f"{len(saved['children'])} environments", len(children))
    for name, value in saved["state"].items():
        if name == "__mujoco__":
            _set_mujoco_state(env, value)
        elif name == "_np_random" and getattr(env, name, None) is None:
            env._np_random = np.random.Generator(np.random.PCG64())
            env._np_random.bit_generator.state = value["__np_generator__"]
        else:
            setattr(env, name, decode(getattr(env, name, None), value))
    for child, child_state in zip(children, saved["children"]):
        set_env_state(child, child_state)


def _mujoco_state(env) -> torch.Tensor:
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    buffer = np.empty(mujoco.mj_stateSize(env.model, spec), dtype=np.float64)
    mujoco.mj_getState(env.model, env.data, buffer, spec)
    return torch.from_numpy(buffer)


def _set_mujoco_state(env, saved: torch.Tensor) -> None:
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    _check(mujoco.mj_stateSize(env.model, spec) == saved.numel(), f"a MuJoCo state of {saved.numel()} numbers",
           mujoco.mj_stateSize(env.model, spec))
    mujoco.mj_setState(env.model, env.data, saved.numpy(), spec)
    mujoco.mj_forward(env.model, env.data)


# --- random generators


def rng_state() -> dict:
    """Every global generator a run draws from: Python's, numpy's, torch's CPU one and each CUDA device's."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": [version, list(internal), gauss],
             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- the file


def write(path: str, checkpoint: dict) -> None:
    """`checkpoint` written to `path` atomically: a temporary file beside it, flushed to the disk, renamed."""
    folder = os.path.dirname(path) or "."
    partial = f"{path}.partial"
    with open(partial, "wb") as f:
        torch.save(checkpoint, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    fd = os.open(folder, os.O_RDONLY)  # the rename itself on the disk
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str) -> dict:
    """A checkpoint read back; `ValueError` with what is wrong, in a few words, for a file that is none."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, another format: torch says it many ways
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot be read as a checkpoint ({why[:160]})") from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT or "script" not in checkpoint:
        raise ValueError("not a checkpoint of this project's scripts (--checkpoint-every writes one)")
    return checkpoint
