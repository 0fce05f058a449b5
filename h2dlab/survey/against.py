"""A survey's copies beside a recording's: the same strategy, size and direction, GPU
time of the median timed copy (CUDA events), and their ratio. Pinned copies are the
link's figures, stable from run to run; pageable ones depend on the host and move.

``python -m h2dlab.survey.against FLEET [REFERENCE ...]`` prints the comparison (default
references: the bundled recording's ``h200:sweep`` pow2 run and its ``d2h`` run) and
exits 1 when a pinned copy of 256 MiB or more lies more than 3 % from the recording.
"""

from __future__ import annotations

import sys

import pandas as pd

__all__ = ["TOLERANCE", "against_recording", "main"]

TOLERANCE = 0.03
#: Sizes whose pinned copies the check holds to TOLERANCE (small copies' times are
#: dominated by fixed costs that vary between processes).
CHECKED_MIN_BYTES = 256 * 2**20


def _medians(df: pd.DataFrame) -> pd.Series:
    timed = df[~df["warmup"].astype(bool) & (df["error"].fillna("") == "")]
    if "phase" in timed:
        timed = timed[timed["phase"] == "alone"]
    key = pd.DataFrame(
        {
            "direction": timed["direction"].astype(str).to_numpy(object),
            "strategy": timed["strategy"].astype(str).to_numpy(object),
            "size_bytes": timed["size_bytes"].astype("int64").to_numpy(),
            "ms": timed["event_ms"].where(timed["event_ms"].notna(), timed["wall_ms"]).to_numpy(float),
        }
    )
    return key.groupby(["direction", "strategy", "size_bytes"])["ms"].median()


def against_recording(fleet: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """One row per (direction, strategy, size) both tables timed: ``survey_ms``,
    ``recording_ms`` (medians), ``ratio`` (survey / recording) and ``checked`` (a pinned
    copy of at least 256 MiB, held to :data:`TOLERANCE`)."""
    both = pd.merge(
        _medians(fleet).rename("survey_ms"),
        _medians(reference).rename("recording_ms"),
        left_index=True,
        right_index=True,
    )
    both["ratio"] = both["survey_ms"] / both["recording_ms"]
    idx = both.index.to_frame(index=False)
    both["checked"] = (
        idx["strategy"].str.contains("pinned").to_numpy()
        & (idx["size_bytes"] >= CHECKED_MIN_BYTES).to_numpy()
    )
    return both.reset_index()


def main(argv: list[str] | None = None) -> int:
    """Print the comparison; 0 when every checked copy is within 3 %, 1 otherwise, 2 for bad input."""
    from h2dlab.recording import datasets
    from h2dlab.recording.session import Recorded

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m h2dlab.survey.against FLEET [REFERENCE ...]", file=sys.stderr)
        return 2
    try:
        fleet = datasets.read(args[0])
        if len(args) > 1:
            ref = pd.concat([datasets.load(a) for a in args[1:]], ignore_index=True)
        else:
            rec = Recorded("h200")
            ref = pd.concat(
                [rec.table("sweep", "pow2-interleaved"), rec.table("d2h", "d2h")], ignore_index=True
            )
    except (datasets.SchemaError, ValueError, OSError) as exc:
        print(f"h2dlab: error: {exc}", file=sys.stderr)
        return 2
    table = against_recording(fleet, ref)
    with pd.option_context("display.width", 200):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    bad = table[table["checked"] & ((table["ratio"] - 1).abs() > TOLERANCE)]
    checked = int(table["checked"].sum())
    print(
        f"{checked - len(bad)} of {checked} pinned copies of 256 MiB or more within {TOLERANCE:.0%} of the recording"
    )
    return 1 if len(bad) or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
