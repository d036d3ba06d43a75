"""Runtime guards: what a run meets beyond its config file. A corrupt disk-cache index starts
the arena over; (more cases below)."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from up_trainer.data import readers
from up_trainer.data.image_arena import EMPTY, FILLED
from up_trainer.data.image_cache import install, open_image_cache
from up_trainer.data.image_cache_disk import INDEX


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
    try:
        cache = open_image_cache({"cache": "disk"}, [("dataset.train", _Files(paths))], cache_dir)
        for p in paths:
            readers.decode_image(p, "RGB")
        assert cache.filled() == 2
        cache.close()
        index_path = os.path.join(cache_dir, INDEX)
        with open(index_path) as f:
            index = json.load(f)
        index["entries"][0] = corrupt(index["entries"][0])  # the token still matches the table
        with open(index_path, "w") as f:
            json.dump(index, f)
        cache = open_image_cache({"cache": "disk"}, [("dataset.train", _Files(paths))], cache_dir)
        assert list(cache._table["state"]) == [EMPTY, EMPTY]
        assert np.array_equal(readers.decode_image(paths[1], "RGB"), np.full((6, 5, 3), 40, np.uint8))
        assert cache._table["state"][1] == FILLED
    finally:
        install(None)
