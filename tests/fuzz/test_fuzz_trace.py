"""Damaged PyTorch profiler (Kineto) traces through `bandwise doctor trace`: cut and bit-flipped
files, gzip variants, hostile event fields, deep nesting, huge strings, and ranks whose clocks
disagree."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_contract import run_cli, run_cli_child
from fuzzing import ENV_EXAMPLES, fuzz_settings
from mutations import HOSTILE, damaged, mutated, write_long_string

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from kineto_gen import H100, Kineto  # noqa: E402

TRACES = Path(__file__).parents[1] / "data" / "traces"


def gpu_trace() -> dict:
    """Four steps of a data-parallel GPU loop: every event kind the doctor reads."""
    k = Kineto(device=H100)
    for n in range(4):
        t0 = n * 2000.0
        k.step(n + 1, t0, 2000, gpu_side=(t0 + 100, 1500))
        k.cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1, 50)
        k.copy(t0 + 60, 5, t0 + 70, 40, kind="HtoD (Pinned -> Device)")
        k.cpu("aten::mm", t0 + 100, 30, **{"Input type": ["c10::BFloat16", "c10::BFloat16"]})
        k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t0 + 110, t0 + 200, 600)
        k.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t0 + 150, t0 + 500, 500, stream=20)
        k.kernel("void at::native::vectorized_elementwise_kernel<4>", t0 + 160, t0 + 900, 100)
        k.cpu("aten::item", t0 + 1200, 310)
        k.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 100, "ts": t0 + 1210, "dur": 290, "args": {"correlation": 9000 + n}})
        k.cpu("Optimizer.step#AdamW.step", t0 + 1600, 200)
        k.events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 100, "ts": t0 + 1700, "s": "t",
                         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1 << 20, "Total Allocated": (n + 1) << 30}})
    return {"schemaVersion": 1, "deviceProperties": [H100], "traceEvents": k.events}


def cpu_trace() -> dict:
    k = Kineto()
    for n in range(3):
        t0 = n * 5000.0
        k.step(n + 1, t0, 5000)
        k.cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t0 + 1, 1500)
        k.cpu("aten::addmm", t0 + 1600, 900, **{"Input type": ["float", "float", "float"]})
        k.cpu("aten::softmax", t0 + 2600, 300)
        k.cpu("Optimizer.step#SGD.step", t0 + 4000, 500)
    return {"schemaVersion": 1, "traceEvents": k.events}


def real(name: str) -> dict:
    return json.loads(gzip.decompress((TRACES / name).read_bytes()))


SEEDS = {
    "gpu": gpu_trace(), "cpu": cpu_trace(),
    "hta-cpu-only": real("hta/cpu_only_rank-34.json.gz"), "hta-mi250": real("hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
}
EVENT_FIELDS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args", ("args", "correlation"), ("args", "Input type"),
                ("args", "Total Allocated"), ("args", "Bytes"), ("args", "Device Type"), ("args", "Device Id"), ("args", "stream"))
TOP_PATHS = (("traceEvents",), ("deviceProperties",), ("deviceProperties", 0), ("deviceProperties", 0, "totalGlobalMem"),
             ("deviceProperties", 0, "name"), ("deviceProperties", 0, "computeMajor"), ("deviceProperties", 0, "gcnArchName"), ("schemaVersion",))


def read_paths(doc: dict) -> tuple[tuple, ...]:
    """Where the doctor looks: the top-level keys and the fields of the first 40 events."""
    n = min(len(doc["traceEvents"]), 40)
    fields = [f if isinstance(f, tuple) else (f,) for f in EVENT_FIELDS]
    return TOP_PATHS + tuple(("traceEvents", i, *f) for i in range(n) for f in fields) + tuple(("traceEvents", i) for i in range(n))


READ_PATHS = {name: read_paths(doc) for name, doc in SEEDS.items()}
TIMES = st.one_of(
    st.sampled_from([-1, -1e18, 0, 1e16, 9.99e16, 1e17, 2e17, 1e300, -1e300, 2**63, 10**30, 1e-300]),
    st.floats(allow_nan=True, allow_infinity=True),
)
WORDS = st.sampled_from((
    "X", "i", "B", "E", "kernel", "Kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "user_annotation", "cpu_op",
    "gpu_user_annotation", "cuda_profiler_range", "mtia_ccp_events", "ProfilerStep#1", "ProfilerStep#", "[memory]", "cudaLaunchKernel",
    "hipLaunchKernel", "cudaMemcpy", "cudaMemcpyAsync", "Memcpy HtoD (Pinned -> Device)", "Optimizer.step#X", "DataLoader", "aten::mm",
    "ncclDevKernel_AllReduce", "dma_copy", "xyz_runtime", "AMD Instinct MI300X", "Intel Gaudi",
))
VALUES = st.one_of(HOSTILE, TIMES, WORDS)


def encode(data, raw: bytes) -> tuple[bytes, str, str]:
    """(bytes on disk, file suffix, what was done): plain JSON, gzip, or gzip damaged after compressing."""
    form = data.draw(st.sampled_from(("json", "json", "gz", "gz-damaged", "gz-as-json")))
    if form == "json":
        return raw, ".json", ""
    packed = gzip.compress(raw, compresslevel=1)
    if form == "gz-damaged":
        packed, how = data.draw(damaged(packed))
        return packed, ".json.gz", f"gzip, then {how or 'intact'}"
    return packed, ".json" if form == "gz-as-json" else ".json.gz", form


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Iterator[Path]:
    """A folder for the module's files, removed at its end (some hold 200 MB)."""
    path = tmp_path_factory.mktemp("traces")
    yield path
    shutil.rmtree(path)


def write(folder: Path, raw: bytes, suffix: str = ".json", name: str = "trace") -> str:
    for old in folder.glob(f"{name}.json*"):
        old.unlink()
    path = folder / f"{name}{suffix}"
    path.write_bytes(raw)
    return str(path)


def test_seeds_are_diagnosed(folder):
    for name, doc in SEEDS.items():
        result = run_cli("kineto-trace", ["doctor", "trace", write(folder, json.dumps(doc).encode()), "--json"], name)
        assert result.code == 0 and json.loads(result.stdout)["steps"] >= 1, name


@fuzz_settings(default=60)
@given(name=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_damaged_trace(folder, name, data):
    doc, edits = data.draw(mutated(SEEDS[name], READ_PATHS[name], max_edits=5, values=VALUES))
    raw, cut = data.draw(damaged(json.dumps(doc).encode()))
    raw, suffix, form = encode(data, raw)
    argv = ["doctor", "trace", write(folder, raw, suffix)] + data.draw(st.sampled_from((["--json"], ["--json"], [], ["--max-mb", "1"])))
    run_cli("kineto-trace", argv, f"{name}: {edits} {cut} {form}")


@fuzz_settings(default=15, weight=0.3)
@given(name=st.sampled_from(("gpu", "cpu", "hta-mi250")), skews=st.lists(TIMES, min_size=1, max_size=3), data=st.data())
def test_ranks_with_clock_skew(tmp_path_factory, name, skews, data):
    """Several ranks in one directory, each rank's clock shifted by its own offset, one maybe damaged."""
    folder = tmp_path_factory.mktemp("ranks")
    for rank, skew in enumerate([0.0, *skews]):
        doc = json.loads(json.dumps(SEEDS[name]))
        for ev in doc["traceEvents"]:
            if isinstance(ev.get("ts"), (int, float)):
                ev["ts"] = ev["ts"] + skew
        raw = json.dumps(doc).encode()
        if rank == len(skews):
            raw, _ = data.draw(damaged(raw))
        (folder / f"rank{rank}.json").write_bytes(raw)
    run_cli("kineto-trace", ["doctor", "trace", str(folder), "--json"], f"{name}: clock skews {skews}")


def events(*evs: dict) -> bytes:
    return json.dumps({"traceEvents": list(evs)}).encode()


KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}
CASES = {
    "empty": b"", "null": b"null", "array": b"[]", "object": b"{}", "no events": b'{"traceEvents": []}',
    "events not a list": b'{"traceEvents": {"a": 1}}', "event a number": b'{"traceEvents": [1, "x", null]}',
    "trailing garbage": events(KERNEL) + b"}}", "two documents": events(KERNEL) * 2, "bom": b"\xef\xbb\xbf" + events(KERNEL),
    "invalid utf-8": b'{"traceEvents": [{"name": "\xff\xfe"}]}', "utf-16": events(KERNEL).decode().encode("utf-16"),
    "NaN ts": events({**KERNEL, "ts": "NaN"}).replace(b'"NaN"', b"NaN"), "Infinity dur": events({**KERNEL, "dur": "I"}).replace(b'"I"', b"Infinity"),
    "negative dur": events({**KERNEL, "dur": -5}), "huge dur": events({**KERNEL, "dur": 1e300}), "huge ts": events({**KERNEL, "ts": 10**30}),
    "long number": events({**KERNEL, "ts": 1}).replace(b'"ts": 1', b'"ts": 1' + b"0" * 5000),
    "ts string": events({**KERNEL, "ts": "10"}), "name list": events({**KERNEL, "name": ["k"]}), "args list": events({**KERNEL, "args": [1]}),
    "deep args": events({**KERNEL, "args": "A"}).replace(b'"A"', b"[" * 5000 + b"]" * 5000), "deep meta": b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b', "traceEvents": []}',
    "deep event": b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}",
    "cat a list": events({**KERNEL, "cat": ["kernel"]}), "cat a mapping": events({**KERNEL, "cat": {"k": 1}}),
    "key not a string": b'{1: 2, "traceEvents": []}', "cut in key": b'{"traceEv', "cut in array": events(KERNEL, KERNEL)[:-10],
    "device props wrong": json.dumps({"deviceProperties": {"a": [1]}, "traceEvents": [KERNEL]}).encode(),
    "memory event odd": events({"ph": "i", "name": "[memory]", "ts": "x", "args": {"Device Type": 1, "Bytes": 1e308}}),
    "memory total past float": events({"ph": "i", "name": "[memory]", "ts": 1, "args": {"Device Type": 1, "Total Allocated": 10**400}}, KERNEL),
    "memory bytes past float": events({"ph": "i", "name": "[memory]", "ts": 1, "args": {"Device Type": 1, "Bytes": -(10**400)}}, KERNEL),
    "memory bytes NaN": events({"ph": "i", "name": "[memory]", "ts": 1, "args": {"Device Type": 1, "Bytes": "N"}}, KERNEL).replace(b'"N"', b"NaN"),
    "capacity past float": json.dumps({"deviceProperties": [{"totalGlobalMem": 10**400, "computeMajor": 10**400}], "traceEvents": [KERNEL]}).encode(),
    "only launches": events({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1, "args": {"correlation": 1}}),
    "steps only": events({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "tid": 1}),
    "zero-length steps": events(*({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": 0, "dur": 0, "tid": 1} for i in range(5)), KERNEL),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_trace(folder, case):
    raw = CASES[case]
    for suffix, data in ((".json", raw), (".json.gz", gzip.compress(raw))):
        run_cli("kineto-trace", ["doctor", "trace", write(folder, data, suffix), "--json"], case)


@pytest.mark.parametrize("cut", ["header", "middle", "last byte"])
def test_truncated_gzip(folder, cut):
    packed = gzip.compress(json.dumps(SEEDS["gpu"]).encode())
    at = {"header": 5, "middle": len(packed) // 2, "last byte": len(packed) - 1}[cut]
    result = run_cli("kineto-trace", ["doctor", "trace", write(folder, packed[:at], ".json.gz"), "--json"], f"gzip cut at {at}")
    assert result.code == 2


def test_gzip_inside_gzip(folder):
    twice = gzip.compress(gzip.compress(json.dumps(SEEDS["cpu"]).encode()))
    assert run_cli("kineto-trace", ["doctor", "trace", write(folder, twice, ".json.gz"), "--json"], "gzip of gzip").code == 2


def test_gzip_trace_closes_its_file(folder):
    path = write(folder, gzip.compress(json.dumps(SEEDS["cpu"]).encode()), ".json.gz")
    result = run_cli("kineto-trace", ["doctor", "trace", path, "--json"], "gzip trace")
    assert result.code == 0 and "ResourceWarning" not in result.warnings


def big_string_trace(path: Path, where: str, mb: int = 200) -> None:
    """A trace holding one `mb` MB string: an event's name, an event's args, or a top-level key."""
    head = {"event name": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, "name": "',
            "event args": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, "name": "n", "args": {"a": "',
            "top-level key": b'{"comment": "'}[where]
    tail = {"event name": b'"}]}', "event args": b'"}}]}', "top-level key": b'", "traceEvents": []}'}[where]
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wb") as f:
        write_long_string(f, head, tail, mb)


@pytest.mark.parametrize("where, suffix", [("event name", ".json"), ("event args", ".json.gz"), ("top-level key", ".json")])
def test_big_string_memory(folder, where, suffix):
    """A ~200 MB single string is refused with one line, in bounded memory, plain or gzipped."""
    path = folder / f"big{suffix}"
    big_string_trace(path, where)
    result = run_cli_child("kineto-trace", ["doctor", "trace", str(path), "--json"], f"200 MB string in {where}, {suffix}")
    assert result.code == 2


@pytest.mark.skipif(not ENV_EXAMPLES, reason="long run only (BANDWISE_FUZZ_EXAMPLES): writes and reads a 200 MB trace")
def test_many_events_memory(folder):
    """A ~200 MB trace of ordinary events streams in bounded memory."""
    one = gpu_trace()["traceEvents"]
    path = folder / "many.json"
    with path.open("wb") as f:
        f.write(b'{"schemaVersion": 1, "deviceProperties": [' + json.dumps(H100).encode() + b'], "traceEvents": [')
        written, step = 0, 0
        while written < 200 << 20:
            shifted = [{**ev, "ts": ev["ts"] + step * 8000.0, **({"name": f"ProfilerStep#{step}"} if ev["name"].startswith("ProfilerStep#") else {})} for ev in one]
            text = json.dumps(shifted)[1:-1].encode()
            f.write((b", " if written else b"") + text)
            written += len(text)
            step += 1
        f.write(b"]}")
    run_cli_child("kineto-trace", ["doctor", "trace", str(path), "--json"], f"{step * len(one):,} events, 200 MB", timeout=600)


@pytest.mark.parametrize("correlation", [1 << 63, -(1 << 63) - 1, 1 << 200])
def test_correlation_outside_int64(folder, correlation):
    """A kernel's correlation id past int64 filled a numpy-backed id array (exit 1); it is now no id."""
    doc = gpu_trace()
    kernel = next(ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel")
    kernel.setdefault("args", {})["correlation"] = correlation
    result = run_cli("kineto-trace", ["doctor", "trace", write(folder, json.dumps(doc).encode()), "--json"], f"correlation {correlation}")
    assert result.code == 0
