"""Decision-point datasets: labelers (one per controller kind) and their on-disk store."""
from .store import ManifestMismatch, PointSet, PointStore, load_points, task_hash

__all__ = ["ManifestMismatch", "PointSet", "PointStore", "load_points", "task_hash"]
