"""data/label_map.py: the names check and mapping one set's classes onto the run's by name."""
import pytest

from up_trainer.data.label_map import align, check_names, label_mapping, one_label_map, run_ids_for
from up_trainer.errors import ConfigError, DataError


def test_names_are_stripped_distinct_and_non_empty():
    assert check_names([" a", "b ", 3], "f") == ["a", "b", "3"]
    with pytest.raises(DataError, match=r"^f: \[2\]: 'a' is listed twice \(also \[0\]\)"):
        check_names(["a", "b", "a "], "f")
    with pytest.raises(ConfigError, match=r"^classes: \[1\]: empty class name"):
        check_names(["a", "  "], "f", key="classes")
    for bad in ([], None, "ab", [["a"]], [True]):
        with pytest.raises(DataError):
            check_names(bad, "f")


def test_mapping_by_name_refuses_only_a_used_unknown_class():
    assert label_mapping(["b", "d"], ["a", "b", "c", "d"], {0, 1}, "val", "train") == {0: 1, 1: 3}
    assert label_mapping(["b", "x"], ["a", "b"], {0}, "val", "train") == {0: 1}  # 'x' declared, never used
    with pytest.raises(DataError, match="val: class 'x' is not one of the 2 classes of train"):
        label_mapping(["b", "x"], ["a", "b"], {1}, "val", "train")


def test_coco_ids_must_name_the_same_class():
    assert label_mapping(["b", "c"], ["a", "b", "c"], {0, 1}, "v", "t", [2, 3], [1, 2, 3]) == {0: 1, 1: 2}
    with pytest.raises(DataError, match="category id 2 is 'c' here but 'b' in t"):
        label_mapping(["c"], ["a", "b", "c"], {0}, "v", "t", [2], [1, 2, 3])
    # a mapped set keeps its own file's ids where it has the class, the run's elsewhere
    assert run_ids_for({0: 1, 1: 2}, ["a", "b", "c"], [2, 3], [1, 2, 3]) == [1, 2, 3]
    assert run_ids_for({0: 2}, ["a", "b", "c"], [1], None) == [2, 3, 1]


class Records:
    """The smallest dataset align() maps: classes, used_labels, relabel."""

    def __init__(self, classes, labels, numbered=False):
        self.classes, self.labels, self.numbered_classes, self.where = list(classes), list(labels), numbered, "f"

    def used_labels(self):
        return set(self.labels)

    def relabel(self, mapping, classes, run_ids=None):
        self.labels = [mapping[k] for k in self.labels]
        self.classes = list(classes)


def test_align_relabels_and_one_label_map_takes_the_train_classes():
    train, val = Records(["bird", "cat", "dog"], [0, 1, 2]), Records(["dog"], [0, 0])
    assert one_label_map(train, [("dataset.test", val)]) == ["bird", "cat", "dog"]
    assert val.labels == [2, 2] and val.classes == train.classes
    align(val, ["bird", "cat", "dog"], "train")  # already the run's: nothing to do
    assert val.labels == [2, 2]


def test_numbered_classes_take_the_widest_numbering():
    train, val = Records(["0", "1"], [0, 1], numbered=True), Records(["0", "1", "2"], [2], numbered=True)
    assert one_label_map(train, [("dataset.test", val)]) is None  # numbers: nothing to record and map by
    assert train.classes == ["0", "1", "2"] and val.labels == [2]
    named = Records(["a", "b", "c"], [2])  # a named set beside numbered labels: linked by position only
    assert one_label_map(Records(["1", "2"], [0], numbered=True), [("dataset.test", named)]) is None
    assert named.labels == [2] and named.classes == ["a", "b", "c"]


def test_image_folder_val_without_one_class_folder_keeps_the_train_labels(tmp_path):
    from PIL import Image

    from up_trainer.tasks.cls.datasets import ImageFolderDataset

    for split, names in (("train", "abc"), ("val", "bc")):
        for name in names:
            (tmp_path / split / name).mkdir(parents=True)
            Image.new("RGB", (4, 4)).save(tmp_path / split / name / "x.png")
    train, val = ImageFolderDataset(str(tmp_path / "train")), ImageFolderDataset(str(tmp_path / "val"))
    assert [label for _, label in val.samples] == [0, 1]  # its own numbering: b=0, c=1
    assert one_label_map(train, [("dataset.test", val)]) == ["a", "b", "c"]
    assert [label for _, label in val.samples] == [1, 2] and val.num_classes == 3
    assert val[0]["label"] == 1
