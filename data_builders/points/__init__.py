"""Decision-point datasets: labelers (one per controller kind) and their on-disk store."""
from .store import (CorruptDataset, ManifestMismatch, PointSet, PointStore, StoreLocked, load_points, read_manifest,
                    task_hash)

__all__ = ["CorruptDataset", "ManifestMismatch", "PointSet", "PointStore", "StoreLocked", "load_points",
           "read_manifest", "task_hash"]
