"""h2dlab.transfer.fastpath.to_device against PyTorch's own ways, and the bounds of any staged copy,
all measured in one run and one process (except the cudaHostRegister-pinning variant).

    python3 benchmarks/bench_transfer.py --out $OUT/h200.json --fastpath $OUT/fastpath.json

(~2 minutes on the 32-core H200 host, ~2.5 on the 16-core one with the per-size tuning;
benchmarks/README.md says where the outputs go.)

Every timing is the synchronised host clock around one call (bench_staging.WallTimer, the
timed region of h2dlab's Timer without its evidence reads), median of
>= 5 repetitions after warm-up, with quartiles, min and max. Where two or more calls are
compared they alternate, and each timed call comes right after an untimed call of itself
(bench_staging.timed's ``prime``), so each is timed after itself, not after the other. In order:

1. tuning: Stagers over engine x threads x slot size x slots per thread (bench_staging's
   TUNE_GRID), each at 64 MiB, 256 MiB, 1 GiB and 4 GiB, then the best with other cuts of its
   first chunk and last wave (TUNE_SPLITS: head_split/tail_split), then the best with 8 MiB
   smallest chunks and on huge pages; the best equal-bytes rate over the sizes is used from here on.
1b. per-size tuning: bench_analysis.plan_candidates (the tuned plan, one thread with fewer or
   more chunks, threaded plans) at every size of PLAN_SIZES (2 MiB-1 GiB) on one ring, alternating; the
   fastest at each size (if 2 % faster than the tuned plan) becomes fastpath.json's schedule
   (bench_analysis.choose_schedule). Everything below runs to_device with that schedule.
2. crossover: x.to("cuda") and the staged copy (forced) at every size of the grid, alternating;
   min_bytes = the smallest grid size from which the staged copy beats .to() by MARGIN at
   every larger size too. Written with the tuned settings to --fastpath (the file
   h2dlab/transfer/fastpath.json ships) and applied in this process.
3. grid: to_device (as shipped: settings from step 2) against .to() at every size, the two
   alternating; the ratio is the median of per-round ratios (.to() time / to_device time)
   with its quartiles, over many rounds at small sizes: below the threshold the two are the
   same call, and the ratio must read ~1 with its spread, not one median over another.
4. fast-path overhead: to_device below its threshold against .to() itself, on a CUDA tensor
   (.to() is then a no-op, so the difference is to_device's own checks).
5. bounds at 256 MiB, 1 GiB, 4 GiB, with to_device's settings, 7 reps: host copy alone
   (Stager.host_copy), pinned DMA alone, host copy while a pinned DMA streams on another
   stream, DMA while host copies run; upper = min(host alone, DMA alone), lower = min(host copy
   under DMA, DMA under host copies) (bench_staging.bounds says why both); to_device measured
   in the same rotation.
6. repeated copies: a new pageable batch every step, 64 MiB and 1 GiB: Stager, to_device,
   pin_memory().to(), TensorDict(non_blocking_pin=True) (or 'absent' said), .to(); verdicts.
7. timeline: one 256 MiB copy, per chunk host wait/copy times and DMA start/end (events), with
   the plan to_device runs there; and at 16 and 64 MiB with the tuned plan and the schedule's.
8. PyTorch's other ways over the grid: pin_then_to, tensordict, pinned_reuse (the PCIe
   peak), and pin_then_to_reg (PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register, own
   subprocess).
9. reference (issue #30): h2dlab's own measuring loop (``measure.sweep``, its default light
   evidence, reps back to back, CUDA-event medians) and ``torch.utils.benchmark``'s
   ``blocked_autorange`` of copy + synchronize, on pinned_reuse and pageable at 1 KiB, 64 KiB,
   1 MiB, 64 MiB and 1 GiB, this process: key ``reference``, one entry per cell with
   ``kit_median_us`` and ``reference_median_us``; ``reference_verdict`` says whether every
   kit / reference ratio lies in REF_BOUNDS. ``--reference-only`` runs this part alone and
   writes it into the --out file already there (its other keys kept; ~20 s):

    python3 benchmarks/bench_transfer.py --reference-only --out benchmarks/results/h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_analysis import (  # noqa: E402
    MARGIN,
    PLAN_SIZES,
    cfg_name,
    cfg_of,
    choose_min_bytes,
    choose_schedule,
    identical_calls,
    paired_ratio,
    pick,
    plan_name,
    repeated_verdict,
    report,
    targets,
)
from bench_staging import DEV, T0, WallTimer, bounds, log, repeated, src, stats, timed, timeline, tune  # noqa: E402
from bench_staging import tune_sizes as tune_by_size  # noqa: E402

from h2dlab.measure import reference  # noqa: E402
from h2dlab.recording.env import collect_env  # noqa: E402
from h2dlab.transfer import fastpath as transfer  # noqa: E402
from h2dlab.transfer import stager as stg  # noqa: E402
from h2dlab.units import parse_size  # noqa: E402

KiB, MiB, GiB = 1024, 1024**2, 1024**3
REG_CONF = "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
TUNE_SIZES, TIMELINE_BYTES = (64 * MiB, 256 * MiB, GiB, 4 * GiB), 256 * MiB
BOUND_SIZES = (256 * MiB, GiB, 4 * GiB)
PRIMED_NO_WARMUP = 64 * MiB  # from here a primed comparison has no warm-up round: the prime is one
REPEATED = ((64 * MiB, 20), (GiB, 6))  # (bytes per step, steps)
MID_TIMELINES = (16 * MiB, 64 * MiB)  # where the issue-34 copies lost most to pinned_reuse
REF_STRATEGIES, REF_SIZES = ("pinned_reuse", "pageable"), (KiB, 64 * KiB, MiB, 64 * MiB, GiB)
REF_MIN_RUN_S = reference.MIN_RUN_TIME_S  # blocked_autorange's min_run_time per cell
REF_BOUNDS = (0.8, 1.25)  # kit / reference: the event time may be shorter, not much longer (#30)
REF_KEYS = ("strategy", "size_bytes", "kit_median_us", "reference_median_us")


def reps_for(n: int, a) -> tuple[int, int]:
    """(reps, warm-ups): below 1 MiB three times --reps-small, since a copy of ~25 us has a
    jitter of a few percent and 'never slower' is judged there on medians."""
    if n < MiB:
        return 3 * a.reps_small, 5
    return (a.reps_small, 3) if n < 64 * MiB else (a.reps_large, 1)


def crossover(sizes, timer, a) -> tuple[list[dict], int]:
    """.to() against the staged copy forced (to_device with the settings in use, min_bytes=0)
    at every size, alternating; the crossover by choose_min_bytes."""
    rows = []
    for n in sizes:
        x = src(n)
        staged = {"to": lambda x=x: x.to(DEV), "staged": lambda x=x: transfer.to_device(x, DEV, min_bytes=0)}
        reps, warm = reps_for(n, a)
        ms = timed(staged, reps, warm if n < PRIMED_NO_WARMUP else 0, timer, prime=True)
        r = {"size_bytes": n, "to": stats(ms["to"], n), "staged": stats(ms["staged"], n)}
        r["ratio"] = r["to"]["ms_median"] / r["staged"]["ms_median"]
        rows.append(r)
        log(f"crossover {n / MiB:10.4f} MiB: staged/.to() speed ratio {r['ratio']:.2f}")
    return rows, choose_min_bytes(rows)


def grid_reps(n: int, a) -> tuple[int, int]:
    """(paired rounds, warm-ups) for the grid: 40x --reps-small below 1 MiB (a ~50 us call
    and ~100 us of timer around it: ~0.2 s a size), 8x up to 32 MiB, 3x --reps-large up to
    512 MiB, else --reps-large + 2. The 'never slower' ratio is judged on these: its standard
    error (~1.25 IQR / 1.35 / sqrt(rounds)) must be small against the 3 % it is judged by,
    and two timings of one call must read 1.00 within it. No warm-up round from 64 MiB: the
    grid primes every call (bench_staging.timed), and the first prime is the warm-up."""
    if n < MiB:
        return 40 * a.reps_small, 20
    if n <= 32 * MiB:
        return 8 * a.reps_small, 5
    return (3 * a.reps_large if n <= 512 * MiB else a.reps_large + 2), 0  # n >= PRIMED_NO_WARMUP


def grid(sizes, timer, a) -> list[dict]:
    rows = []
    for n in sizes:
        x = src(n)
        ms = timed(
            {"to": lambda x=x: x.to(DEV), "to_device": lambda x=x: transfer.to_device(x, DEV)},
            *grid_reps(n, a),
            timer,
            prime=True,
        )
        pr = paired_ratio(ms["to"], ms["to_device"])
        staged = n >= transfer.fastpath()["min_bytes"]
        rows.append({"method": "to_device", **stats(ms["to_device"], n), **pr, "staged": staged})
        rows.append({"method": "to", **stats(ms["to"], n), "ratio_vs_to": 1.0})
        log(f"grid {n / MiB:10.4f} MiB: to_device {pr['ratio_vs_to']:.3f}x .to() "
            f"(IQR {pr['ratio_q25']:.2f}-{pr['ratio_q75']:.2f}, {'staged' if staged else 'is .to()'})")  # fmt: skip
    return rows


def overhead() -> dict:
    """Microseconds to_device adds to .to() below its threshold: on a CUDA tensor, where
    .to() is a no-op, so the difference is to_device's own checks; the two interleaved."""
    import timeit

    g = torch.zeros(256, device=DEV)
    direct, via = [], []
    for _ in range(15):
        direct += timeit.repeat(lambda: g.to(DEV), number=2000, repeat=1)
        via += timeit.repeat(lambda: transfer.to_device(g, DEV), number=2000, repeat=1)
    d, v = np.array(direct) / 2000 * 1e6, np.array(via) / 2000 * 1e6
    return {"to_us_median": float(np.median(d)), "to_device_us_median": float(np.median(v)),
            "added_us_median": float(np.median(v) - np.median(d)), "added_us_min": float(v.min() - d.min())}  # fmt: skip


def tensordict_version() -> str:
    """TensorDict's version, or 'absent: <why>' (its rows are then missing, said here)."""
    try:
        import tensordict
    except Exception as exc:  # noqa: BLE001 - said in the results
        return f"absent: {type(exc).__name__}: {exc}"[:200]
    return str(getattr(tensordict, "__version__", "unknown version"))


def others(sizes, names, timer, a) -> list[dict]:
    rows = []
    for n in sizes:
        x = src(n)
        fns = {}
        if "pin_then_to" in names:
            fns["pin_then_to"] = lambda x=x: x.pin_memory().to(DEV, non_blocking=True)
        if "tensordict" in names:
            try:
                from tensordict import TensorDict

                td = TensorDict({"x": x}, batch_size=[])
                fns["tensordict"] = lambda td=td: td.to(DEV, non_blocking_pin=True, num_threads=8)
            except Exception:  # noqa: BLE001 - said once in repeated()
                pass
        if "pinned_reuse" in names:
            p = torch.empty_like(x, pin_memory=True).copy_(x)
            dd = torch.empty_like(x, device=DEV)
            fns["pinned_reuse"] = lambda p=p, dd=dd: dd.copy_(p, non_blocking=True)
        for m, v in timed(fns, *reps_for(n, a), timer).items():
            rows.append({"method": m, **stats(v, n)})
        log(
            f"others {n / MiB:10.4f} MiB: "
            + ", ".join(f"{r['method']} {r['gbps_median']:.1f}" for r in rows[-len(fns) :])
        )
        fns.clear()
        torch.cuda.empty_cache()
    return rows


def reg_child(a) -> list[dict]:
    """pin_then_to under PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register: its own process."""
    cmd = [sys.executable, __file__, "--child", "--min", a.min, "--max", a.max, "--reps-small", str(a.reps_small),
           "--reps-large", str(a.reps_large)]  # fmt: skip
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=REG_CONF)
    child = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if child.returncode != 0:
        log(f"pin_then_to_reg failed: {child.stderr.strip()[-300:]}")
        return []
    return [{**r, "method": "pin_then_to_reg"} for r in json.loads(child.stdout)]


def reference_rows() -> list[dict]:
    """Section 9: the kit's measure loop, then torch.utils.benchmark, on REF_STRATEGIES x
    REF_SIZES in this process; one entry (REF_KEYS) per cell both timed."""
    from h2dlab.measure.harness import sweep
    from h2dlab.measure.spec import SweepSpec

    spec = SweepSpec(strategies=REF_STRATEGIES, sizes=REF_SIZES, device=str(DEV), reps=30, reps_large=5,
                     warmup=2, order="shuffled", seed=0)  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:  # rows written as a recording writes them
        kit = reference.kit_medians_us(sweep(spec, out=Path(folder) / "kit.csv", progress=False))
    ref = reference.reference_medians_us(REF_STRATEGIES, REF_SIZES, DEV, min_run_time_s=REF_MIN_RUN_S)
    rows = [{k: r[k] for k in REF_KEYS} for r in reference.compare(kit, ref)]
    for r in rows:
        log(f"reference {r['strategy']:>12s} {r['size_bytes'] / KiB:10.0f} KiB: kit {r['kit_median_us']:9.1f} us, "
            f"torch.utils.benchmark {r['reference_median_us']:9.1f} us")  # fmt: skip
    return rows


def reference_verdict(rows: list[dict]) -> dict:
    """Whether every kit / reference ratio lies within REF_BOUNDS, and the ratios."""
    ratios = [r["kit_median_us"] / r["reference_median_us"] for r in rows]
    return {"bounds": list(REF_BOUNDS), "ratios": ratios,
            "within": bool(ratios) and all(REF_BOUNDS[0] <= q <= REF_BOUNDS[1] for q in ratios)}  # fmt: skip


def write_results(res: dict, out: Path) -> None:
    """``res`` as JSON at ``out``, written beside it and then renamed (never half a file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{out.name}")
    tmp.write_text(json.dumps(res, indent=1, default=float) + "\n")
    tmp.replace(out)


def reference_only(out: Path) -> int:
    """--reference-only: section 9 alone, into the results at ``out`` (other keys kept)."""
    res = json.loads(out.read_text()) if out.exists() else {"format": 2}
    res["reference"] = reference_rows()
    res["reference_verdict"] = reference_verdict(res["reference"])
    res["reference_env"] = collect_env(argv=[sys.executable, *sys.argv])
    write_results(res, out)
    v = res["reference_verdict"]
    print(f"wrote {out}: reference ratios {', '.join(f'{q:.2f}' for q in v['ratios'])} "
          f"({'all' if v['within'] else 'not all'} within {REF_BOUNDS[0]}-{REF_BOUNDS[1]})")  # fmt: skip
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/h200.json"), help="results JSON")
    ap.add_argument(
        "--fastpath", help="also write the measured settings here (h2dlab/transfer/fastpath.json format)"
    )
    ap.add_argument("--min", default="1KiB")
    ap.add_argument("--max", default="4GiB")
    ap.add_argument("--reps-small", type=int, default=25, help="reps below 64 MiB (x3 below 1 MiB)")
    ap.add_argument("--reps-large", type=int, default=5, help="reps from 64 MiB (at least 5)")
    ap.add_argument("--others", default="pin_then_to,tensordict,pinned_reuse,pin_then_to_reg",
                    help="PyTorch's other ways over the grid ('' for none)")  # fmt: skip
    ap.add_argument("--reference-only", action="store_true",
                    help="run section 9 alone and write its keys into --out (other keys kept)")  # fmt: skip
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        lo, hi = parse_size(a.min), parse_size(a.max)
    except ValueError as exc:
        print(f"bench_transfer: {exc}", file=sys.stderr)
        return 2
    if a.reps_large < 5 or a.reps_small < 5 or lo > hi:
        print(
            "bench_transfer: --reps-small and --reps-large must be >= 5, and --min <= --max", file=sys.stderr
        )
        return 2
    if not torch.cuda.is_available():
        print(
            "bench_transfer: needs a CUDA GPU; the recorded H200 result is benchmarks/results/h200.json",
            file=sys.stderr,
        )
        return 2
    sizes = [2**k for k in range(int(np.ceil(np.log2(lo))), int(np.log2(hi)) + 1)]
    torch.zeros(1, device=DEV)
    timer = WallTimer(DEV)
    if a.child:
        json.dump(others(sizes, ["pin_then_to"], timer, a), sys.stdout)
        return 0
    if a.reference_only:
        return reference_only(Path(a.out))
    cores = len(os.sched_getaffinity(0))
    res: dict = {"format": 2, "env": collect_env(argv=[sys.executable, *sys.argv])}
    log(f"{res['env'].get('gpu_name')}, {cores} usable cores, sizes {sizes[0]}..{sizes[-1]} bytes")

    res["tuning"] = tune(timer, cores, TUNE_SIZES) if hi >= max(TUNE_SIZES) else []
    best = pick(res["tuning"]) if res["tuning"] else transfer.fastpath()
    cfg = cfg_of(best)
    transfer.free_ring()
    log(f"tuned: {cfg_name(cfg)}")
    res["tuning_by_size"] = tune_by_size(timer, cores, cfg, tuple(n for n in PLAN_SIZES if lo <= n <= hi))
    schedule = res["tuning_by_size"]["schedule"] = choose_schedule(res["tuning_by_size"]["rows"], cfg)
    for b in schedule:
        log(f"schedule: below {b['below_bytes'] / MiB:g} MiB: {plan_name(b)}")

    fp = {
        "format": transfer.FASTPATH_FORMAT,
        "min_bytes": transfer.MAX_MIN_BYTES,
        **cfg,
        "schedule": schedule,
    }
    transfer.use_fastpath(fp)  # the staged copy measured below is the one to_device will run
    rows, min_bytes = crossover(sizes, timer, a)
    res["crossover"] = {"margin": MARGIN, **cfg, "min_bytes": min_bytes, "rows": rows}
    env = res["env"]
    fp = {"format": transfer.FASTPATH_FORMAT, "min_bytes": min_bytes, **cfg, "schedule": schedule,
          "measured_on": {k: env.get(k) for k in ("gpu_name", "cpu_model", "cpu_affinity", "hostname", "torch",
                                                   "cuda_runtime", "driver_version", "date", "command")},
          "evidence": {"results": Path(a.out).name, "margin": MARGIN,
                       "staged_vs_to_by_size": {str(r["size_bytes"]): round(r["ratio"], 3) for r in rows},
                       "tuning_best_gbps": best.get("gbps_median"), "tuning_sizes": list(TUNE_SIZES),
                       "schedule_best_gbps_by_size": {str(n): round(max(r["gbps_median"] for r in res["tuning_by_size"]["rows"] if r["size_bytes"] == n), 2)
                                                      for n in sorted({r["size_bytes"] for r in res["tuning_by_size"]["rows"]})}}}  # fmt: skip
    transfer.use_fastpath(fp)
    res["settings"] = {**transfer.fastpath(), "waves": stg.WAVES, "torch_num_threads": torch.get_num_threads(),
                       "timing": "alternating, each timed call right after an untimed call of itself"}  # fmt: skip
    log(f"settings: min_bytes {min_bytes}, {cfg_name(cfg)}")
    if a.fastpath:
        Path(a.fastpath).parent.mkdir(parents=True, exist_ok=True)
        Path(a.fastpath).write_text(json.dumps(fp, indent=1) + "\n")

    res["rows"] = grid(sizes, timer, a)
    res["identical_calls"] = identical_calls(res["rows"])
    res["fastpath_overhead_us"] = overhead()
    log(f"fast path adds {res['fastpath_overhead_us']['added_us_median']:.2f} us to .to()")
    res["bounds"] = []
    for n in BOUND_SIZES:
        if lo <= n <= hi:
            res["bounds"].append(bounds(n, timer, cfg))
            bd = res["bounds"][-1]
            log(f"bounds {n // MiB} MiB: to_device {bd['to_device_gbps']:.1f} GB/s, upper {bd['upper_gbps']:.1f}, "
                f"lower {bd['lower_gbps']:.1f} (DMA outlasted host copy: {bd['dma_covered_host_copy']})")  # fmt: skip
    res["tensordict"] = tensordict_version()
    res["repeated"] = [r for n, steps in REPEATED if lo <= n <= hi for r in repeated(n, steps, timer, cfg)]
    res["repeated_verdict"] = repeated_verdict(res["repeated"], cfg, res["tensordict"])
    res["timeline_256MiB"] = (
        timeline(TIMELINE_BYTES, cfg, transfer.plan_for(TIMELINE_BYTES)) if hi >= TIMELINE_BYTES else None
    )
    top = {k: cfg[k] for k in stg.PLAN_KEYS}
    res["timeline_mid"] = [timeline(n, cfg, p) for n in MID_TIMELINES if lo <= n <= hi
                           for p in ([top] if transfer.plan_for(n) == top else [top, transfer.plan_for(n)])]  # fmt: skip
    transfer.free_ring()
    names = [m for m in a.others.split(",") if m]
    res["rows"] += others(sizes, names, timer, a)
    if "pin_then_to_reg" in names:
        res["rows"] += reg_child(a)
    base = {r["size_bytes"]: r["ms_median"] for r in res["rows"] if r["method"] == "to"}
    for r in res["rows"]:  # to_device keeps its paired ratio
        r.setdefault("ratio_vs_to", base[r["size_bytes"]] / r["ms_median"])
    g = {b["size_bytes"]: b for b in res["bounds"]}
    peak = max([r["gbps_median"] for r in res["rows"] if r["method"] == "pinned_reuse"]
               + [b["dma_alone_gbps"] for b in res["bounds"]])  # fmt: skip
    for b in res["bounds"]:
        b["frac_of_peak"] = b["to_device_gbps"] / peak
    res["ceilings"] = {"pinned_reuse_peak_gbps": peak,
                       **{f"host_copy_{n // GiB}GiB_gbps": g[n]["host_alone_gbps"] for n in (GiB, 4 * GiB) if n in g},
                       **({"wall_gbps": g[GiB]["upper_gbps"]} if GiB in g else {})}  # fmt: skip
    x = src(GiB) if hi >= GiB else None
    if x is not None:
        reg = []
        for _ in range(5):
            t0 = time.perf_counter()
            transfer.host_register(x.data_ptr(), x.numel())
            reg.append(time.perf_counter() - t0)
            transfer.host_unregister(x.data_ptr())
        res["ceilings"]["host_register_1GiB_ms"] = float(np.median(reg) * 1e3)
    res["reference"] = reference_rows()
    res["reference_verdict"] = reference_verdict(res["reference"])
    res["targets"] = targets(res)
    res["elapsed_s"] = time.perf_counter() - T0
    out = Path(a.out)
    write_results(res, out)
    report(res)
    print(f"wrote {out}" + (f" and {a.fastpath}" if a.fastpath else "") + f" in {res['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
