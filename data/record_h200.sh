#!/usr/bin/env bash
# How the bundled H200 recording is made: the one recording plan (h2dlab/record_plan.py,
# `h2dlab record --dry-run` prints it) run by `h2dlab record`, then each run moved into
# data/h200_<kind>/ (concurrent: data/h200x2_concurrent/). Nothing else defines an experiment.
# Usage, on the GPU machine from the repository root:
#   bash data/record_h200.sh                       # the full plan, on the 1-GPU H200 machine
#   bash data/record_h200.sh --only concurrent     # on the 2-GPU host (kind nvidia-h200-x2)
# Extra arguments go to `h2dlab record` (e.g. --only pow2,forum-sizes). A recording that was
# interrupted is finished with `h2dlab record --resume <folder>` and then moved with MOVE_ONLY=<folder>.
set -euo pipefail
H2D=${H2D:-"python3 -m h2dlab.cli"}
rec=${MOVE_ONLY:-}
if [ -z "$rec" ]; then
  rec=$(mktemp -d "${TMPDIR:-/tmp}/h200-recording.XXXXXX")/rec
  $H2D record --out "$rec" "$@"
fi
for dir in "$rec"/*/; do
  kind=$(basename "$dir")
  dest=data/h200_$kind
  [ "$kind" = concurrent ] && dest=data/h200x2_concurrent
  mkdir -p "$dest"
  for f in "$dir"*; do
    case "$f" in *.partial.csv|*.partial.csv.*) continue ;; esac
    case "$f" in *.csv.gz) rm -f "$dest/$(basename "${f%.csv.gz}").env.json" ;; esac  # the old env.json name
    mv -f "$f" "$dest/"
  done
  echo "moved $kind runs into $dest"
done
name=h200
[ "$(ls -d "$rec"/*/ | xargs -n1 basename | tr '\n' ' ')" = "concurrent " ] && name=h200x2
cp "$rec/recording.json" "data/${name}_recording.json"  # what ran, where, how long each took
echo "recording log: $rec/record.log"
