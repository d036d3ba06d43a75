"""Which precision a run computes in: what the config asks, what the hardware does natively.

Autocast in a dtype the device has no arithmetic for is emulated, and on a CPU that costs
10-20x the fp32 step time (bf16 without avx512_bf16/AMX, fp16 without avx512_fp16/AMX-FP16).
So the request is checked against the hardware once, at start-up:

- CPU, float16 not native: fall back to fp32 (one warning; ``runtime.amp.force: true`` keeps it).
- CPU, bfloat16 not native: time a 3-step probe in both dtypes, warn with the measured slowdown
  and fall back to fp32 unless forced.
- CUDA, bfloat16 on a GPU without bf16 (compute capability < 8.0): float16 with a GradScaler.

The decision (asked, runs, why) is logged, appended to the run's config.yaml as a comment and
shown by ``up train --dry-run``. The hardware is re-checked on every start, so a run resumed on
another machine decides again.
"""
import dataclasses
import logging
import platform
import time
from typing import Optional

import torch

from ..errors import ConfigError, did_you_mean

log = logging.getLogger("up")

AMP_KEYS = ("enable", "dtype", "force")
DTYPES = {"float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def dtype_name(dtype):
    return "float32" if dtype is None else str(dtype).replace("torch.", "")


@dataclasses.dataclass
class PrecisionPlan:
    asked: Optional[torch.dtype]   # None: fp32 was asked (no AMP)
    source: str                    # the config key that asked for it
    runs: Optional[torch.dtype]    # what autocast computes in; None: fp32
    native: Optional[bool]         # whether the device has arithmetic for ``asked`` (None: not checked)
    forced: bool
    reason: str
    probe_ratio: Optional[float] = None  # measured autocast / fp32 step time, when probed

    @property
    def scaler(self):
        return self.runs is torch.float16

    @property
    def fell_back(self):
        return self.runs is not self.asked

    def describe(self):
        """One line: what was asked, what runs, why."""
        if self.asked is None:
            return "precision: float32 (no mixed precision asked)"
        runs = dtype_name(self.runs) + (" autocast with a dynamic GradScaler" if self.scaler else
                                        " autocast" if self.runs is not None else "")
        return f"precision: asked {dtype_name(self.asked)} ({self.source}), runs {runs}: {self.reason}"


def requested(runtime_cfg):
    """(dtype or None, source key, force) from ``runtime.fp16`` / ``runtime.amp``."""
    amp = runtime_cfg.get("amp") or {}
    if not isinstance(amp, dict):
        raise ConfigError("runtime.amp", f"expected a mapping, got {type(amp).__name__}",
                          "e.g. {enable: true, dtype: bfloat16}")
    unknown = set(amp) - set(AMP_KEYS)
    if unknown:
        key = sorted(map(str, unknown))[0]
        raise ConfigError(f"runtime.amp.{key}", "unknown key", did_you_mean(key, AMP_KEYS))
    force = amp.get("force", False)
    if not isinstance(force, bool):
        raise ConfigError("runtime.amp.force", f"expected true or false, got {force!r}")
    if runtime_cfg.get("fp16"):
        return torch.float16, "runtime.fp16", force
    if not amp.get("enable", False):
        return None, "", force
    dtype = amp.get("dtype", "float16")
    if dtype not in DTYPES:
        raise ConfigError("runtime.amp.dtype", f"unknown dtype {dtype!r}", "use float16 or bfloat16")
    return DTYPES[dtype], "runtime.amp", force


def cpu_flags():
    """The CPU's feature flags as the kernel reports them (empty where unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def _torch_cpu_check(name):
    check = getattr(torch.cpu, name, None)
    try:
        return bool(check()) if callable(check) else False
    except Exception:  # a private helper of torch's: absent or failing means "not reported"
        return False


# Which flags give native arithmetic, per dtype. x86: AVX-512 BF16/FP16 or AMX; aarch64: BF16 /
# half-precision SIMD (the "Features" line of /proc/cpuinfo).
NATIVE_CPU_FLAGS = {
    torch.bfloat16: ("avx512_bf16", "amx_bf16", "bf16"),
    torch.float16: ("avx512_fp16", "amx_fp16", "asimdhp"),
}


def cpu_native(dtype):
    """(native?, evidence) for autocast in ``dtype`` on this CPU, from torch's own report and the
    CPU flags."""
    found = set()
    if dtype is torch.bfloat16 and (_torch_cpu_check("_is_avx512_bf16_supported")
                                    or _torch_cpu_check("_is_amx_tile_supported")):
        found.add("avx512_bf16" if _torch_cpu_check("_is_avx512_bf16_supported") else "amx_bf16")
    if dtype is torch.float16 and _torch_cpu_check("_is_amx_fp16_supported"):
        found.add("amx_fp16")
    found |= set(NATIVE_CPU_FLAGS[dtype]) & cpu_flags()
    if found:
        return True, f"the CPU has {', '.join(sorted(found))}"
    capability = torch.backends.cpu.get_cpu_capability()
    wanted = " or ".join(NATIVE_CPU_FLAGS[dtype][:2])
    return False, f"the {platform.machine()} CPU has no {wanted} (torch capability {capability})"


def cuda_native(dtype, device):
    """(native?, evidence) for autocast in ``dtype`` on a CUDA device."""
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if dtype is torch.bfloat16:
        ok = major >= 8  # bf16 tensor cores and arithmetic from Ampere on
        return ok, f"{name} (compute capability {major}.{minor}) {'has' if ok else 'has no'} bfloat16 (8.0 and up)"
    ok = (major, minor) >= (5, 3)
    return ok, f"{name} (compute capability {major}.{minor}) {'has' if ok else 'has no'} float16 (5.3 and up)"


def probe_cpu_slowdown(dtype, steps=3, budget_s=2.0):
    """Autocast / fp32 time of a small conv + linear training step on this CPU (median of
    ``steps``). Cut short once ``budget_s`` is spent: a slow dtype shows itself in one step."""
    gen = torch.Generator().manual_seed(0)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1)
    head = torch.nn.Linear(16 * 16 * 16, 10)
    x = torch.randn(4, 16, 16, 16, generator=gen)

    def step(amp):
        with torch.autocast("cpu", dtype=dtype, enabled=amp):
            loss = head(torch.relu(conv(x)).flatten(1)).float().square().mean()
        loss.backward()

    times = {False: [], True: []}
    deadline = time.perf_counter() + budget_s
    for amp in (False, True):
        step(amp)  # warm-up: kernel selection, allocator
    for _ in range(steps):
        for amp in (False, True):
            t0 = time.perf_counter()
            step(amp)
            times[amp].append(time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            break
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return med[True] / max(med[False], 1e-9)


def decide_precision(runtime_cfg, device, *, probe=probe_cpu_slowdown):
    """The PrecisionPlan for ``runtime_cfg`` on ``device`` (a torch.device)."""
    asked, source, force = requested(runtime_cfg)
    if asked is None:
        return PrecisionPlan(None, "", None, None, force, "no mixed precision asked")
    name = dtype_name(asked)
    if device.type == "cpu":
        native, evidence = cpu_native(asked)
    elif device.type == "cuda":
        native, evidence = cuda_native(asked, device)
    else:
        return PrecisionPlan(asked, source, asked, None, force, f"no capability check for {device.type}")
    if native:
        return PrecisionPlan(asked, source, asked, True, force, f"native: {evidence}")
    if force:
        return PrecisionPlan(asked, source, asked, False, True,
                             f"not native: {evidence}; kept because runtime.amp.force is true")
    if device.type == "cuda":
        if asked is torch.bfloat16 and cuda_native(torch.float16, device)[0]:
            return PrecisionPlan(asked, source, torch.float16, False, False,
                                 f"not native: {evidence}; float16 instead (runtime.amp.force: true keeps bfloat16)")
        return PrecisionPlan(asked, source, None, False, False,
                             f"not native: {evidence}; float32 instead (runtime.amp.force: true keeps {name})")
    if asked is torch.bfloat16:
        ratio = probe(asked)
        return PrecisionPlan(asked, source, None, False, False,
                             f"not native: {evidence}; emulated {name} measured {ratio:.1f}x the float32 step "
                             f"time in a 3-step probe; float32 instead (runtime.amp.force: true keeps {name})", ratio)
    return PrecisionPlan(asked, source, None, False, False,
                         f"not native: {evidence}; emulated {name} runs many times slower than float32; "
                         f"float32 instead (runtime.amp.force: true keeps {name})")


def log_plan(plan):
    (log.warning if plan.fell_back else log.info)("%s", plan.describe())
