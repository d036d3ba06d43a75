from setuptools import find_namespace_packages, setup

# The recipes under configs/ travel in the wheel as package data, up_trainer/recipes/<task>/,
# where `up train --data` finds them (up_trainer/oneline.py); a source checkout or an editable
# install reads configs/ itself. One copy of each recipe either way.
setup(
    # namespace packages too: up_trainer/data has no __init__.py, and find_packages skipped it
    packages=find_namespace_packages(include=["up_trainer", "up_trainer.*"], exclude=["*.__pycache__"])
    + ["up_trainer.recipes"],
    package_dir={"up_trainer.recipes": "configs"},
    package_data={"up_trainer.recipes": ["*/*.yaml"]},
)
