"""Task-specific parts: models, datasets, evaluators and transforms per task (cls, det)."""
