"""Training data: a memory-mapped token file, byte-level text, or the built-in stdlib corpus.

- A `.bin` file of uint16 (default) or uint32 tokens is memory-mapped (nanoGPT's format).
- Any other file, or a directory of text files, is tokenised byte-level (vocabulary 256).
- With no path, the corpus is the Python standard library's own top-level `*.py` sources,
  sorted by name, byte-level: real text that needs no download, so loss curves mean something.
  It is written once to a cache `.bin` (atomically, so concurrent ranks cannot see half a file).

The last `val_fraction` of the tokens is held out for validation. Training samples are
non-overlapping windows of seq_len + 1 tokens, visited in a seeded random order that every rank
computes identically; optimizer step s takes global samples [s·G, (s+1)·G) of that order and
data-parallel rank r reads its own contiguous slice of them. The position is therefore a single
number (the next step), saved with checkpoints and restored exactly.
"""

from __future__ import annotations

import os
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from bandwise.errors import BandwiseError

BYTE_VOCAB = 256


@dataclass(kw_only=True, slots=True)
class DataConfig:
    path: str = ""
    """Token `.bin` file, a text file, a directory of text files, or "" for the stdlib corpus."""
    token_dtype: str = "uint16"
    """Element type of a `.bin` token file: uint16 or uint32."""
    val_fraction: float = 0.01
    """Share of the tokens (from the end) held out for validation."""
    seed: int = 0
    """Seed of the sample order."""
    num_workers: int = 2
    """DataLoader worker processes (batch assembly overlaps the step)."""
    pin_memory: bool = True
    """Page-locked host batches, for asynchronous host-to-device copies; only used with CUDA."""
    prefetch_factor: int = 2
    """Batches each worker prepares ahead."""
    persistent_workers: bool = True
    """Keep workers alive across epochs/evaluations instead of restarting them."""

    def __post_init__(self) -> None:
        if self.token_dtype not in ("uint16", "uint32"):
            raise BandwiseError(f"token_dtype={self.token_dtype!r} must be uint16 or uint32")
        if not 0 < self.val_fraction < 0.5:
            raise BandwiseError(f"val_fraction={self.val_fraction!r} must be in (0, 0.5)")
        if self.num_workers < 0:
            raise BandwiseError(f"num_workers={self.num_workers} must be >= 0 (0 loads in the training process)")
        if self.prefetch_factor < 1:
            raise BandwiseError(f"prefetch_factor={self.prefetch_factor} must be >= 1")


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(root.glob("*.py"))


def _cache_dir() -> Path:
    base = os.environ.get("BANDWISE_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "bandwise")
    return Path(base)


def _write_atomic(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(array.tobytes())
    os.replace(tmp, path)


def _bytes_of(files: list[Path]) -> np.ndarray:
    return np.frombuffer(b"".join(p.read_bytes() for p in files), dtype=np.uint8).astype(np.uint16)


def default_corpus() -> Path:
    """The stdlib corpus as a uint16 `.bin`, built on first use."""
    files = stdlib_files()
    if not files:
        raise BandwiseError(f"no *.py files under {sysconfig.get_paths()['stdlib']}; pass --data with a token or text file")
    import sys

    path = _cache_dir() / f"stdlib-py{sys.version_info[0]}{sys.version_info[1]}-{len(files)}-{sum(p.stat().st_size for p in files)}.bin"
    if not path.exists():
        _write_atomic(path, _bytes_of(files))
    return path


def load_tokens(cfg: DataConfig) -> tuple[np.ndarray, int]:
    """All tokens (memory-mapped where possible) and the vocabulary size they need."""
    if not cfg.path:
        return np.memmap(default_corpus(), dtype=np.uint16, mode="r"), BYTE_VOCAB
    path = Path(cfg.path)
    if not path.exists():
        raise BandwiseError(f"data path {cfg.path!r} does not exist; give a .bin token file, a text file or a directory (or omit --data for the stdlib corpus)")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        if not files:
            raise BandwiseError(f"data directory {cfg.path!r} holds no files")
        return _bytes_of(files), BYTE_VOCAB
    if path.suffix == ".bin":
        itemsize = np.dtype(cfg.token_dtype).itemsize
        if path.stat().st_size % itemsize:
            raise BandwiseError(f"{cfg.path}: {path.stat().st_size} bytes is not a whole number of {cfg.token_dtype} tokens; check --token-dtype")
        tokens = np.memmap(path, dtype=cfg.token_dtype, mode="r") if path.stat().st_size else np.zeros(0, np.uint16)
        vocab = int(tokens.max()) + 1 if len(tokens) else 0
        return tokens, vocab
    return _bytes_of([path]), BYTE_VOCAB


class TokenWindows(Dataset):
    """Sample i = tokens[i·T : i·T + T + 1], split into (input, target)."""

    def __init__(self, tokens: np.ndarray, seq_len: int) -> None:
        self.tokens, self.seq_len = tokens, seq_len

    def __len__(self) -> int:
        return max(0, (len(self.tokens) - 1) // self.seq_len)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.from_numpy(np.asarray(self.tokens[i * self.seq_len : (i + 1) * self.seq_len + 1], dtype=np.int64))
        return w[:-1], w[1:]


class StepSampler(Sampler[list[int]]):
    """Yields this rank's micro-batches of index lists, step after step, from `start_step` on.

    The order is a seeded permutation per epoch, identical on every rank; step s uses global
    positions [s·G, (s+1)·G) and rank r the slice [r·G/dp, (r+1)·G/dp), cut into micro-batches.
    """

    def __init__(self, n: int, *, global_batch: int, micro_batch: int, dp_rank: int, dp: int, seed: int, start_step: int, steps: int) -> None:
        self.n, self.G, self.mb, self.rank, self.dp = n, global_batch, micro_batch, dp_rank, dp
        self.seed, self.start, self.steps = seed, start_step, steps

    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def __len__(self) -> int:
        return (self.steps - self.start) * (self.G // self.dp // self.mb)

    def __iter__(self) -> Iterator[list[int]]:
        local = self.G // self.dp
        cache: dict[int, np.ndarray] = {}
        for step in range(self.start, self.steps):
            positions = np.arange(step * self.G + self.rank * local, step * self.G + (self.rank + 1) * local)
            epochs = positions // self.n
            idx = []
            for p, e in zip(positions.tolist(), epochs.tolist()):
                if e not in cache:
                    cache = {e: self._order(e)}
                idx.append(int(cache[e][p % self.n]))
            for j in range(0, local, self.mb):
                yield idx[j : j + self.mb]


@dataclass(kw_only=True, slots=True)
class Splits:
    train: TokenWindows
    val: TokenWindows
    vocab: int


def make_splits(cfg: DataConfig, seq_len: int, model_vocab: int) -> Splits:
    tokens, vocab = load_tokens(cfg)
    if vocab > model_vocab:
        raise BandwiseError(f"the data uses token ids up to {vocab - 1} but the model's vocab is {model_vocab}; use a model with vocab >= {vocab}")
    n_val = max(int(len(tokens) * cfg.val_fraction), seq_len + 1)
    train, val = TokenWindows(tokens[:-n_val], seq_len), TokenWindows(tokens[-n_val:], seq_len)
    if len(train) < 1 or len(val) < 1:
        raise BandwiseError(f"data has {len(tokens)} tokens, too few for seq_len={seq_len} with a validation split; use more data or a shorter --seq-len")
    return Splits(train=train, val=val, vocab=vocab)


def train_loader(splits: Splits, cfg: DataConfig, *, global_batch: int, micro_batch: int, dp_rank: int, dp: int, start_step: int, steps: int, cuda: bool) -> DataLoader:
    sampler = StepSampler(len(splits.train), global_batch=global_batch, micro_batch=micro_batch, dp_rank=dp_rank, dp=dp, seed=cfg.seed, start_step=start_step, steps=steps)
    workers = cfg.num_workers
    return DataLoader(
        splits.train,
        batch_sampler=sampler,
        num_workers=workers,
        pin_memory=cfg.pin_memory and cuda,
        prefetch_factor=cfg.prefetch_factor if workers else None,
        persistent_workers=cfg.persistent_workers and workers > 0,
    )


def val_batches(splits: Splits, *, samples: int, batch: int, dp_rank: int, dp: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The first `samples` validation windows, whatever the layout, dealt round-robin to the
    data-parallel ranks and cut into batches of `batch`."""
    n = min(len(splits.val), samples)
    mine = list(range(dp_rank, n, dp))
    for j in range(0, len(mine), batch):
        items = [splits.val[i] for i in mine[j : j + batch]]
        yield torch.stack([a for a, _ in items]), torch.stack([b for _, b in items])
