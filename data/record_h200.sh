#!/usr/bin/env bash
# How the bundled H200 recording data/h200 is made: the one recording plan (h2dlab/recording/plan.py,
# `h2dlab record --dry-run` prints it) run by `h2dlab record` into a new folder, which is then
# copied over data/h200: recording.json, the folder's env.json, record.log and every
# <kind>/<run> table with its env.json. Tables of retired runs (record_plan.RETIRED) are removed
# from data/h200 first: a recording holds one machine and one day. Nothing else defines an
# experiment.
# Usage, on the GPU machine from the repository root:
#   H2DLAB_GIT_COMMIT=<commit> bash data/record_h200.sh    # the full plan, 1-GPU H200 machine
#   bash data/record_h200.sh --only concurrent              # 2-GPU host: into data/h200x2_concurrent
#   MOVE_ONLY=<folder> bash data/record_h200.sh             # copy a finished recording (after --resume)
# Extra arguments go to `h2dlab record`. An interrupted recording is finished with
# `h2dlab record --resume <folder>` and then copied with MOVE_ONLY=<folder>.
set -euo pipefail
H2D=${H2D:-"python3 -m h2dlab"}
rec=${MOVE_ONLY:-}
if [ -z "$rec" ]; then
  rec=$(mktemp -d "${TMPDIR:-/tmp}/h200-recording.XXXXXX")/h200
  $H2D record --out "$rec" "$@"
fi
if ! grep -q '^  "status": "complete"' "$rec/recording.json"; then
  echo "record_h200.sh: $rec is not a complete recording (finish it: h2dlab record --resume $rec)" >&2
  exit 1
fi
kinds=$(cd "$rec" && ls -d */ | tr -d / | tr '\n' ' ')
if [ "$kinds" = "concurrent " ]; then  # the 2-GPU host's run joins the first session's 2-GPU tables
  mkdir -p data/h200x2_concurrent
  for f in "$rec"/concurrent/*; do
    case "$f" in *.csv.gz) rm -f "data/h200x2_concurrent/$(basename "${f%.csv.gz}").env.json" ;; esac
    cp -f "$f" data/h200x2_concurrent/
  done
  cp "$rec/recording.json" data/h200x2_recording.json
  echo "copied the concurrent runs into data/h200x2_concurrent"
  exit 0
fi
mkdir -p data/h200
PY=${PY:-python3}
for t in $($PY -c 'from h2dlab.recording.plan import RETIRED; print(" ".join(f"{k}/{r}" for k, r in RETIRED))'); do
  rm -f "data/h200/$t.csv.gz" "data/h200/$t.csv.gz.env.json"
done
for kind in $kinds; do
  mkdir -p "data/h200/$kind"
  cp -f "$rec/$kind"/*.csv.gz "$rec/$kind"/*.csv.gz.env.json "data/h200/$kind/"
done
cp -f "$rec/recording.json" "$rec/record.log" data/h200/
[ -f "$rec/env.json" ] && cp -f "$rec/env.json" data/h200/
echo "copied $rec ($kinds) over data/h200"
