"""Synthetic Kineto-format traces for the doctor's tests (named synthetic wherever they
appear: no number here is a measurement). The events follow Kineto's Chrome trace
(``libkineto/src/output_json.cpp``): ``cpu_op`` / ``user_annotation`` host ranges,
``cuda_runtime`` calls with ``args.correlation``, ``gpu_memcpy`` / ``kernel`` on
``args.stream`` with the same correlation, ``ac2g`` flow events; times in µs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PID, TID = 4242, 4242


class SyntheticTrace:
    """Build a synthetic trace event by event; ``write()`` saves it as .json or .json.gz."""

    def __init__(self, gpu: bool = True) -> None:
        self.events: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        ]
        self.corr = 100
        self.ext = 1
        self.gpu = gpu

    def _x(self, cat: str, name: str, ts: float, dur: float, pid=PID, tid=TID, args=None) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args is not None:
            e["args"] = args
        self.events.append(e)
        return e

    def step(self, n: int, ts: float, dur: float) -> None:
        self._x("user_annotation", f"ProfilerStep#{n}", ts, dur, args={"External id": self.ext})
        self.ext += 1

    def op(self, name: str, ts: float, dur: float, tid: int = TID, cat: str = "cpu_op") -> None:
        self._x(cat, name, ts, dur, tid=tid, args={"External id": self.ext, "Record function id": 0})
        self.ext += 1

    def kernel(
        self, ts: float, dur: float, stream: int = 7, device: int = 0, launch_ts: float | None = None
    ) -> None:
        c = self.corr
        self.corr += 1
        if launch_ts is not None:
            self._x("cuda_runtime", "cudaLaunchKernel", launch_ts, 3.0, args={"cbid": 211, "correlation": c})
        self._x(
            "kernel",
            "void gemm_kernel<synthetic>()",
            ts,
            dur,
            pid=device,
            tid=stream,
            args={"device": device, "stream": stream, "correlation": c, "grid": [1, 1, 1]},
        )

    def sync(self, ts: float, dur: float, tid: int = TID) -> None:
        self._x(
            "cuda_runtime",
            "cudaStreamSynchronize",
            ts,
            dur,
            tid=tid,
            args={"cbid": 131, "correlation": self.corr},
        )
        self.corr += 1

    def copy(
        self,
        call_ts: float,
        gpu_ts: float,
        gpu_dur: float,
        nbytes: int | None,
        *,
        kind: str = "HtoD",
        src: str = "Pageable",
        dst: str = "Device",
        stream: int = 7,
        device: int = 0,
        call_dur: float | None = None,
        op: str | None = "aten::to",
        op_pad: float = 5.0,
        call: str = "cudaMemcpyAsync",
        tid: int = TID,
    ) -> None:
        """One copy: its issuing op (``op`` around the call, padded by ``op_pad`` µs each side),
        the runtime call, the ac2g flow, the GPU copy."""
        c = self.corr
        self.corr += 1
        if call_dur is None:  # a pageable copy holds the host until it is done
            call_dur = (gpu_ts + gpu_dur - call_ts) if src == "Pageable" or dst == "Pageable" else 4.0
        if op:
            self.op(op, call_ts - op_pad, call_dur + 2 * op_pad, tid=tid)
        self._x("cuda_runtime", call, call_ts, call_dur, tid=tid, args={"cbid": 41, "correlation": c})
        self.events.append(
            {"ph": "s", "id": c, "pid": PID, "tid": tid, "ts": call_ts, "cat": "ac2g", "name": "ac2g"}
        )
        args = {"device": device, "context": 1, "stream": stream, "correlation": c}
        if nbytes is not None:
            args["bytes"] = nbytes
            args["memory bandwidth (GB/s)"] = nbytes / (gpu_dur * 1e3) if gpu_dur else 0
        self._x(
            "gpu_memcpy",
            f"Memcpy {kind} ({src} -> {dst})",
            gpu_ts,
            gpu_dur,
            pid=device,
            tid=stream,
            args=args,
        )
        self.events.append(
            {
                "ph": "f",
                "id": c,
                "pid": device,
                "tid": stream,
                "ts": gpu_ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def document(self) -> dict:
        return {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "synthetic GPU"}] if self.gpu else [],
            "traceEvents": self.events,
            "traceName": "synthetic",
        }

    def write(self, path: Path) -> Path:
        text = json.dumps(self.document())
        if str(path).endswith(".gz"):
            with gzip.open(path, "wt") as f:
                f.write(text)
        else:
            Path(path).write_text(text)
        return Path(path)
