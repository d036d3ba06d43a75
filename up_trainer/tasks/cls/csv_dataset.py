"""Classification dataset ``csv``: a CSV/TSV list with a header (data/formats/csv_cls.py).
Samples as every classification dataset's (datasets.py); images are read through
data/readers.py and checked to exist at build time, naming the CSV line."""
import logging
import os
from typing import Optional

from ...data.formats.csv_cls import is_int, read_rows, resolve_labels
from ...data.label_map import check_names
from ...data.packed_records import PackedIndex
from ...data.readers import read_image
from ...errors import DataError
from ...registry import DATASETS
from .datasets import ClsDatasetBase, _check_color_mode, _transforms

log = logging.getLogger("up")


@DATASETS.register("csv")
class CsvClassification(PackedIndex, ClsDatasetBase):
    """``csv_file`` with a header; ``path_column`` / ``label_column`` name its columns. Labels
    as names (classes: the ``classes`` given, in that order, else the sorted names) or as
    integer indices (into ``classes`` when given)."""

    def __init__(self, csv_file: str, image_dir: Optional[str] = None, classes: Optional[list] = None,
                 path_column: str = "path", label_column: str = "label", color_mode: str = "RGB",
                 transforms: Optional[list] = None, transformer: Optional[list] = None):
        _check_color_mode(color_mode)
        classes = check_names(classes, "classes", key="classes") if classes is not None else None
        super().__init__(_transforms(transforms, transformer))
        self.csv_file, self.color_mode = csv_file, color_mode
        image_dir = os.path.dirname(os.path.abspath(csv_file)) if image_dir is None else image_dir
        rows = read_rows(csv_file, path_column, label_column, image_dir)
        # integer labels without names: indices, named by their numbers (data/label_map.py)
        self.numbered_classes = classes is None and all(is_int(label) for _, label, _ in rows)
        self.classes, rows = resolve_labels(rows, classes, csv_file)
        self.num_classes = len(self.classes)
        self.records = []
        for path, label, lineno in rows:
            full = os.path.join(image_dir, path)
            if not os.path.isfile(full):
                raise DataError(f"{csv_file}:{lineno}: image not found: {full}")
            self.records.append((full, label, lineno))
        log.info("csv %s: %d images, %d classes: %s", csv_file, len(self.records), self.num_classes,
                 ", ".join(self.classes[:20]) + (", ..." if self.num_classes > 20 else ""))

    def __len__(self):
        return len(self.records)

    def image_classes(self):
        return [[label] for _, label, _ in self.records]

    def _load(self, index):
        path, label, lineno = self.records[index]
        return read_image(path, self.color_mode, where=f"{self.csv_file}:{lineno}", context=self.context), label
