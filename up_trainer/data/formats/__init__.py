"""Readers of the annotation formats labelling tools write: Pascal VOC XML, YOLO txt, LabelMe
JSON, CVAT for images 1.1 XML (detection) and CSV/TSV lists (classification).

Each reader turns its files into :class:`~.common.Parsed`: one :class:`~.common.ImageRecord`
per image with its objects (a box in pixels, xyxy, 0-based continuous coordinates, a class
name, an ignore flag and the format's own per-object fields), plus the class names the files
declare and notes on what was approximated. Nothing here decodes pixels: the datasets in
``tasks/det/format_datasets.py`` map class names to labels, check every box once and read
images through ``data/readers.py`` like every other dataset.
"""
