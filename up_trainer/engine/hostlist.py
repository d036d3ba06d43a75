"""Expand SLURM's compressed host lists ("node[01-03,07],gpu-a[1-2]") into host names.

``scontrol show hostnames`` is the reference implementation and is used when it is on PATH;
this parser is the fallback for containers and login-less compute nodes that lack it.
"""
import shutil
import subprocess

from ..errors import ConfigError


def _split_top_level(text):
    """Split on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError("unbalanced '['")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_range_set(body):
    """'01-03,07' -> ['01', '02', '03', '07'], keeping the zero padding of the lower bound."""
    out = []
    for item in body.split(","):
        item = item.strip()
        if "-" in item:
            lo, hi = item.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {item!r}")
            out += [str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1)]
        elif item.isdigit():
            out.append(item)
        else:
            raise ValueError(f"bad range item {item!r}")
    return out


def _expand_one(pattern):
    """One host pattern; several bracket groups form a cartesian product (rack[1-2]-n[1-2])."""
    start = pattern.find("[")
    if start < 0:
        if "]" in pattern:
            raise ValueError("unbalanced ']'")
        return [pattern]
    end = pattern.find("]", start)
    if end < 0:
        raise ValueError("unbalanced '['")
    prefix, body, rest = pattern[:start], pattern[start + 1:end], pattern[end + 1:]
    return [prefix + n + tail for n in _expand_range_set(body) for tail in _expand_one(rest)]


def expand_hostlist(text):
    """Host names in SLURM order, without the scontrol fallback (pure; unit tested)."""
    try:
        hosts = [h for part in _split_top_level(text or "") for h in _expand_one(part)]
    except ValueError as exc:
        raise ConfigError("SLURM_NODELIST", f"cannot parse host list {text!r}: {exc}") from None
    if not hosts:
        raise ConfigError("SLURM_NODELIST", "empty host list")
    return hosts


def slurm_hostnames(text):
    """Prefer `scontrol show hostnames` (exact SLURM semantics); fall back to our parser."""
    scontrol = shutil.which("scontrol")
    if scontrol:
        try:
            out = subprocess.run([scontrol, "show", "hostnames", text], capture_output=True, text=True,
                                 timeout=30, check=True).stdout.split()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass  # a broken scontrol should not stop the job: the parser knows the syntax
    return expand_hostlist(text)
