"""Record the bundled traces and their ground truth on a CUDA GPU (an H200 for the bundle).

    python data/traces/record_traces.py --out DIR        # ~60-90 s on an H200

For each workload of ``workloads.py``: a few steps under ``torch.profiler`` (CPU + CUDA,
no stacks, gzip) written to ``DIR/<workload>.json.gz``, and, without the profiler, its
step time beside the same step with the batch resident on the GPU, in alternating rounds
(``ground_truth.csv``: one row per workload; ``exposed_ms = step_ms - resident_ms``, the
medians over rounds, with every round's figures kept). ``env.json`` is the kit's
``collect_env()`` with this command. At the end the doctor reads every trace it wrote:
``doctor.json`` (each workload's ``h2dlab doctor --json`` object, judged against the bundled
``h200`` recording) and ``doctor_check.csv`` (its exposed time beside the ground truth, the
classification, the first recipe beside the fastest measured; the checks of
``tests/doctor/test_doctor_traces.py``). A workload that fails gets a row with its ``error``
and the others still run; the table is rewritten after every workload, so a run that is
stopped keeps every row it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # workloads.py, and the kit (collect_env)

STEPS_TIMED = 15  # steps per round and variant
ROUNDS = 4
WARMUP = 3
TRACE_WAIT, TRACE_WARMUP, TRACE_ACTIVE = 1, 1, 3
COLUMNS = [
    "workload",
    "family",
    "recipe",
    "h2d_source",
    "step_ms",
    "resident_ms",
    "exposed_ms",
    "step_ms_rounds",
    "resident_ms_rounds",
    "steps_per_round",
    "rounds",
    "trace",
    "trace_bytes",
    "traced_steps",
    "wall_s",
    "error",
]


def _time(fn, n: int) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


def _trace(fn, path: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    done: list[bool] = []

    def ready(p) -> None:
        p.export_chrome_trace(str(path))
        done.append(True)

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=TRACE_WAIT, warmup=TRACE_WARMUP, active=TRACE_ACTIVE, repeat=1),
        on_trace_ready=ready,
        with_stack=False,
        record_shapes=False,
    ) as p:
        for _ in range(TRACE_WAIT + TRACE_WARMUP + TRACE_ACTIVE):
            fn()
            p.step()
    torch.cuda.synchronize()
    if not done:
        raise RuntimeError("the profiler wrote no trace")


def _write(rows: list[dict], out: Path) -> None:
    import pandas as pd

    tmp = out / "ground_truth.csv.tmp"
    pd.DataFrame(rows, columns=COLUMNS).to_csv(tmp, index=False)
    tmp.replace(out / "ground_truth.csv")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the traces, ground_truth.csv and env.json")
    ap.add_argument("--only", default=None, help="comma list of workload names")
    ap.add_argument(
        "--check-only",
        action="store_true",
        help="no GPU: rewrite doctor_check.csv and doctor.json from the traces already in --out",
    )
    a = ap.parse_args(argv)
    if a.check_only:
        check_only(Path(a.out))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("record_traces: needs a CUDA GPU", file=sys.stderr)
        return 1
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from h2dlab.recording.env import collect_env

    cmd = ["python", "data/traces/record_traces.py", *(argv if argv is not None else sys.argv[1:])]
    env = collect_env(argv=cmd)
    env["what"] = "bundled doctor traces: workloads.py, traced steps and step times without the profiler"
    (out / "env.json").write_text(json.dumps(env, indent=2, default=str))

    import workloads

    dev = torch.device("cuda", torch.cuda.current_device())
    t_all = time.perf_counter()
    items = workloads.build(dev)
    only = set(a.only.split(",")) if a.only else None
    rows: list[dict] = []
    for wl in items:
        if only and wl.name not in only:
            continue
        t0 = time.perf_counter()
        row = {c: None for c in COLUMNS}
        row.update(workload=wl.name, family=wl.family, recipe=wl.recipe, h2d_source=wl.h2d_source, error="")
        try:
            for _ in range(WARMUP):
                wl.step()
                wl.resident()
            steps, res = [], []
            for r in range(ROUNDS):  # alternate which goes first
                pair = [(steps, wl.step), (res, wl.resident)]
                for dst, fn in pair if r % 2 == 0 else pair[::-1]:
                    dst.append(_time(fn, STEPS_TIMED))
            trace = out / f"{wl.name}.json.gz"
            _trace(wl.step, trace)
            row.update(
                step_ms=statistics.median(steps),
                resident_ms=statistics.median(res),
                step_ms_rounds=";".join(f"{v:.4f}" for v in steps),
                resident_ms_rounds=";".join(f"{v:.4f}" for v in res),
                steps_per_round=STEPS_TIMED,
                rounds=ROUNDS,
                trace=trace.name,
                trace_bytes=trace.stat().st_size,
                traced_steps=TRACE_ACTIVE,
            )
            row["exposed_ms"] = row["step_ms"] - row["resident_ms"]
        except Exception as exc:  # keep the other workloads' rows
            traceback.print_exc()
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        _write(rows, out)
        print(
            f"{wl.name:22s} step {row['step_ms'] or float('nan'):8.3f} ms  resident "
            f"{row['resident_ms'] or float('nan'):8.3f} ms  exposed {row['exposed_ms'] or float('nan'):7.3f} ms "
            f" {row['wall_s']:5.1f} s {row['error']}",
            flush=True,
        )
    print(f"record_traces: {len(rows)} workloads in {time.perf_counter() - t_all:.1f} s -> {out}", flush=True)
    try:
        check(rows, out)
    except Exception:  # the traces and the table are written: a check that fails must not lose them
        traceback.print_exc()
    return 0 if rows and not any(r["error"] for r in rows) else 1


def check(rows: list[dict], out: Path) -> None:
    """The doctor on every trace just written, beside its ground truth (``doctor_check.csv``;
    each workload's ``h2dlab doctor --json`` object in ``doctor.json``). The same checks as
    tests/doctor/test_doctor_traces.py, printed here so the run shows them at once."""
    import pandas as pd

    from h2dlab.doctor import diagnose, load_machine

    machine = load_machine("h200")
    ok = [r for r in rows if not r["error"]]
    fams: dict[str, dict[str, float]] = {}
    for r in ok:
        fams.setdefault(r["family"], {})[r["recipe"]] = r["exposed_ms"]
    objs, table = {}, []
    for r in ok:
        dx = diagnose(out / r["trace"], machine=machine)
        d = dx.to_dict()
        objs[r["workload"]] = d
        c = dx.analysis.copies
        h2d = c[(c["direction"] == "h2d") & (c["step"] >= 0)]
        site = max(
            (s for s in d["sites"] if s["direction"] == "h2d"),
            key=lambda s: s["exposed_ms_per_step"],
            default=None,
        )
        measured = fams[r["family"]]
        ranked = [
            r["recipe"] if a["recipe"] == "as_is" else a["recipe"]
            for a in (site or {}).get("alternatives", [])
        ]
        first = ranked[0] if ranked else r["recipe"]  # what the doctor names first, traced or not
        got, truth = dx.exposed_copy_ms_per_step, r["exposed_ms"]
        table.append(
            {
                "workload": r["workload"],
                "doctor_exposed_ms": round(got, 4),
                "truth_exposed_ms": round(truth, 4),
                "within": abs(got - truth) <= max(0.5, 0.25 * abs(truth)),
                "h2d_copies": len(h2d),
                "classified": len(h2d) >= 3 and set(h2d["source_memory"]) == {r["h2d_source"]},
                "first_recipe": first,
                "first_traced": first in measured,
                "fastest_measured": min(measured, key=measured.get),
                "first_is_fastest": first in measured and measured[first] <= min(measured.values()) + 0.5,
                "recommendation": (site or {}).get("recommendation", ""),
            }
        )
    (out / "doctor.json").write_text(json.dumps(objs, indent=1, ensure_ascii=False))
    t = pd.DataFrame(table)
    t.to_csv(out / "doctor_check.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(t.drop(columns="recommendation").to_string(index=False), flush=True)


def check_only(out: Path) -> None:
    """:func:`check` again over the traces and ``ground_truth.csv`` already in ``out`` (CPU)."""
    import pandas as pd

    t = pd.read_csv(out / "ground_truth.csv")
    t["error"] = t["error"].astype(object).fillna("").astype(str)
    check(t.to_dict("records"), out)


if __name__ == "__main__":
    sys.exit(main())
