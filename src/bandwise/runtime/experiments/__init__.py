"""Reproductions of published results on CPU-sized models (single process, no process group)."""
