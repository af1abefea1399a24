"""A small writer of synthetic Kineto (PyTorch profiler) chrome traces for the doctor's tests.

Each helper appends events the way torch.profiler writes them: CPU operators and user
annotations on the host thread, runtime calls (cudaLaunchKernel, cudaMemcpyAsync) carrying a
correlation id, and device kernels / copies on a stream with the same correlation id. Times
are microseconds.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST_TID = 100
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85e9, "computeMajor": 9, "computeMinor": 0}
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85e9, "computeMajor": 8, "computeMinor": 0}
MI300 = {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206e9, "computeMajor": 9, "computeMinor": 4, "gcnArchName": "gfx942:sramecc+:xnack-"}


@dataclass
class Kineto:
    device: dict[str, Any] | None = None
    runtime_prefix: str = "cuda"
    events: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 0

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = HOST_TID, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, **({"args": args} if args else {})})

    def step(self, n: int, ts: float, dur: float, gpu_side: tuple[float, float] | None = None, cpu_side: bool = True) -> None:
        """ProfilerStep#n on the host; with `gpu_side` = (ts, dur) also the GPU-side annotation newer torch writes."""
        if cpu_side:
            self.cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")
        if gpu_side is not None:
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0, "tid": 7, "ts": gpu_side[0], "dur": gpu_side[1]})

    def kernel(self, name: str, launch_ts: float, ts: float, dur: float, stream: int = 7, launch_dur: float = 5.0) -> None:
        """A kernel launched by cudaLaunchKernel at `launch_ts`, running on the device at `ts`."""
        self._corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": f"{self.runtime_prefix}LaunchKernel", "pid": 1, "tid": HOST_TID, "ts": launch_ts, "dur": launch_dur, "args": {"correlation": self._corr}})
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": {"correlation": self._corr, "stream": stream}})

    def copy(self, call_ts: float, call_dur: float, ts: float, dur: float, kind: str = "DtoH (Device -> Pageable)", api: str = "cudaMemcpyAsync") -> None:
        self._corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": HOST_TID, "ts": call_ts, "dur": call_dur, "args": {"correlation": self._corr}})
        self.events.append({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {kind}", "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {"correlation": self._corr}})

    def write(self, path: Path, **meta: Any) -> Path:
        doc = {"schemaVersion": 1, **({"deviceProperties": [self.device]} if self.device else {}), **meta, "traceEvents": self.events}
        data = json.dumps(doc).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path
