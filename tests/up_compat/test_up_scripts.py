"""scripts/ with UP's habits: several KEY=VALUE after one --opts, UP key paths, --flag=value."""
import os
import subprocess

from conftest import REPO


def test_dist_train_forwards_up_style_opts(tmp_path):
    fake = tmp_path / "torchrun"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = dict(os.environ, TORCHRUN=str(fake))
    opts = ["dataset.train.dataset.kwargs.meta_file=train.txt", "dataset.train.batch_sampler.kwargs.batch_size=4"]
    out = subprocess.run(["bash", os.path.join(REPO, "scripts", "dist_train.sh"), "2", "res18.yaml", "--display=10",
                          "--dry-run", "--opts", *opts], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert args[args.index("-m"):] == ["-m", "up_trainer", "train", "--config", "res18.yaml", "--display=10",
                                       "--dry-run", "--opts", *opts]
