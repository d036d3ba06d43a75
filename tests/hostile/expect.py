"""What every hostile case asserts: the exit code, exactly one ``up: error:`` line holding the
expected words, no traceback, and the checkpoints already in the run dir untouched."""
import hashlib
import os


def fingerprint(save_dir):
    """{name: sha256} of every file in save_dir (empty when it does not exist)."""
    out = {}
    if os.path.isdir(save_dir):
        for name in sorted(os.listdir(save_dir)):
            path = os.path.join(save_dir, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def seed_checkpoint(save_dir):
    """A stand-in for a checkpoint an earlier run left: whatever happens, it must stay as it is."""
    import torch

    os.makedirs(save_dir, exist_ok=True)
    torch.save({"model": {"w": torch.arange(4.0)}, "epoch": 1}, os.path.join(save_dir, "ckpt_e1.pth"))
    return fingerprint(save_dir)


class ProcResult:
    """A finished subprocess seen like the in-process CLI result (exit_code, stdout, stderr)."""

    def __init__(self, returncode, stdout, stderr):
        self.exit_code, self.stdout, self.stderr, self.exception = returncode, stdout or "", stderr or "", None


def assert_one_line(result, *fragments, code=2):
    """Exit ``code``, stderr exactly one ``up: error:`` line holding every fragment, no
    traceback; returns the line."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == code, (result.exit_code, result.stderr[-3000:], result.exception)
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("up: error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
