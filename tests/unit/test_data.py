"""Data: the stdlib corpus is the sorted sources byte for byte, token files round-trip, each
data-parallel rank reads a disjoint share of every step, and a restart at step s reads exactly
what an uninterrupted run reads from step s on."""

from __future__ import annotations

import numpy as np
import pytest

from bandwise.errors import BandwiseError
from bandwise.runtime.data import DataConfig, StepSampler, default_corpus, load_tokens, make_splits, stdlib_files, train_loader


def test_default_corpus_is_the_stdlib_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("BANDWISE_CACHE", str(tmp_path))
    files = stdlib_files()
    assert files == sorted(files) and len(files) > 50
    tokens, vocab = load_tokens(DataConfig())
    raw = b"".join(p.read_bytes() for p in files)
    assert vocab == 256 and len(tokens) == len(raw)
    assert bytes(np.asarray(tokens[:1000], dtype=np.uint8)) == raw[:1000]
    assert default_corpus().parent == tmp_path  # cached once, where asked


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_token_bin_round_trip(tmp_path, dtype):
    ids = np.arange(5000, dtype=dtype) % 300
    path = tmp_path / "tok.bin"
    ids.tofile(path)
    tokens, vocab = load_tokens(DataConfig(path=str(path), token_dtype=dtype))
    assert vocab == 300 and np.array_equal(np.asarray(tokens), ids)


def test_validation_split_is_held_out(tmp_path):
    ids = np.arange(10_000, dtype=np.uint16) % 256
    (tmp_path / "tok.bin").write_bytes(ids.tobytes())
    s = make_splits(DataConfig(path=str(tmp_path / "tok.bin"), val_fraction=0.1), seq_len=32, model_vocab=256)
    assert len(s.train.tokens) + len(s.val.tokens) == 10_000
    assert len(s.val.tokens) == 1000  # the last 10%, never sampled for training
    x, y = s.train[3]
    assert np.array_equal(x.numpy(), ids[96:128]) and np.array_equal(y.numpy(), ids[97:129])


def test_bad_inputs(tmp_path):
    with pytest.raises(BandwiseError, match="does not exist"):
        load_tokens(DataConfig(path=str(tmp_path / "missing.bin")))
    (tmp_path / "big.bin").write_bytes(np.array([0, 1000] * 400, dtype=np.uint16).tobytes())
    with pytest.raises(BandwiseError, match="vocab >= 1001"):
        make_splits(DataConfig(path=str(tmp_path / "big.bin")), seq_len=8, model_vocab=256)
    (tmp_path / "tiny.txt").write_text("abc")
    with pytest.raises(BandwiseError, match="too few"):
        make_splits(DataConfig(path=str(tmp_path / "tiny.txt")), seq_len=64, model_vocab=256)
    with pytest.raises(BandwiseError, match="num_workers"):
        DataConfig(num_workers=-1)


def _samples(sampler: StepSampler) -> list[int]:
    return [i for mb in sampler for i in mb]


def test_ranks_partition_each_step_and_resume_continues():
    n, G, steps = 37, 8, 12  # several epochs, so the per-epoch reshuffle is crossed
    kw = dict(global_batch=G, micro_batch=2, seed=3, steps=steps)
    full = [_samples(StepSampler(n, dp_rank=r, dp=2, start_step=0, **kw)) for r in range(2)]
    single = _samples(StepSampler(n, dp_rank=0, dp=1, start_step=0, **kw))
    for step in range(steps):
        shares = [full[r][step * 4 : (step + 1) * 4] for r in range(2)]
        assert shares[0] + shares[1] == single[step * G : (step + 1) * G]  # same global batch as one process
    epoch0 = single[: (n // G) * G]
    assert len(set(epoch0)) == len(epoch0)  # no repeats within an epoch
    resumed = _samples(StepSampler(n, dp_rank=1, dp=2, start_step=5, **kw))
    assert resumed == full[1][5 * 4 :]


def test_loader_options_reach_the_dataloader(tmp_path):
    (tmp_path / "t.txt").write_text("hello world " * 400)
    s = make_splits(DataConfig(path=str(tmp_path / "t.txt")), seq_len=16, model_vocab=256)
    cfg = DataConfig(num_workers=1, prefetch_factor=3, persistent_workers=True, pin_memory=True)
    loader = train_loader(s, cfg, global_batch=4, micro_batch=2, dp_rank=0, dp=1, start_step=0, steps=2, cuda=False)
    assert loader.num_workers == 1 and loader.prefetch_factor == 3 and loader.persistent_workers
    assert loader.pin_memory is False  # pinning only helps host-to-accelerator copies
    batches = list(loader)
    assert len(batches) == 4 and batches[0][0].shape == (2, 16)
