"""The measuring harness: ``sweep()`` and ``forum()``, one row per timed copy.

Every copy is timed on its own, with CUDA events and a synchronised host clock, so one
slow copy cannot hide in an average. Rows are appended to ``<out>.partial.csv`` as they
are measured and flushed, so an interrupt, a crash or an out-of-memory size loses
nothing; at the end the partial file becomes the output (written, then renamed).
"""

from __future__ import annotations

import gc
import math
import os
import random
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from h2dlab import datasets, strategies
from h2dlab.env import collect_env

UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(-?[0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")

#: Execution orders of a sweep (see plan_sweep).
ORDERS = ("shuffled", "ascending", "interleaved")
#: The forum's grid: seq = 1, 6, ..., 1046 for float16 tensors of shape (24, 2, 1, seq, 4096).
FORUM_SEQS = list(range(1, 1050, 5))


def forum_shape(seq: int) -> tuple[int, ...]:
    return (24, 2, 1, seq, 4096)


def forum_sizes() -> list[int]:
    """The byte sizes of the forum's 210 float16 tensors."""
    return [int(np.prod(forum_shape(s))) * 2 for s in FORUM_SEQS]


def parse_size(text: str) -> int:
    """``'64MiB'`` -> 67108864. Binary (KiB, MiB, GiB) and decimal (KB, MB, GB) units.

    Raises ``ValueError`` with a one-line reason for anything else, zero or negative.
    """
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in UNITS:
        raise ValueError(
            f"cannot read size {text!r}: write a number and a unit such as 4096, 1KiB, 64MiB, 1GiB"
        )
    value = float(m.group(1)) * UNITS[unit]
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def parse_sizes(spec: str) -> list[int]:
    """Sizes from ``'1KiB,64MiB,1GiB'``, ``'1KiB..1GiB'`` (every power of two between,
    inclusive), ``'forum'`` (the forum's 210 sizes), or a comma list mixing them.
    Returned sorted, without duplicates."""
    if not str(spec).strip():
        raise ValueError("no sizes given: write e.g. --sizes 1KiB..1GiB")
    sizes: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        if part == "forum":
            sizes.update(forum_sizes())
        elif ".." in part:
            lo_s, hi_s = part.split("..", 1)
            lo, hi = parse_size(lo_s), parse_size(hi_s)
            if lo > hi:
                raise ValueError(f"size range {part!r} runs backwards: write the smaller size first")
            k = math.ceil(math.log2(lo))
            if 2**k != lo:
                sizes.add(lo)
            while 2**k <= hi:
                sizes.add(2**k)
                k += 1
        else:
            sizes.add(parse_size(part))
    return sorted(sizes)


def fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= div:
            v = n / div
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{int(n)} B"


def mem_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where there is no such file."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class _StopFlag:
    """SIGINT/SIGTERM set a flag; the harness stops after the copy in flight."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    @contextmanager
    def installed(self) -> Iterator[_StopFlag]:
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum, frame):  # noqa: ARG001
            if self.signum is not None:  # a second Ctrl-C: stop now
                raise KeyboardInterrupt
            self.signum = signum

        for s in old:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)


class RowWriter:
    """Append rows to ``<out>.partial.csv``, flushed one by one; ``finish()`` turns the
    partial file into ``out`` in its own format."""

    def __init__(self, out: Path, resume_rows: pd.DataFrame | None = None) -> None:
        self.out = Path(out)
        self.partial = self.out.with_name(self.out.name + ".partial.csv")
        self.columns = list(datasets.COLUMNS)
        self.n = 0
        fresh = resume_rows is None or not self.partial.exists()
        self.fh = open(self.partial, "w" if fresh else "a", newline="")
        if fresh:
            self.fh.write(",".join(self.columns) + "\n")
            if resume_rows is not None and len(resume_rows):
                for rec in resume_rows.to_dict("records"):
                    self._write(rec)
        else:
            self.n = len(resume_rows)
        self.fh.flush()

    def _write(self, row: dict[str, Any]) -> None:
        df = pd.DataFrame([{c: row.get(c) for c in self.columns}])
        self.fh.write(df.to_csv(index=False, header=False))
        self.n += 1

    def write(self, row: dict[str, Any]) -> None:
        self._write(row)
        self.fh.flush()

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.close()

    def finish(self, env: dict[str, Any]) -> pd.DataFrame:
        self.close()
        df = datasets.read(self.partial) if self.n else datasets.empty_table()
        datasets.save(df, self.out, env=env)
        self.partial.unlink(missing_ok=True)
        return df


def existing_rows(out: Path) -> tuple[pd.DataFrame | None, dict[str, Any] | None]:
    """Rows already measured for ``out`` (partial file first) and its env, for --resume."""
    out = Path(out)
    partial = out.with_name(out.name + ".partial.csv")
    env = datasets.read_env(out)
    if partial.exists():
        return datasets.read(partial), env
    if out.exists():
        return datasets.read(out), env
    return None, env


# --- counters and timing -------------------------------------------------------------


def _host_allocs() -> float:
    """cudaHostAlloc calls so far by PyTorch's caching host allocator (NaN if unknown)."""
    try:
        return float(torch.cuda.host_memory_stats().get("num_host_alloc", np.nan))
    except Exception:  # noqa: BLE001 - older torch, or CUDA not initialised
        return np.nan


def _device_segments(dev: torch.device) -> float:
    """cudaMalloc'd segments so far by the device caching allocator (NaN if unknown)."""
    try:
        return float(torch.cuda.memory_stats(dev).get("segment.all.allocated", np.nan))
    except Exception:  # noqa: BLE001
        return np.nan


class Timer:
    """Times one callable: CUDA events and a synchronised host clock, plus allocator
    counter deltas. On the CPU, events and counters are NaN."""

    def __init__(self, dev: torch.device, clock: Callable[[], float] = time.perf_counter) -> None:
        self.dev, self.clock = dev, clock
        self.cuda = dev.type == "cuda"
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
        cuda = self.cuda
        # Before CUDA starts (the forum's first copy) there is nothing to wait for, and
        # synchronising would start the context outside the timed region.
        live = cuda and torch.cuda.is_initialized()
        if live:
            torch.cuda.synchronize(self.dev)
        h0 = _host_allocs() if live else (0.0 if cuda else np.nan)
        d0 = _device_segments(self.dev) if live else (0.0 if cuda else np.nan)
        t0 = self.clock()
        if cuda:
            self.start.record()
        out = fn()
        if cuda:
            self.end.record()
            torch.cuda.synchronize(self.dev)
        t1 = self.clock()
        rec = {
            "wall_ms": (t1 - t0) * 1e3,
            "event_ms": self.start.elapsed_time(self.end) if cuda else np.nan,
            "host_allocs": _host_allocs() - h0 if cuda else np.nan,
            "device_allocs": _device_segments(self.dev) - d0 if cuda else np.nan,
        }
        return out, rec


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in msg or "can't allocate memory" in msg or isinstance(exc, MemoryError)
    )


def release_memory(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()


def empty_host_cache() -> None:
    """Free every cached pinned block of PyTorch's caching host allocator."""
    fn = getattr(torch._C, "_host_emptyCache", None)
    if fn is None:
        raise RuntimeError("this PyTorch has no torch._C._host_emptyCache()")
    fn()


def _progress(total: int, initial: int, desc: str, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, desc=desc, unit="copy", file=sys.stderr, dynamic_ncols=True)


def resolve_device(device: str | torch.device) -> torch.device:
    """A ``torch.device`` for ``'cpu'``, ``'cuda'`` or ``'cuda:N'``, checked.

    Raises ``RuntimeError`` (CUDA missing) or ``ValueError`` (bad name or index)
    with one line saying what to do.
    """
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"h2dlab measures copies to cuda (or host copies with cpu), not {dev.type}")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "CUDA is not available on this machine: use --device cpu to time host copies, "
            "or replay the recorded data (h2dlab explain h200_sweep)"
        )
    n = torch.cuda.device_count()
    idx = 0 if dev.index is None else dev.index
    if idx >= n:
        raise ValueError(f"there is no {dev.type}:{idx}: this machine has {n} CUDA device(s), 0..{n - 1}")
    return torch.device("cuda", idx)


def check_memory(max_bytes: int, dev: torch.device, copies_host: int = 2, gpu: bool = True) -> None:
    """Refuse, before allocating, a size that cannot fit in host or GPU memory."""
    avail = mem_available_bytes()
    need = copies_host * max_bytes
    if avail is not None and need > avail:
        raise MemoryError(
            f"the largest size, {fmt_bytes(max_bytes)}, needs about {fmt_bytes(need)} of host memory "
            f"(source and a staging copy) but only {fmt_bytes(avail)} is available: choose smaller sizes"
        )
    if gpu and dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        if max_bytes > free:
            raise MemoryError(
                f"the largest size, {fmt_bytes(max_bytes)}, does not fit in the {fmt_bytes(free)} free "
                f"of {fmt_bytes(total)} on {dev}: choose smaller sizes"
            )


def _tile(block: torch.Tensor, n: int) -> torch.Tensor:
    """A new tensor of ``n`` elements filled with ``block`` repeated: every page touched,
    random-looking content, at memcpy speed."""
    out = torch.empty(n, dtype=block.dtype)
    for off in range(0, n, block.numel()):
        k = min(block.numel(), n - off)
        out[off : off + k].copy_(block[:k])
    return out


def random_source(nbytes: int, seed: int) -> torch.Tensor:
    """A pageable buffer of random bytes (a random 16 MiB block tiled: fast, and every page touched)."""
    gen = torch.Generator().manual_seed(seed)
    return _tile(
        torch.randint(0, 256, (min(nbytes, 16 * 1024**2),), dtype=torch.uint8, generator=gen), nbytes
    )


# --- plans ----------------------------------------------------------------------------


def plan_sweep(
    strategy_names: list[str],
    sizes: list[int],
    reps: int,
    warmup: int,
    order: str = "shuffled",
    seed: int = 0,
    reps_large: int | None = None,
    large_bytes: int = 1024**3,
) -> list[dict[str, Any]]:
    """The planned rows, in execution order.

    ``shuffled``: cells (strategy, size) in a random order drawn from ``seed``; within a
    cell the warm-ups run first, then the timed reps, back to back. ``ascending``: the
    same, cells by size. ``interleaved``: every cell's warm-ups first (cells shuffled),
    then the timed reps in rounds, each round visiting every cell once in a fresh random
    order, so that a slowdown lasting a while is spread over many sizes instead of
    filling one cell, where its median would hide it.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    cells = [(s, n) for n in sorted(sizes) for s in strategy_names]
    rng = random.Random(seed)
    if order != "ascending":
        rng.shuffle(cells)

    def n_reps(n: int) -> int:
        return reps if reps_large is None or n < large_bytes else reps_large

    rows = []
    if order == "interleaved":
        for s, n in cells:
            rows += [{"strategy": s, "size_bytes": n, "rep": w, "warmup": True} for w in range(warmup)]
        for i in range(max(n_reps(n) for _, n in cells)):
            round_ = [c for c in cells if i < n_reps(c[1])]
            rng.shuffle(round_)
            rows += [{"strategy": s, "size_bytes": n, "rep": i, "warmup": False} for s, n in round_]
    else:
        for s, n in cells:
            rows += [{"strategy": s, "size_bytes": n, "rep": w, "warmup": True} for w in range(warmup)]
            rows += [{"strategy": s, "size_bytes": n, "rep": i, "warmup": False} for i in range(n_reps(n))]
    for i, row in enumerate(rows):
        row["order"] = i
    return rows


def _check_resume(done: pd.DataFrame, planned: list[dict[str, Any]]) -> None:
    if len(done) > len(planned):
        raise ValueError(f"cannot resume: the file holds {len(done)} rows but the plan has {len(planned)}")
    for rec, want in zip(done.to_dict("records"), planned, strict=False):
        if (rec["strategy"], int(rec["size_bytes"]), int(rec["rep"]), bool(rec["warmup"])) != (
            want["strategy"],
            want["size_bytes"],
            want["rep"],
            want["warmup"],
        ):
            raise ValueError(
                "cannot resume: the rows on disk do not follow this plan; give the same "
                "--sizes, --strategies, --reps, --warmup, --order and --seed as the first run"
            )


def sweep(
    strategies_: Iterable[str] | None = None,
    sizes: Iterable[int] | None = None,
    *,
    device: str | torch.device = "cuda",
    reps: int = 10,
    warmup: int = 2,
    order: str = "shuffled",
    seed: int = 0,
    empty_cache: bool = False,
    empty_host_cache_each_size: bool = False,
    reps_large: int | None = None,
    dtype: torch.dtype = torch.uint8,
    out: str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
    argv: list[str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    stop: _StopFlag | None = None,
    on_row: Callable[[int], None] | None = None,
    before_cell: Callable[[], None] | None = None,
) -> pd.DataFrame:
    """Time each planned copy once and return the measurement table.

    Parameters
    ----------
    strategies_
        Registry names (default: every strategy available on ``device``).
    sizes
        Payload sizes in bytes (default: powers of two 1 KiB - 64 MiB).
    device
        ``'cuda'``, ``'cuda:N'`` or ``'cpu'`` (host copies; CUDA-only strategies are
        recorded as unavailable).
    reps, warmup
        Timed repetitions and labelled warm-ups per (strategy, size) cell.
    order
        ``'shuffled'`` (cells in a seeded random order), ``'ascending'``, or
        ``'interleaved'`` (timed reps in shuffled rounds across cells; see plan_sweep).
    empty_cache
        Call ``torch.cuda.empty_cache()`` before every copy (untimed).
    empty_host_cache_each_size
        Free PyTorch's cached pinned blocks before each cell (untimed).
    reps_large
        Timed repetitions for sizes >= 1 GiB (default: ``reps``).
    out
        Where to write the table (.csv, .csv.gz, .parquet, .xlsx) and its env.json.
        Rows are flushed to ``<out>.partial.csv`` as they are measured.
    resume
        Continue the run already in ``out`` (same plan, same run_id).
    stop
        A stop flag (set its ``signum`` to end the sweep after the copy in flight).
    on_row
        Called with the number of rows measured so far after every row.
    before_cell
        Called before each (strategy, size) cell: concurrent runs pass a barrier here
        so that every process starts each size together.

    Returns
    -------
    pandas.DataFrame
        One row per planned copy (DESIGN.md's table); ``df.attrs['env']`` the
        fingerprint, ``df.attrs['stopped']`` True if a signal stopped the sweep.
    """
    dev = resolve_device(device)
    names = (
        list(strategies_)
        if strategies_ is not None
        else [s for s in strategies.names() if not strategies.available(s, dev)]
    )
    for s in names:
        if s not in strategies.REGISTRY:
            raise KeyError(f"unknown strategy {s!r}; choose from {', '.join(strategies.names())}")
    sizes = list(sizes) if sizes is not None else [2**k for k in range(10, 27)]
    if reps < 1 or warmup < 0 or (reps_large is not None and reps_large < 1):
        raise ValueError("--reps must be at least 1 and --warmup at least 0")
    item = torch.empty((), dtype=dtype).element_size()
    bad = [n for n in sizes if n % item]
    if bad:
        raise ValueError(f"size {bad[0]} is not a multiple of {dtype}'s {item} bytes")
    planned = plan_sweep(names, sizes, reps, warmup, order, seed, reps_large)
    spec = {
        "kind": "sweep",
        "strategies": names,
        "sizes": sizes,
        "reps": reps,
        "warmup": warmup,
        "reps_large": reps_large,
        "order": order,
        "seed": seed,
        "empty_cache": empty_cache,
        "empty_host_cache_each_size": empty_host_cache_each_size,
        "dtype": str(dtype).replace("torch.", ""),
        "device": str(dev),
    }
    check_memory(max(sizes), dev)

    run = _Run(out, spec, planned, resume, argv)
    stop = stop or _StopFlag()
    timer = Timer(dev, clock)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)  # start the context outside any timed copy
    src = random_source(max(sizes), seed)
    bar = _progress(len(planned), run.start_at, f"measure {dev}", progress)
    rows_left = planned[run.start_at :]
    checked: set[tuple[str, int]] = set()  # cells whose first copy was compared bytewise
    try:
        with stop.installed():
            i = 0
            while i < len(rows_left):
                if stop:
                    break
                key = (rows_left[i]["strategy"], rows_left[i]["size_bytes"])
                j = i
                while j < len(rows_left) and (rows_left[j]["strategy"], rows_left[j]["size_bytes"]) == key:
                    j += 1
                cell_rows, i = rows_left[i:j], j
                if before_cell is not None:
                    before_cell()
                _measure_cell(
                    cell_rows,
                    src,
                    dev,
                    dtype,
                    timer,
                    run,
                    empty_cache,
                    empty_host_cache_each_size,
                    stop,
                    bar,
                    checked,
                )
                if on_row is not None:
                    on_row(len(run.rows))
    finally:
        if bar is not None:
            bar.close()
    return run.finish(stop, dev)


def _measure_cell(cell_rows, src, dev, dtype, timer, run, empty_cache, empty_host, stop, bar, checked):
    name, size = cell_rows[0]["strategy"], cell_rows[0]["size_bytes"]
    x = src[:size].view(dtype)
    base = {
        "strategy": name,
        "size_bytes": size,
        "shape": str(tuple(x.shape)),
        "dtype": str(dtype).replace("torch.", ""),
        "empty_cache": bool(empty_cache),
    }
    reason = strategies.available(name, dev)
    strat = None
    if not reason:
        try:
            if empty_host and dev.type == "cuda":
                torch.cuda.synchronize(dev)
                empty_host_cache()
            strat = strategies.get(name)
            strat.prepare(x, dev)
        except Exception as exc:  # noqa: BLE001 - recorded, then the sweep goes on
            reason = _error_text(exc)
            strat = None
            release_memory(dev)
    for plan_row in cell_rows:
        if stop:
            break
        row = {
            **base,
            "order": plan_row["order"],
            "rep": plan_row["rep"],
            "warmup": plan_row["warmup"],
            "t_s": run.elapsed(),
            "wall_ms": np.nan,
            "event_ms": np.nan,
            "host_allocs": np.nan,
            "device_allocs": np.nan,
            "error": reason,
        }
        if not reason:
            try:
                if empty_cache and dev.type == "cuda":
                    torch.cuda.empty_cache()
                row["t_s"] = run.elapsed()
                y, rec = timer(lambda: strat.copy(x))
                row.update(rec)
                if (name, size) not in checked:  # bytewise check of the first copy of each cell
                    checked.add((name, size))
                    if not torch.equal(
                        y.cpu().reshape(-1).view(torch.uint8), x.reshape(-1).view(torch.uint8)
                    ):
                        row["error"] = "wrong result: the copy differs from the source"
                del y
            except Exception as exc:  # noqa: BLE001
                if not is_oom(exc) and not isinstance(exc, RuntimeError):
                    raise
                reason = row["error"] = _error_text(exc)
                release_memory(dev)
        run.write(row)
        if bar is not None:
            bar.update(1)
    if strat is not None:
        strat.cleanup()


def _error_text(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    kind = "OOM" if is_oom(exc) else type(exc).__name__
    return f"{kind}: {first}"[:300]


class _Run:
    """Output bookkeeping shared by sweep() and forum(): run id, partial file, resume."""

    def __init__(self, out, spec, planned, resume, argv) -> None:
        self.out = Path(out) if out is not None else None
        self.spec, self.planned, self.argv = spec, planned, argv
        self.rows: list[dict[str, Any]] = []
        self.run_id = uuid.uuid4().hex[:12]
        self.start_at = 0
        self.t_offset = 0.0
        done = None
        if resume:
            if self.out is None:
                raise ValueError("--resume needs --out: the file of the run to continue")
            done, env = existing_rows(self.out)
            if done is None:
                raise ValueError(f"nothing to resume: {self.out} has not been started")
            if env and env.get("spec") and env["spec"] != spec:
                raise ValueError(
                    "cannot resume: this command's options differ from the first run's "
                    f"(recorded in {datasets.env_path(self.out)})"
                )
            _check_resume(done, planned)
            if len(done):
                self.run_id = str(done["run_id"].iloc[0])
                self.t_offset = float(np.nanmax(done["t_s"].to_numpy(dtype=float), initial=0.0)) + 1.0
            self.start_at = len(done)
            self.rows = done.to_dict("records")
        self.writer = RowWriter(self.out, done if resume else None) if self.out is not None else None
        self.t0 = time.perf_counter()
        if self.out is not None:
            # Written at once, so an interrupted run can be resumed; completed at the end.
            datasets.write_env(self._env(gpu=False), datasets.env_path(self.out))

    def elapsed(self) -> float:
        return self.t_offset + time.perf_counter() - self.t0

    def _env(self, gpu: bool) -> dict[str, Any]:
        env = collect_env(argv=self.argv, gpu=gpu)
        env["spec"] = self.spec
        env["run_id"] = self.run_id
        env["planned_rows"] = len(self.planned)
        return env

    def write(self, row: dict[str, Any]) -> None:
        row["run_id"] = self.run_id
        self.rows.append(row)
        if self.writer is not None:
            self.writer.write(row)

    def finish(self, stop: _StopFlag, dev: torch.device) -> pd.DataFrame:
        env = self._env(gpu=dev.type == "cuda")
        env["measured_rows"] = len(self.rows)
        env["stopped_by_signal"] = stop.signum
        if self.writer is not None:
            df = self.writer.finish(env)
        else:
            df = datasets.validate(pd.DataFrame(self.rows) if self.rows else datasets.empty_table())
        df = df.sort_values("order", kind="stable").reset_index(drop=True) if len(df) else df
        df.attrs["env"] = env
        df.attrs["stopped"] = bool(stop)
        df.attrs["planned_rows"] = len(self.planned)
        return df


# --- the forum's protocol --------------------------------------------------------------


def plan_forum(
    order: str = "ascending", seed: int = 0, seqs: list[int] | None = None
) -> list[dict[str, Any]]:
    """Three planned rows per seq (pin_memory, pinned_to_cuda, direct_to_cuda)."""
    if order not in ("shuffled", "ascending"):
        raise ValueError(f"order must be shuffled or ascending, not {order!r}")
    seqs = list(seqs if seqs is not None else FORUM_SEQS)
    if order == "shuffled":
        random.Random(seed).shuffle(seqs)
    rows = []
    for seq in seqs:
        n = int(np.prod(forum_shape(seq))) * 2
        for s in ("pin_memory", "pinned_to_cuda", "direct_to_cuda"):
            rows.append({"strategy": s, "size_bytes": n, "rep": 0, "warmup": False, "seq": seq})
    for i, r in enumerate(rows):
        r["order"] = i
    return rows


def forum(
    out: str | Path | None = None,
    *,
    order: str = "ascending",
    seed: int = 0,
    device: str | torch.device = "cuda",
    seqs: list[int] | None = None,
    resume: bool = False,
    progress: bool = True,
    argv: list[str] | None = None,
    stop: _StopFlag | None = None,
) -> pd.DataFrame:
    """The forum's experiment, re-implemented, as tidy rows.

    For each seq: a fresh random float16 tensor of shape (24, 2, 1, seq, 4096) is
    pinned (``pin_memory``), the pinned tensor copied to the GPU (``pinned_to_cuda``),
    both freed and ``empty_cache()`` called; then a fresh tensor is copied straight to
    the GPU (``direct_to_cuda``) and ``empty_cache()`` called again. Each step is timed
    once, as the forum did, but with CUDA events beside the host clock and the
    allocators' counters. Nothing touches CUDA before the first timed step, so the
    first row carries the context start-up, as the forum's did. Run it in a fresh
    process for that reason.
    """
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            "the forum protocol pins memory and needs CUDA, which this machine lacks: "
            "replay the recorded runs instead (h2dlab explain h200_forum)"
        )
    dev = resolve_device(device)
    planned = plan_forum(order, seed, seqs)
    spec = {"kind": "forum", "order": order, "seed": seed, "seqs": seqs or "forum", "device": str(dev)}
    # No GPU query here: that would start CUDA before the first timed step.
    check_memory(max(r["size_bytes"] for r in planned), dev, copies_host=3, gpu=False)
    run = _Run(out, spec, planned, resume, argv)
    stop = stop or _StopFlag()
    timer = Timer(dev)
    torch.manual_seed(seed)
    bar = _progress(len(planned), run.start_at, "forum", progress)
    todo = planned[run.start_at :]
    try:
        with stop.installed():
            i = 0
            while i < len(todo) and not stop:
                group = [r for r in todo[i : i + 3] if r["seq"] == todo[i]["seq"]]
                i += len(group)
                _forum_size(group, dev, timer, run, bar)
    finally:
        if bar is not None:
            bar.close()
    return run.finish(stop, dev)


def _fresh_half(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A new float16 tensor of random values in [0, 1), as the forum's ``torch.rand(...).half()``.

    A random block is tiled rather than drawn element by element: the forum's
    sequential RNG would make each run minutes long, and a copy's speed does not
    depend on the values. What matters, a fresh allocation whose pages are all
    touched before the copy, is the same.
    """
    n = int(np.prod(shape))
    g = torch.Generator().manual_seed(seed)
    return _tile(torch.rand(min(n, 2**22), generator=g).half(), n).view(shape)


def _forum_size(group, dev, timer, run, bar) -> None:
    seq = group[0]["seq"]
    shape = forum_shape(seq)
    want = {r["strategy"]: r for r in group}

    def emit(strategy: str, rec: dict[str, float], err: str = "", t_s: float = np.nan) -> None:
        if strategy not in want:
            return
        p = want[strategy]
        row = {
            "order": p["order"],
            "strategy": strategy,
            "size_bytes": p["size_bytes"],
            "shape": str(shape),
            "dtype": "float16",
            "rep": 0,
            "warmup": False,
            "t_s": t_s,
            "wall_ms": np.nan,
            "event_ms": np.nan,
            "host_allocs": np.nan,
            "device_allocs": np.nan,
            "empty_cache": strategy == "direct_to_cuda" or (strategy == "pin_memory" and p["order"] > 0),
            "error": err,
        }
        row.update(rec)
        run.write(row)
        if bar is not None:
            bar.update(1)

    target = dev
    try:
        if "pin_memory" in want or "pinned_to_cuda" in want:
            x = _fresh_half(shape, seq)
            t = run.elapsed()
            xp, rec = timer(x.pin_memory)
            emit("pin_memory", rec, t_s=t)
            t = run.elapsed()
            xc, rec = timer(partial(xp.to, target))
            emit("pinned_to_cuda", rec, t_s=t)
            del x, xp, xc
            torch.cuda.empty_cache()
        y = _fresh_half(shape, seq + 1)
        t = run.elapsed()
        yc, rec = timer(partial(y.to, target))
        emit("direct_to_cuda", rec, t_s=t)
        del y, yc
        torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001
        if not is_oom(exc):
            raise
        done = {r["strategy"] for r in run.rows if r.get("order") in {p["order"] for p in group}}
        for s in want:
            if s not in done:
                emit(s, {}, _error_text(exc))
        release_memory(dev)


# --- timelines: a copy beside compute, for the primer --------------------------------

#: Columns of an overlap timeline (not the measurement table: one row per operation).
TIMELINE_COLUMNS = ["run_id", "scenario", "rep", "op", "stream", "start_ms", "end_ms", "host_return_ms"]

SCENARIOS = {
    "serial_pinned": "pinned copy, then compute, both on the default stream",
    "overlap_pinned": "pinned copy on a side stream (non_blocking) while compute runs on the default stream",
    "overlap_pageable": "pageable copy on a side stream (non_blocking=True) while compute runs on the default stream",
}


def overlap(
    size_bytes: int = 256 * 1024**2,
    *,
    reps: int = 5,
    device: str | torch.device = "cuda",
    argv: list[str] | None = None,
) -> pd.DataFrame:
    """Timelines of a host-to-device copy beside independent compute, per scenario.

    Every operation is bracketed by CUDA events; times are ms after a start event
    recorded on the default stream once the device is idle, and ``host_return_ms``
    is when the launching call returned to Python (host clock, same origin). A
    pageable copy with ``non_blocking=True`` is staged by the driver, so its call
    returns late and the compute launched after it cannot overlap it: the timelines
    show this rather than assert it.
    """
    dev = resolve_device(device)
    if dev.type != "cuda":
        raise RuntimeError("overlap timelines need CUDA: use --device cuda, or replay data/h200_overlap")
    torch.cuda.set_device(dev)
    pageable = random_source(size_bytes, 1)
    pinned_src = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    pinned_src.copy_(pageable)
    dst = torch.empty(size_bytes, dtype=torch.uint8, device=dev)
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    side = torch.cuda.Stream(dev)
    main = torch.cuda.current_stream(dev)

    def compute(k: int) -> None:
        for _ in range(k):
            torch.mm(a, a)

    # Calibrate the compute to take about as long as one pinned copy.
    for _ in range(3):
        compute(5)
        dst.copy_(pinned_src, non_blocking=True)
    torch.cuda.synchronize(dev)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    dst.copy_(pinned_src, non_blocking=True)
    e1.record()
    torch.cuda.synchronize(dev)
    copy_ms = e0.elapsed_time(e1)
    e0.record()
    compute(10)
    e1.record()
    torch.cuda.synchronize(dev)
    k = max(1, round(10 * copy_ms / max(e0.elapsed_time(e1), 1e-3)))

    run_id = uuid.uuid4().hex[:12]
    rows = []
    for rep in range(reps):
        for scenario in SCENARIOS:
            torch.cuda.synchronize(dev)
            ev = {n: torch.cuda.Event(enable_timing=True) for n in ("t0", "c0", "c1", "k0", "k1")}
            copy_stream = main if scenario == "serial_pinned" else side
            src = pageable if scenario == "overlap_pageable" else pinned_src
            h0 = time.perf_counter()
            ev["t0"].record(main)
            copy_stream.wait_stream(main)
            with torch.cuda.stream(copy_stream):
                ev["c0"].record(copy_stream)
                dst.copy_(src, non_blocking=True)
                ev["c1"].record(copy_stream)
            h_copy = time.perf_counter()
            with torch.cuda.stream(main):
                ev["k0"].record(main)
                compute(k)
                ev["k1"].record(main)
            h_comp = time.perf_counter()
            torch.cuda.synchronize(dev)
            t0 = ev["t0"]
            # A host-clock offset between the start event and the host origin is
            # negligible here: the device is idle when t0 is recorded.
            for op, s0, s1, stream, hret in (
                ("copy", "c0", "c1", "default" if copy_stream is main else "side", h_copy),
                ("compute", "k0", "k1", "default", h_comp),
            ):
                rows.append(
                    {
                        "run_id": run_id,
                        "scenario": scenario,
                        "rep": rep,
                        "op": op,
                        "stream": stream,
                        "start_ms": t0.elapsed_time(ev[s0]),
                        "end_ms": t0.elapsed_time(ev[s1]),
                        "host_return_ms": (hret - h0) * 1e3,
                    }
                )
    df = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    env = collect_env(argv=argv)
    env.update(
        spec={
            "kind": "overlap",
            "size_bytes": size_bytes,
            "reps": reps,
            "matmuls": k,
            "matmul": "4096x4096 bf16",
        },
        run_id=run_id,
        scenarios=SCENARIOS,
    )
    df.attrs["env"] = env
    return df


# --- several GPUs at once ----------------------------------------------------------------


def parse_gpus(spec: str, available: int) -> tuple[list[int], list[int]]:
    """``'all'``, ``'0,1'``, ``'N'`` (GPUs 0..N-1) or ``'1..N'`` (sweep 1 to N GPUs copying at
    once). Returns (device indices, world sizes to run)."""
    spec = str(spec).strip()
    try:
        if spec == "all":
            ids, worlds = list(range(available)), [available]
        elif ".." in spec:
            lo, hi = (int(v) for v in spec.split("..", 1))
            if lo < 1 or hi < lo:
                raise ValueError
            ids, worlds = list(range(hi)), list(range(lo, hi + 1))
        elif "," in spec:
            ids = [int(v) for v in spec.split(",")]
            worlds = [len(ids)]
        else:
            n = int(spec)
            if n < 1:
                raise ValueError
            ids, worlds = list(range(n)), [n]
    except ValueError:
        raise ValueError(f"cannot read --gpus {spec!r}: write all, 0,1, N or 1..N") from None
    if len(set(ids)) != len(ids):
        raise ValueError(f"--gpus {spec!r} names a GPU twice")
    bad = [i for i in ids if i >= available or i < 0]
    if bad:
        raise ValueError(
            f"--gpus {spec!r}: there is no device {bad[0]}; this machine has {available} (0..{available - 1})"
        )
    return ids, worlds


def _nearest_cpus(index: int) -> list[int] | None:
    """CPUs nearest GPU ``index`` according to NVML, or None where it cannot say."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        words = pynvml.nvmlDeviceGetCpuAffinity(h, (os.cpu_count() + 63) // 64)
        cpus = [w * 64 + b for w, mask in enumerate(words) for b in range(64) if mask >> b & 1]
        allowed = os.sched_getaffinity(0)
        cpus = [c for c in cpus if c in allowed]
        return cpus or None
    except Exception:  # noqa: BLE001 - no NVML, no topology: leave the affinity alone
        return None


def _concurrent_worker(
    rank: int, ids: list[int], device_type: str, init_file: str, folder: str, kwargs: dict
) -> None:
    import torch.distributed as dist

    world = len(ids)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        device = f"cuda:{ids[rank]}" if device_type == "cuda" else "cpu"
        cpus = _nearest_cpus(ids[rank]) if device_type == "cuda" else None
        if cpus:
            os.sched_setaffinity(0, cpus)
        sweep(
            device=device,
            out=Path(folder) / f"rank{rank}.csv",
            before_cell=dist.barrier,
            progress=kwargs.pop("progress", False) and rank == 0,
            **kwargs,
        )
        (Path(folder) / f"rank{rank}.cpus").write_text(",".join(map(str, cpus or [])))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def concurrent(
    strategies_: list[str] | None,
    sizes: list[int],
    *,
    gpus: str = "all",
    device: str = "cuda",
    out: str | Path,
    argv: list[str] | None = None,
    progress: bool = False,
    **kwargs,
) -> pd.DataFrame:
    """The sweep on several GPUs at once: one process per GPU (torch.multiprocessing),
    each pinned to the CPUs nearest its GPU where NVML says, all starting each
    (strategy, size) cell together through a torch.distributed barrier (gloo). With
    ``gpus='1..N'`` it runs 1, 2, ..., N GPUs in turn. Rows carry ``gpu`` (device index)
    and ``world`` (GPUs copying at once). ``device='cpu'`` runs the same code path with
    host copies, for machines without GPUs (``gpus`` then counts processes).
    """
    import tempfile

    import torch.multiprocessing as mp

    dev_type = torch.device(device).type
    if dev_type == "cuda":
        resolve_device("cuda")
        available = torch.cuda.device_count()
    else:
        available = max(1, os.cpu_count() or 1)
    ids, worlds = parse_gpus(gpus, available)
    if kwargs.get("resume"):
        raise ValueError("--resume is not supported with --gpus: re-run the concurrent sweep")
    out = Path(out)
    frames, cpu_map = [], {}
    run_id = uuid.uuid4().hex[:12]
    for world in worlds:
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.w{world}.") as folder:
            init_file = str(Path(folder) / "rendezvous")
            kw = {"strategies_": strategies_, "sizes": sizes, "progress": progress, **kwargs}
            mp.spawn(
                _concurrent_worker,
                args=(ids[:world], dev_type, init_file, folder, kw),
                nprocs=world,
                join=True,
            )
            for rank in range(world):
                df = datasets.read(Path(folder) / f"rank{rank}.csv")
                df["run_id"] = run_id
                df["gpu"] = ids[rank] if dev_type == "cuda" else rank
                df["world"] = world
                frames.append(df)
                cpu_map[f"world{world}_rank{rank}"] = (Path(folder) / f"rank{rank}.cpus").read_text()
    table = pd.concat(frames, ignore_index=True)
    env = collect_env(argv=argv, gpu=dev_type == "cuda")
    env["spec"] = {
        "kind": "concurrent",
        "gpus": ids,
        "worlds": worlds,
        "strategies": strategies_,
        "sizes": sizes,
        "device": dev_type,
        **{k: v for k, v in kwargs.items() if k != "dtype"},
    }
    env["run_id"] = run_id
    env["cpu_affinity_per_rank"] = cpu_map
    env["measured_rows"] = len(table)
    datasets.save(table, out, env=env)
    table.attrs["env"] = env
    return table
