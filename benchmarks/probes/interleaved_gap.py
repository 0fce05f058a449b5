"""Probe #30 (3): in a recording folder (``h2dlab record``'s, or ``data/h200``), the host time
between two timed copies of the interleaved sweep and of the reference run, and the sweep's
1 KiB ``pinned_reuse`` median beside ``torch.utils.benchmark``'s (copy + synchronize, from the
reference run's env.json). Reads tables only: runs anywhere.

    PYTHONPATH=$PWD python3 benchmarks/probes/interleaved_gap.py FOLDER [--json OUT]

Targets (issue #30): a median gap of at most 0.2 ms in the sweep; its 1 KiB pinned_reuse median
at most 1.25x the reference's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from h2dlab.explain.causes_wake import idle_gap_ms  # noqa: E402
from h2dlab.recording import datasets  # noqa: E402

SWEEP, REFERENCE = "sweep/pow2-interleaved.csv.gz", "reference/reference.csv.gz"


def figures(folder: Path) -> dict:
    """The gaps (ms), the small copies' medians (us) and the ratio, for one recording folder."""
    out: dict = {"folder": str(folder)}
    ref_rows: list = []
    for key, name in (("sweep", SWEEP), ("reference", REFERENCE)):
        path = folder / name
        if not path.exists():
            out[f"{key}_gap_ms"] = None
            continue
        df = datasets.read(path)
        timed = ~df["warmup"].astype(bool)
        out[f"{key}_gap_ms"] = float(np.nanmedian(idle_gap_ms(df)[timed].to_numpy(dtype=float)))
        env = df.attrs.get("env") or {}
        out[f"{key}_commit"], out[f"{key}_date"] = env.get("git_commit"), env.get("date")
        ok = timed & (df["error"].fillna("") == "")
        small = df[ok & (df["size_bytes"] == 1024)]
        out[f"{key}_1KiB_event_us"] = {
            str(s): float(g["event_ms"].median() * 1e3) for s, g in small.groupby("strategy")
        }
        if key == "reference":
            ref_rows = env.get("reference") or []
    ref = {(r["strategy"], int(r["size_bytes"])): r["reference_median_us"] for r in ref_rows}
    kit = (out.get("sweep_1KiB_event_us") or {}).get("pinned_reuse")
    tub = ref.get(("pinned_reuse", 1024))
    out["reference_pinned_reuse_1KiB_us"] = tub
    out["sweep_pinned_reuse_1KiB_over_reference"] = kit / tub if kit and tub else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    res = figures(args.folder)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    gap, ratio = res.get("sweep_gap_ms"), res.get("sweep_pinned_reuse_1KiB_over_reference")
    good = gap is not None and gap <= 0.2 and ratio is not None and ratio <= 1.25
    print(f"sweep gap {gap} ms (target <= 0.2), 1 KiB pinned_reuse / reference {ratio} (target <= 1.25): "
          + ("PASS" if good else "FAIL"), file=sys.stderr)  # fmt: skip
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
