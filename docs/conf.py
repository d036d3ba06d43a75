"""Sphinx configuration of the up-trainer documentation (``sphinx-build -W -b html docs OUT``)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.dirname(HERE))  # the package from this checkout, installed or not

from up_trainer import __version__  # noqa: E402

project = "up-trainer"
copyright = "the up-trainer authors; Apache-2.0"
version = release = __version__

extensions = ["hook_reference"]  # docs/_ext/hook_reference.py: the hooks page from the registry
exclude_patterns = ["_build"]
smartquotes = False  # "--work-dir" stays two hyphens, quotes stay as typed
highlight_language = "none"  # literal blocks are shell lines and logs; YAML blocks say so
html_theme = "furo"
html_title = f"up-trainer {release}"
html_static_path = []
