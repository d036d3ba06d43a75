"""Image classification: torchvision architectures, datasets and the top-k evaluator.

Importing the submodules registers their entries; the registries import them on first
lookup, so nothing here is imported eagerly.
"""
