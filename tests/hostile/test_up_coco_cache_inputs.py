"""UP's COCO ``cache: {cache_dir, cache_name}`` in hostile shapes: one line naming the key."""
import pytest

from up_trainer.config.up_dataset import translate_dataset
from up_trainer.errors import ConfigError


def up_dataset(cache):
    return {"dataset": {"train": {"dataset": {"type": "coco", "kwargs": {"meta_file": "a.json", "cache": cache}}}}}


@pytest.mark.parametrize("cache, where, message", [
    ("coco_cache", "dataset.train.kwargs.cache", "expected a mapping"),
    ([1, 2], "dataset.train.kwargs.cache", "expected a mapping"),
    ({"cache_dri": "x"}, "dataset.train.kwargs.cache.cache_dri", "cache_dir"),
    ({"cache_dir": 3}, "dataset.train.kwargs.cache.cache_dir", "expected a string"),
    ({"cache_name": None}, "dataset.train.kwargs.cache.cache_name", "expected a string"),
])
def test_bad_cache_is_one_line_naming_the_key(cache, where, message):
    with pytest.raises(ConfigError) as err:
        translate_dataset(up_dataset(cache), [])
    text = str(err.value)
    assert text.startswith(where) and message in text and "\n" not in text


def test_good_cache_leaves_with_a_note():
    cfg, notes = up_dataset({"cache_dir": "coco_cache", "cache_name": "train.pkl"}), []
    translate_dataset(cfg, notes)
    assert "cache" not in cfg["dataset"]["train"]["kwargs"]
    assert any(n.startswith("dataset.train.kwargs.cache: UP's pickled copy") for n in notes)
