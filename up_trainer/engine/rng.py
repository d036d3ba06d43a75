"""Capture and restore every random generator, in a form torch.load(weights_only=True) reads."""
import random

import numpy as np
import torch


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state():
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "state": list(mt), "gauss": gauss},
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state):
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_state_problem(state):
    """What is wrong with a saved RNG state (a hand-edited checkpoint), or None."""
    if not isinstance(state, dict):
        return f"is a {type(state).__name__}, not a dict"
    for key in ("torch", "python", "numpy"):
        if key not in state:
            return f"lacks '{key}'"
    if not (isinstance(state["torch"], torch.Tensor) and state["torch"].dtype == torch.uint8):
        return "'torch' is not a uint8 tensor"
    py, n = state["python"], state["numpy"]
    if not (isinstance(py, dict) and {"version", "state", "gauss"} <= set(py) and isinstance(py["state"], list)):
        return "'python' is not {version, state, gauss}"
    if not (isinstance(n, dict) and {"name", "keys", "pos", "has_gauss", "cached"} <= set(n)
            and isinstance(n["keys"], torch.Tensor)):
        return "'numpy' is not {name, keys, pos, has_gauss, cached}"
    return None
