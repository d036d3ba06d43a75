"""Runtime guards: what a run meets beyond its config file. More DataLoader workers than the
machine can use are refused at start-up (``up config``, ``--dry-run`` and the API too); a
corrupt disk-cache index starts the arena over."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from up_trainer.data import readers
from up_trainer.data.image_arena import EMPTY, FILLED
from up_trainer.data.context import DataContext
from up_trainer.data.image_cache import open_image_cache
from up_trainer.data.image_cache_disk import INDEX

from conftest import invoke
from hostile_helpers import assert_one_line, tiny_cfg, write_yaml


def _worker_bound():
    """What the docs promise: 4 per CPU this process may run on, at least 32."""
    return max(32, 4 * len(os.sched_getaffinity(0)))


@pytest.mark.parametrize("command", [["config"], ["train", "--dry-run"], ["train"], ["eval"]])
@pytest.mark.parametrize("workers", [10000, "bound+1"])
def test_more_workers_than_the_machine_can_use_is_one_line_at_start_up(tmp_path, command, workers):
    workers = _worker_bound() + 1 if workers == "bound+1" else workers
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(dataset={"num_workers": workers}))
    extra = {"config": [], "eval": ["--checkpoint", tmp_path / "none.pth", "--work-dir", tmp_path / "run"]}
    args = extra.get(command[0], ["--work-dir", tmp_path / "run"])
    result = invoke([command[0], "--config", cfg, *command[1:], *args])
    assert_one_line(result, f"dataset.num_workers: {workers} worker processes are more than this machine can use: "
                    f"at most {_worker_bound()}", "set dataset.num_workers to")
    assert not (tmp_path / "run").exists()


def test_the_worker_bound_itself_is_accepted(tmp_path):
    import up_trainer

    cfg = up_trainer.load_config(tiny_cfg(dataset={"num_workers": _worker_bound()}))
    assert cfg["dataset"]["num_workers"] == _worker_bound()
    with pytest.raises(up_trainer.ConfigError) as caught:
        up_trainer.load_config(cfg, opts=[f"dataset.num_workers={_worker_bound() + 1}"])
    assert caught.value.path == "dataset.num_workers"


class _Files:
    """A dataset stand-in that lists its image files, as file datasets do."""

    def __init__(self, paths):
        self.paths = paths

    def image_files(self):
        return [(p, "RGB", None) for p in self.paths]


@pytest.mark.parametrize("corrupt", [
    lambda e: 5, lambda e: "x", lambda e: None, lambda e: [], lambda e: e[:3], lambda e: e + [1],
    lambda e: [[e[0]], *e[1:]], lambda e: [e[0], 3, *e[2:]], lambda e: [*e[:3], "12", *e[4:]],
    lambda e: [*e[:4], 1.5, e[5]], lambda e: [*e[:3], True, *e[4:]], lambda e: [*e[:5], {"a": 1}],
], ids=["int", "str", "null", "empty", "short", "long", "unhashable-path", "mode-int", "size-str",
        "mtime-float", "size-bool", "digest-dict"])
def test_a_corrupt_disk_cache_index_entry_starts_the_arena_over(tmp_path, corrupt):
    paths = []
    for i in range(2):
        paths.append(str(tmp_path / f"p{i}.png"))
        Image.fromarray(np.full((6, 5, 3), 40 * i, np.uint8)).save(paths[-1])
    cache_dir = str(tmp_path / "cache")
    cache = open_image_cache({"cache": "disk"}, [("dataset.train", _Files(paths))], cache_dir)
    for p in paths:
        readers.decode_image(p, "RGB", context=DataContext(image_cache=cache))
    assert cache.filled() == 2
    cache.close()
    index_path = os.path.join(cache_dir, INDEX)
    with open(index_path) as f:
        index = json.load(f)
    index["entries"][0] = corrupt(index["entries"][0])  # the token still matches the table
    with open(index_path, "w") as f:
        json.dump(index, f)
    cache = open_image_cache({"cache": "disk"}, [("dataset.train", _Files(paths))], cache_dir)
    try:
        assert list(cache._table["state"]) == [EMPTY, EMPTY]
        image = readers.decode_image(paths[1], "RGB", context=DataContext(image_cache=cache))
        assert np.array_equal(image, np.full((6, 5, 3), 40, np.uint8))
        assert cache._table["state"][1] == FILLED
    finally:
        cache.close()
