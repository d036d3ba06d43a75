"""One label map per run: the class names every split, evaluation and prediction share.

A run's classes are fixed once: those of ``dataset.train`` (given as ``classes`` or read from
its files), else those the checkpoint records (``up eval`` and ``up predict`` of a trained
model), else the test set's own. Every other data set is mapped onto them BY NAME (COCO
files: by category id and name, both must agree): a val split whose files hold no object of
one class, a COCO val file whose ``categories`` leave an id out, or a CSV list without one
label keep the labels the net was trained with. A class the run does not know, used by a
record of the other set, is refused in one line naming the class and the file; comparing
only the counts (or positions) would score every such set silently wrong.

Names themselves pass :func:`check_names` wherever they come from (YOLO ``names``, ``classes``
of any dataset, VOC/LabelMe/CVAT/CSV labels, COCO category names): non-empty, distinct once
stripped. Two classes with one name would merge silently.
"""
import logging

from ..errors import ConfigError, DataError
from ..protocols import Relabels
from .packed_records import PackedIndex, PackedRecords

log = logging.getLogger("up")
SHOWN = 10  # names quoted in a message


def check_names(names, where, key=None):
    """``names`` as a list of stripped strings: a non-empty list, no name empty, no two alike.
    ``key`` (a config key such as ``classes``) makes the error a ConfigError at that key, else
    a DataError naming ``where`` (a file and the field)."""
    def refuse(message):
        if key is not None:
            raise ConfigError(key, message)
        raise DataError(f"{where}: {message}")

    if not isinstance(names, (list, tuple)) or not names:
        refuse(f"expected a non-empty list of class names, got {str(names)[:80]!r}")
    out, first = [], {}
    for k, name in enumerate(names):
        if isinstance(name, bool) or not isinstance(name, (str, int)):
            refuse(f"[{k}]: a class name must be a string, got {type(name).__name__} {str(name)[:40]!r}")
        text = str(name).strip()
        if not text:
            refuse(f"[{k}]: empty class name")
        if text in first:
            refuse(f"[{k}]: {text!r} is listed twice (also [{first[text]}]); two classes under one name would "
                   "merge: give every class its own name")
        first[text] = k
        out.append(text)
    return out


def shown_names(names):
    return ", ".join(names[:SHOWN]) + (", ..." if len(names) > SHOWN else "")


def run_ids_for(mapping, classes, own_ids, run_ids):
    """Category ids for the run's classes as a mapped set writes them: its own file's id where
    it has the class (results stay comparable with its file), else the run's, else a free one."""
    own = {mapping[k]: cid for k, cid in enumerate(own_ids or []) if k in mapping}
    taken = set(own.values()) | set(run_ids or [])
    free = (i for i in range(1, 1 << 30) if i not in taken)
    ids = []
    for j in range(len(classes)):
        if j in own:
            ids.append(own[j])
        elif run_ids and run_ids[j] not in own.values():
            ids.append(run_ids[j])
        else:
            ids.append(next(free))
    return ids


def source_of(dataset):
    """The file (or folder) a dataset was read from, for messages."""
    for attr in ("where", "ann_file", "meta_file", "csv_file", "root"):
        value = getattr(dataset, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(dataset).__name__


def label_mapping(own, run, used, where, run_from, own_ids=None, run_ids=None):
    """{position in ``own`` (0-based): position in ``run``} for every class of ``own`` the run
    knows. A class in ``used`` (positions some record labels) that the run lacks is refused;
    with category ids on both sides (COCO files), the id must name the same class."""
    run_index = {name: i for i, name in enumerate(run)}
    mapping = {}
    for k, name in enumerate(own):
        if own_ids is not None and run_ids is not None:
            cid = own_ids[k]
            if cid in run_ids and run[run_ids.index(cid)] != name:
                raise DataError(f"{where}: category id {cid} is {name!r} here but {run[run_ids.index(cid)]!r} in "
                                f"{run_from}; one id, one class")
        if name in run_index:
            mapping[k] = run_index[name]
        elif k in used:
            raise DataError(f"{where}: class {name!r} is not one of the {len(run)} classes of {run_from} "
                            f"({shown_names(run)}); a model trained on those cannot score it")
    return mapping


def align(dataset, run, run_from, run_ids=None, run_numbered=False):
    """Make ``dataset`` label its records with the run's classes ``run`` (its ``relabel``
    rewrites the records). Nothing happens when its classes are already the run's, or when
    one side's names are only label numbers (``run_numbered``, the set's ``numbered_classes``:
    files of indices without names): positions are all that links such sets, as before."""
    own = list(getattr(dataset, "classes", None) or [])
    if not own or own == list(run) or bool(getattr(dataset, "numbered_classes", False)) != bool(run_numbered):
        return
    used = dataset.used_labels() if isinstance(dataset, Relabels) else None
    where = source_of(dataset)
    if used is None:
        raise DataError(f"{where}: its classes ({shown_names(own)}) are not those of {run_from} "
                        f"({shown_names(run)}) and this dataset type cannot be mapped onto them by name")
    own_ids = getattr(dataset, "file_cat_ids", None)
    mapping = label_mapping(own, list(run), used, where, run_from, own_ids,
                            run_ids if own_ids is not None else None)
    dataset.relabel(mapping, list(run), run_ids)
    moved = sum(k != v for k, v in mapping.items())
    log.info("%s: its %d classes mapped by name onto the %d classes of %s (%d renumbered, %d absent here)",
             where, len(own), len(run), run_from, moved, len(run) - len(mapping))


class LabelRows:
    """``used_labels`` and ``relabel`` of a classification dataset keeping (path, label, ...)
    rows in ``records`` or ``samples``, labels 0-based (None: an unlabeled image)."""

    def _label_rows(self):
        for attr in ("records", "samples"):
            if isinstance(getattr(self, attr, None), (list, PackedRecords)):
                return attr
        return None

    def used_labels(self):
        """Classes some sample is labelled with (None: labels held otherwise, not mappable)."""
        attr = self._label_rows()
        return {row[1] for row in getattr(self, attr) if isinstance(row[1], int)} if attr else None

    def relabel(self, mapping, classes, run_ids=None):
        """Label the samples with the run's ``classes``: {own label: run label}."""
        attr = self._label_rows()
        if attr is not None:
            rows = [(row[0], mapping[row[1]], *row[2:]) if isinstance(row[1], int) else row
                    for row in getattr(self, attr)]
            if isinstance(self, PackedIndex) and attr == "records":
                self.replace_records(rows)
            else:
                setattr(self, attr, rows)
        self.classes, self.num_classes = list(classes), len(classes)


def recorded_classes(ckpt):
    """The class names a checkpoint records (None for older checkpoints and foreign files)."""
    names = ckpt.get("classes") if isinstance(ckpt, dict) else None
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return names
    return None


def file_ids(dataset):
    """The category ids a dataset's file gave its classes (COCO), else None."""
    return list(dataset.cat_ids) if getattr(dataset, "file_cat_ids", None) is not None else None


def widest_numbering(train_set, run, others):
    """Labels that are indices in the files (no names given) are the same class in every set
    whatever its largest label: the train set takes the widest such numbering, so a val set
    holding a class no train image shows still fits (the net's class count decides)."""
    for _, dataset in others:
        names = list(getattr(dataset, "classes", None) or []) if dataset is not None else []
        if getattr(dataset, "numbered_classes", False) and len(names) > len(run) and names[:len(run)] == run:
            train_set.relabel({k: k for k in range(len(run))}, names)
            run = names
    return run


def one_label_map(train_set, others):
    """Map every other set [(config path, dataset)] onto the train set's classes; returns the
    run's class names to record (the train set's, else the first other set's; None when none
    has names, only label numbers)."""
    if isinstance(getattr(train_set, "num_classes", None), list):  # UP's multi-head form: counts per head
        return None
    run = list(getattr(train_set, "classes", None) or []) if train_set is not None else []
    numbered = bool(getattr(train_set, "numbered_classes", False))
    if run and numbered:
        run = widest_numbering(train_set, run, others)
    if run:
        run_from = f"dataset.train ({source_of(train_set)})"
        for _, dataset in others:
            if dataset is not None and not isinstance(getattr(dataset, "num_classes", None), list):
                align(dataset, run, run_from, file_ids(train_set), numbered)
        return None if numbered else [str(c) for c in run]  # numbers name nothing to map by later
    for _, dataset in others:
        names = getattr(dataset, "classes", None) if dataset is not None else None
        if names and not isinstance(getattr(dataset, "num_classes", None), list) \
                and not getattr(dataset, "numbered_classes", False):
            return [str(c) for c in names]
    return None


def adopt_recorded(trainer, names, source):
    """``up eval`` of a trained model: the test set labelled with the classes the model was
    trained on (``names``, recorded in ``source``), by name."""
    if not names:
        return
    test_set = getattr(trainer.loaders, "test_set", None)
    if test_set is not None and not isinstance(getattr(test_set, "num_classes", None), list):
        align(test_set, names, source)
    trainer.class_names = list(names)
