"""Object detection: datasets (coco, custom, digits_det), box-aware transforms, torchvision
detectors (retinanet, fcos, faster_rcnn, ssdlite), YOLOX (the yolox package) and the COCO evaluator.

Importing the submodules registers their entries; the registries import them on first
lookup, so nothing here is imported eagerly.
"""
