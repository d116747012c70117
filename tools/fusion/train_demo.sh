#!/usr/bin/env bash
# The whole loop on recorded sessions: replay -> export windows -> synthetic set (planted
# ratings) -> train the four families (v+a+t) -> ONNX contract v1 with parity -> the shipped
# synthetic models in models/fusion/ and their parity windows in models/reference/fusion/.
# Development only (`make train-demo`); needs the venv of tools/fusion/requirements.txt.
#
# Sessions: the bundled demo, plus the shared fixture sessions (grid, selfie, still) when
# ../shared/fixtures (or $EMPATHIC_FIXTURES) has them.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv-fusion/bin/python}
BIN=./target/release/empathic
WORK=${WORK:-target/train-demo}
FIXTURES=${EMPATHIC_FIXTURES:-../shared/fixtures}
FAMILIES=${FAMILIES:-tfn ef-lstm lf-lstm amer}

rm -rf "$WORK" && mkdir -p "$WORK"
$BIN stories import demo/stories/stories.jsonl --db "$WORK/src.db"
sessions=(demo/session)
for s in grid selfie still; do
  [[ -d $FIXTURES/sessions/$s ]] && sessions+=("$FIXTURES/sessions/$s")
done
for s in "${sessions[@]}"; do
  $BIN replay "$s" --db "$WORK/src.db" --speed max >/dev/null
done
$BIN export windows --db "$WORK/src.db" --out "$WORK/export"
# 120 participants, the planted shifts (synth.py), and cue dropout at lr 1e-3 (train.py): what
# made the models learn the planted loudness and smiling rather than which recording a window
# is from (docs/prediction.md, "What the shipped synthetic models lean on").
$PY tools/fusion/synth.py --source "$WORK/export" --out "$WORK/synth" --participants 120
mkdir -p models/fusion
rm -rf models/reference/fusion
for f in $FAMILIES; do
  $PY tools/fusion/train.py --data "$WORK/synth" --family "$f" --subset v+a+t \
    --id "$f-vat-synthetic" --lr 1e-3 --cue-dropout 0.3 --out "models/fusion/$f-vat-synthetic.onnx" \
    --parity models/reference/fusion --sessions-csv "$WORK/$f.sessions.csv" 2>&1 | grep -v -i warn | tee "$WORK/$f.log"
done
$PY tools/fusion/manifest_entries.py
# The held-out participants' session-level cosines of one model, for the calibration test.
cp "$WORK/lf-lstm.sessions.csv" tests/data/fusion/synthetic-heldout-lf-lstm.csv
for f in $FAMILIES; do
  echo "$f-vat-synthetic sha256 $(sha256sum "models/fusion/$f-vat-synthetic.onnx" | cut -d' ' -f1)"
done
