"""up-trainer: YAML-driven training for image classification and object detection."""
__version__ = "0.1.0"
