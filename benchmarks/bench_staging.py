"""The staged copy up close, for bench_transfer.py: tuning, the bounds of any staged copy, a
loop of new batches, and a per-chunk timeline. Shared helpers (timing, sources) live here too.
Every timing is the synchronised host clock around one call (:class:`WallTimer`: the timed
region of h2dlab's Timer, without its evidence reads)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from bench_analysis import bound_figures, cfg_name, cfg_of, pick, plan_candidates, plan_name  # noqa: E402  (benchmarks/ is on sys.path)

from h2dlab.measure.device import random_source  # noqa: E402
from h2dlab.transfer import fastpath as transfer  # noqa: E402
from h2dlab.transfer import stager as stg  # noqa: E402

__all__ = [
    "DEV",
    "T0",
    "WallTimer",
    "bounds",
    "log",
    "make",
    "repeated",
    "src",
    "stats",
    "timed",
    "timeline",
    "tune",
    "tune_sizes",
]

KiB, MiB, GiB = 1024, 1024**2, 1024**3
STREAM_BYTES = GiB  # the streaming DMA's buffer while the host copy is timed under DMA
DEV = torch.device("cuda", 0)
T0 = time.perf_counter()
_SRC: dict[tuple[int, int], torch.Tensor] = {}


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def src(n: int, k: int = 0) -> torch.Tensor:
    """Pageable random bytes, built once per (size, k)."""
    if (n, k) not in _SRC:
        _SRC[(n, k)] = random_source(n, (n + 7919 * k) % 9973)
    return _SRC[(n, k)]


def stats(ms: list[float], nbytes: int) -> dict:
    q25, med, q75 = np.percentile(ms, [25, 50, 75])
    return {"size_bytes": nbytes, "ms_median": med, "ms_q25": q25, "ms_q75": q75, "ms_min": min(ms),
            "ms_max": max(ms), "reps": len(ms), "gbps_median": nbytes / med / 1e6}  # fmt: skip


class WallTimer:
    """h2dlab.measure.timing.Timer's timed region (synchronise, clock, event, call, event, synchronise,
    clock) without the evidence it reads around it (allocator statistics, page faults, NVML):
    this benchmark uses only ``wall_ms``, and those reads cost a noticeable share of a grid
    that times thousands of ~50 us copies."""

    def __init__(self, dev: torch.device) -> None:
        self.dev, self.cuda = dev, dev.type == "cuda"
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn) -> tuple[object, dict[str, float]]:
        if self.cuda:
            torch.cuda.synchronize(self.dev)
        t0 = time.perf_counter()
        if self.cuda:
            self.start.record()
        out = fn()
        if self.cuda:
            self.end.record()
            torch.cuda.synchronize(self.dev)
        return out, {"wall_ms": (time.perf_counter() - t0) * 1e3}


def timed(fns: dict, reps: int, warmup: int, timer: WallTimer, prime: bool = False) -> dict[str, list[float]]:
    """Wall ms per call of each fn, the fns alternating (order reversed every other round).

    ``prime``: each timed call comes right after an untimed call of the same fn, so that every
    fn is timed after itself (the state a loop of such copies sees), not after whichever fn ran
    before it. Unprimed, the alternation times each fn after the other fn half the time: in the
    2026-11-30 run on the 32-core host to_device's 256 MiB times fell in two groups (~6.2 and
    ~7.3 ms, about half of them right after a 29 ms ``.to()``), and so did the host copy's in
    the bounds rotation (2.7 ms after itself, 4.1-4.3 ms after a DMA-only call)."""
    out = {k: [] for k in fns}
    for i in range(warmup + reps):
        for k, fn in list(fns.items())[:: 1 if i % 2 == 0 else -1]:
            if prime:
                fn()  # its result is dropped at once; the timer synchronises before timing
            y, rec = timer(fn)
            del y
            if i >= warmup:
                out[k].append(rec["wall_ms"])
    return out


#: Stage 1 of the tuning: (engine, threads, slot MiB, slots per thread). The "torch" engine
#: copies each chunk over PyTorch's intra-op threads (1 staging thread, or 2 that overlap one
#: thread's DMA issue with the other's copy); "numpy" copies with each staging thread.
TUNE_GRID = tuple(("torch", t, c, k) for t in (1, 2) for c in (16, 32, 64) for k in (2, 3)) + (
    ("torch", 1, 128, 2),  # the 2026-11-30 timeline: small chunks' DMAs ran slowest, 32 MiB beat 8 and 16
    ("numpy", 4, 16, 2),
    ("numpy", 8, 16, 2),
)
#: Stage 2: the best of stage 1 with other (head_split, tail_split) cuts of the first chunk and
#: the last wave: the 2026-11-30 timeline on the 32-core host had the DMA as the bottleneck and
#: the 8 MiB pieces' DMAs at 28-32 GB/s against 44-54 for whole 32 MiB slots. (4, 1): only the
#: first chunk cut (the first DMA starts early), the rest whole slots; (1, 1): whole slots only.
TUNE_SPLITS = ((4, 2), (4, 1), (2, 1), (1, 1))
TUNE_MIN_STEP = 8 * MiB  # stage 3: the best with no chunk below this (fewer, larger DMAs)
GIVE_UP = 0.5  # a setting below half the best rate seen at a size is not timed at larger sizes


def make(cfg: dict) -> stg.Stager:
    return stg.Stager(DEV, **cfg_of(cfg))


def _tune_one(timer, sizes, cfg, best_at) -> dict:
    """One configuration at every tuning size (same ring), with the equal-bytes rate: the
    sizes' bytes over the sum of their median times scaled to equal bytes. Given up (rate 0)
    when it runs below GIVE_UP of the best rate seen so far at a size (``best_at``)."""
    row = {**cfg_of(cfg), "by_size": []}
    with make(cfg) as st:
        for n in sizes:
            x = src(n)
            row["by_size"].append(stats(timed({"s": lambda st=st, x=x: st(x)}, 5, 1, timer)["s"], n))
            g = row["by_size"][-1]["gbps_median"]
            if g < GIVE_UP * best_at.get(n, 0.0):
                row["given_up_at"] = n
                break
            best_at[n] = max(g, best_at.get(n, 0.0))
    if "given_up_at" in row:
        row["gbps_median"] = 0.0
    else:
        per_byte_ms = sum(r["ms_median"] / r["size_bytes"] for r in row["by_size"]) / len(sizes)
        row["gbps_median"] = 1 / per_byte_ms / 1e6
    what = ", ".join(f"{r['size_bytes'] // MiB} MiB {r['gbps_median']:.1f}" for r in row["by_size"])
    log(f"tune {cfg_name(row)}: {what} GB/s" + (" (given up)" if "given_up_at" in row else ""))
    return row


def tune(timer: WallTimer, cores: int, sizes: tuple[int, ...]) -> list[dict]:
    """Stagers over TUNE_GRID, each timed at every one of ``sizes`` (so a setting good at
    4 GiB but poor at 256 MiB is not picked), then the best with each of TUNE_SPLITS, then the
    best so far with TUNE_MIN_STEP, then the best so far on huge pages. Each row is CFG_KEYS,
    ``by_size`` and ``gbps_median``."""
    best_at: dict[int, float] = {}
    grid = [
        {"engine": e, "threads": t, "chunk_bytes": c * MiB, "slots": k}
        for e, t, c, k in TUNE_GRID
        if t <= cores
    ]
    rows = [_tune_one(timer, sizes, c, best_at) for c in grid]
    best = cfg_of(max(rows, key=lambda r: r["gbps_median"]))
    for h, t in TUNE_SPLITS:
        if (h, t) != (best["head_split"], best["tail_split"]):
            rows.append(_tune_one(timer, sizes, {**best, "head_split": h, "tail_split": t}, best_at))
    best = cfg_of(max(rows, key=lambda r: r["gbps_median"]))
    if best["chunk_bytes"] >= 2 * TUNE_MIN_STEP:
        rows.append(_tune_one(timer, sizes, {**best, "min_step_bytes": TUNE_MIN_STEP}, best_at))
    best = cfg_of(pick(rows))
    try:  # the best again, its ring on transparent huge pages
        rows.append(_tune_one(timer, sizes, {**best, "huge_pages": True}, best_at))
    except Exception as exc:  # noqa: BLE001 - said, and the run goes on without it
        log(f"huge-page ring failed: {exc}")
    return rows


def tune_sizes(timer: WallTimer, cores: int, top: dict, sizes: tuple[int, ...], reps: int = 7) -> dict:
    """Every plan of bench_analysis.plan_candidates(top) at each of ``sizes``, on one ring that
    runs them all (top's slots and pages), the plans alternating within a size, each timed call
    right after an untimed call of itself (:func:`timed`), medians of ``reps``. Returns
    ``{"candidates", "ring", "rows"}``; a row is ``size_bytes``, ``plan``, ``name`` and the stats."""
    cands = plan_candidates(top, cores)
    threads, chunk = stg.ring_shape(cands)
    c = cfg_of(top)
    rows = []
    with stg.Stager(
        DEV, threads=threads, chunk_bytes=chunk, slots=c["slots"], huge_pages=c["huge_pages"]
    ) as st:
        for p in list(cands):  # a plan the ring refuses is said and left out, not fatal
            try:
                st.plan(p)
            except (TypeError, ValueError) as exc:
                log(f"per-size tuning leaves out {plan_name(p)}: {exc}")
                cands.remove(p)
        for n in sizes:
            x = src(n)
            fns = {i: (lambda x=x, p=p: st.to_device(x, plan=p)) for i, p in enumerate(cands)}
            ms = timed(fns, reps, 1, timer, prime=True)
            at = [
                {"size_bytes": n, "plan": cands[i], "name": plan_name(cands[i]), **stats(v, n)}
                for i, v in ms.items()
            ]
            rows += at
            best = min(at, key=lambda r: r["ms_median"])
            log(f"tune {n / MiB:7.1f} MiB: best {best['name']} {best['gbps_median']:.1f} GB/s, "
                f"top {at[0]['gbps_median']:.1f}")  # fmt: skip
    return {"candidates": cands, "ring": {"threads": threads, "chunk_bytes": chunk, "slots": c["slots"]},
            "reps": reps, "rows": rows}  # fmt: skip


def bounds(size: int, timer, cfg: dict, reps: int = 7) -> dict:
    """The bounds of a staged copy of ``size`` bytes with ``cfg``'s threads, slots and chunks,
    measured in one rotation with to_device itself (each call primed, see :func:`timed`),
    medians of ``reps``.

    Upper bound: min(host copy alone, pinned DMA alone): neither half can go faster than it
    does with the machine to itself. Lower bound: min(host copy while a pinned DMA streams,
    pinned DMA while host copies run). A staged copy moves every byte through both halves at
    the same rate, each while the other runs, so a copy that overlaps them fully reaches the
    slower of the two contended rates; the host copy under DMA alone is no bound where the
    host copy outruns the DMA (on the 32-core host it read 56.5-90.4 GB/s, above the DMA's
    ~55 alone, so "to_device >= it" could never hold). Both contended rates stay in the row
    (``host_under_dma_gbps``, ``dma_under_host_gbps``; ``lower_is`` names the smaller); the
    figures are bench_analysis.bound_figures."""
    x = src(size)
    p = torch.empty(size, dtype=torch.uint8, pin_memory=True).copy_(x)
    d = torch.empty(size, dtype=torch.uint8, device=DEV)
    side = torch.cuda.Stream(DEV)
    pb = torch.empty(STREAM_BYTES, dtype=torch.uint8, pin_memory=True)  # the streaming DMA's own buffers
    db = torch.empty(STREAM_BYTES, dtype=torch.uint8, device=DEV)
    covered = []
    with make(cfg) as st:
        host_ms = timed({"h": lambda: st.host_copy(x)}, 3, 1, timer)["h"]
        k = (
            int(np.ceil(4 * np.median(host_ms) / (STREAM_BYTES / 50e6))) + 1
        )  # DMA queued for ~4x the host copy: the priming copy, then the timed one

        def host_under_dma():
            with torch.cuda.stream(side):
                for _ in range(k):
                    db.copy_(pb, non_blocking=True)
                end = torch.cuda.Event()
                end.record(side)
            st.host_copy(x)  # primes the host copy (as every timed call here) while the DMA starts
            t0 = time.perf_counter()
            st.host_copy(x)
            t1 = time.perf_counter()
            covered.append(not end.query())  # the DMA outlasted the host copy
            side.synchronize()
            return t1 - t0

        fns = {"host_alone": lambda: st.host_copy(x), "dma_alone": lambda: d.copy_(p, non_blocking=True),
               "to_device": lambda: transfer.to_device(x, DEV)}  # fmt: skip
        ms = timed(fns, reps, 1, timer, prime=True)
        ms["host_under_dma"] = [host_under_dma() * 1e3 for _ in range(reps + 1)][1:]
        stop, spins = threading.Event(), []

        def churn():
            while not stop.is_set():
                st.host_copy(x)
                spins.append(1)

        bg = threading.Thread(target=churn)
        bg.start()
        time.sleep(0.05)
        ms["dma_under_host"] = timed({"d": lambda: d.copy_(p, non_blocking=True)}, reps, 1, timer)["d"]
        stop.set()
        bg.join()
    r = {k: stats(v, size) for k, v in ms.items()}
    g = {k: v["gbps_median"] for k, v in r.items()}
    c = cfg_of(cfg)
    n_chunks = len(stg.chunk_plan(size, c["threads"], c["chunk_bytes"], c["min_step_bytes"],
                                  head_split=c["head_split"], tail_split=c["tail_split"])) - 1  # fmt: skip
    return {"size_bytes": size, **c, "reps": reps, "chunks": n_chunks,
            **bound_figures(g), "dma_covered_host_copy": all(covered), "streaming_dma_copies": k,
            "host_copies_during_dma_timing": len(spins), **{f"{k}_gbps": v for k, v in g.items()}, "detail": r}  # fmt: skip


def repeated(size: int, steps: int, timer, cfg: dict) -> list[dict]:
    """A new pageable batch every step: .to(), to_device, pin_memory().to(), TensorDict's
    non_blocking_pin (if importable; said in the log and by the caller), a kept Stager, and
    that Stager in a non_blocking loop. Medians over ``steps`` steps."""
    batches = [src(size, k) for k in range(3 if size >= GiB else 8)]
    it = iter(range(10**9))

    def nxt():
        return batches[next(it) % len(batches)]

    methods = {"to": lambda: nxt().to(DEV), "to_device": lambda: transfer.to_device(nxt(), DEV),
               "pin_then_to": lambda: nxt().pin_memory().to(DEV, non_blocking=True)}  # fmt: skip
    try:
        from tensordict import TensorDict

        methods["tensordict"] = lambda: TensorDict({"x": nxt()}, batch_size=[]).to(
            DEV, non_blocking_pin=True, num_threads=8
        )
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        log(f"tensordict unavailable: {exc}")
    rows = []
    with make(cfg) as st:
        methods["stager"] = lambda: st(nxt())
        for name, fn in methods.items():
            ms = timed({name: fn}, steps, 1, timer)[name]
            rows.append({"method": name, "steps": steps, **stats(ms, size)})
            log(f"repeated {size // MiB} MiB/step {name:12s} {rows[-1]['gbps_median']:.1f} GB/s")

        def loop():  # non_blocking: a step's host copies overlap the previous step's last DMAs
            for _ in range(steps):
                st(nxt(), non_blocking=True)

        ms = [t / steps for t in timed({"loop": loop}, 5, 1, timer)["loop"]]
        rows.append({"method": "stager_non_blocking", "steps": steps, **stats(ms, size)})
        log(f"repeated {size // MiB} MiB/step stager, non_blocking loop {rows[-1]['gbps_median']:.1f} GB/s")
    return rows


def timeline(size: int, cfg: dict, plan: dict | None = None) -> dict:
    """One copy of ``size`` bytes with ``cfg`` (run with ``plan``: a plan of
    bench_analysis.plan_candidates; default ``cfg``'s own), per chunk: host wait/copy/queue
    times and the DMA's start and end (CUDA events), from the call's start; with a summary."""
    x = src(size)
    if plan is not None:  # a ring whose own plan is `plan`, with cfg's slots and pages
        cfg = {**cfg_of(cfg), **plan}
    with make(cfg) as st:
        for _ in range(2):
            st(x, plan=plan)
        st.timeline = []
        t0 = time.perf_counter()
        st(x, plan=plan)
        wall_ms = (time.perf_counter() - t0) * 1e3
        (t,) = st.timeline
    ms = lambda h: (h - t["t0"]) * 1e3  # noqa: E731
    chunks = [{"thread": c["thread"], "chunk": c["chunk"], "offset": c["offset"], "bytes": c["bytes"],
               "slot": c["slot"], "wait_start_ms": ms(c["wait"]), "copy_start_ms": ms(c["copy"]),
               "copy_end_ms": ms(c["copied"]), "queued_ms": ms(c["queued"]),
               "dma_start_ms": t["ref"].elapsed_time(c["dma"][0]), "dma_end_ms": t["ref"].elapsed_time(c["dma"][1])}
              for c in sorted(t["chunks"], key=lambda c: c["chunk"])]  # fmt: skip
    gaps, end = 0.0, None
    for a, b in sorted((c["dma_start_ms"], c["dma_end_ms"]) for c in chunks):
        gaps += max(0.0, a - end) if end is not None else 0.0
        end = b if end is None else max(end, b)
    med = lambda k0, k1: float(np.median([c["bytes"] / max(c[k1] - c[k0], 1e-6) / 1e6 for c in chunks]))  # noqa: E731
    last_copy = max(c["copy_end_ms"] for c in chunks)
    return {"size_bytes": size, **cfg_of(cfg), "plan": t["plan"], "n_chunks": t["n_chunks"], "wall_ms": wall_ms,
            "first_dma_start_ms": min(c["dma_start_ms"] for c in chunks), "last_dma_end_ms": end,
            "setup_ms": min(c["wait_start_ms"] for c in chunks),  # call start to the first chunk's work
            "thread_start_ms": {str(w): min(c["wait_start_ms"] for c in chunks if c["thread"] == w)
                                for w in sorted({c["thread"] for c in chunks})},  # a worker's wake-up
            "last_host_copy_end_ms": last_copy, "tail_ms": end - last_copy, "dma_idle_ms": gaps,
            "slot_wait_ms": sum(c["copy_start_ms"] - c["wait_start_ms"] for c in chunks),
            "host_copy_ms": sum(c["copy_end_ms"] - c["copy_start_ms"] for c in chunks),
            "issue_ms": sum(c["queued_ms"] - c["copy_end_ms"] for c in chunks),
            "chunk_host_gbps_median": med("copy_start_ms", "copy_end_ms"),
            "chunk_dma_gbps_median": med("dma_start_ms", "dma_end_ms"),
            "clocks": "host times from time.perf_counter, DMA times from CUDA events recorded around each chunk's "
                      "copy on its thread's stream, both from the call's start",
            "chunks": chunks}  # fmt: skip
