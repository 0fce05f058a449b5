#!/usr/bin/env bash
# The one-GPU fleet survey on the H200 machine (issue 33), run from the repository root:
#   OUT=/some/folder bash data/survey_h200.sh
# Runs `h2dlab survey` as one rank under torchrun (the launcher a fleet would use), then
# compares its pinned copies of 256 MiB and 1 GiB with the bundled recording data/h200
# (python -m h2dlab.survey.against: within 3 %). Writes into $OUT: survey.log (both
# commands' output, their exit codes and the survey's wall time), fleet.csv.gz with its
# fleet.csv.gz.env.json and fleet.html (what data/h200_survey keeps), and h200_survey.tgz
# (the whole survey folder, the ranks' own tables included).
# SURVEY_ARGS adds options (a dry run here: SURVEY_ARGS="--device cpu --sizes 1KiB --reps 3").
# Exit codes are logged, not propagated: the survey exits 3 when it flags the GPU, which
# torchrun reports as its own failure (exit 1).
set -u
OUT=${OUT:?set OUT to the folder for the results}
PY=${PY:-python3}
mkdir -p "$OUT"
S="$OUT/h200_survey"
LOG="$OUT/survey.log"
rm -rf "$S"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s.%N)
timeout 300 "$PY" -m torch.distributed.run --standalone --nproc-per-node=1 \
  -m h2dlab survey --out "$S" --report ${SURVEY_ARGS:-} >"$LOG" 2>&1
rc=$?
end=$(date +%s.%N)
echo "survey exit code $rc (torchrun's; 0 no GPU flagged, 1 flagged or failed), wall $("$PY" -c "print(round($end - $start, 1))") s" >>"$LOG"
timeout 120 "$PY" -m h2dlab.survey.against "$S/fleet.csv.gz" >>"$LOG" 2>&1
echo "against exit code $? (0: every pinned copy >= 256 MiB within 3 % of data/h200)" >>"$LOG"
for f in fleet.csv.gz fleet.csv.gz.env.json fleet.html; do
  [ -f "$S/$f" ] && cp "$S/$f" "$OUT/$f"
done
tar czf "$OUT/h200_survey.tgz" -C "$OUT" h200_survey && rm -rf "$S"
exit 0
