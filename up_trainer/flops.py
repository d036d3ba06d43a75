"""`up flops`: parameters and FLOPs per top-level module, counted by torch.utils.flop_counter."""
import torch
from torch.utils.flop_counter import FlopCounterMode

from .errors import ConfigError
from .protocols import SamplesSubnetFlops


def parse_input_size(text):
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise ConfigError("--input-size", f"expected C,H,W with positive integers, got {text!r}")
    return dims


def _human(n):
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.2f}{unit}" if unit else f"{n:.0f}"
        n /= 1000
    return f"{n:.2f}P"


def flops_table(cfg, input_size=None):
    from .engine.builder import build_dataset
    from .tasks.net import build_model

    model = build_model(cfg["net"]).eval()
    if input_size:
        size = parse_input_size(input_size)
    else:
        entry = cfg["dataset"]["test"] or cfg["dataset"]["train"]
        sample = build_dataset(entry, "dataset.test")[0]
        size = tuple(sample["image"].shape)
    batch = {"image": torch.zeros(1, *size), "label": torch.zeros(1, dtype=torch.long)}
    counter = FlopCounterMode(display=False, depth=None)
    with counter, torch.no_grad():
        model(batch)
    per_module = counter.get_flop_counts()
    rows = [("module", "params", "FLOPs")]
    total_flops = 0
    for name, child in model.named_children():
        params = sum(p.numel() for p in child.parameters())
        key = next((k for k in per_module if k.split(".")[-1] == name and k.count(".") == 1), None)
        flops = sum(per_module[key].values()) if key else 0
        total_flops += flops
        rows.append((name, _human(params), _human(flops)))
    total_params = sum(p.numel() for p in model.parameters())
    rows.append(("total", _human(total_params), _human(sum(per_module.get("Global", {}).values()) or total_flops)))
    width = max(len(r[0]) for r in rows)
    lines = [f"input: 1x{'x'.join(map(str, size))}"]
    lines += [f"{a:<{width}}  {b:>10}  {c:>10}" for a, b, c in rows]
    if isinstance(model, SamplesSubnetFlops):  # a BigNAS supernet: UP's sample_flops phase
        lines += model.sampled_flops_lines(size)
    return "\n".join(lines)
