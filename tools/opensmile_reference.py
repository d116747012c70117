#!/usr/bin/env python3
"""Writes openSMILE 3.0 LLD reference CSVs for the acoustic agreement tests.

Development only: openSMILE is research-licensed and is never part of the runtime, the
tests or CI; only the CSVs it made are committed (tests/data/acoustic/*.compare.csv).

    python3 -m venv .venv-smile && .venv-smile/bin/pip install opensmile==2.6.0
    .venv-smile/bin/python tools/opensmile_reference.py tests/data/acoustic/*.wav

For each WAV it writes `<name>.compare.csv` (`start_s, end_s` then the 65 ComParE_2016
LLDs) and `<name>.egemaps.csv` (the 25 eGeMAPSv02 LLDs) beside it, like
../shared/fixtures/references/opensmile. Multi-channel files are
mixed down by averaging (all channels, `mixdown=True`), as the runtime does.

Inputs (all from registry packages): `librivox-0880-*` is
/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav from
Debian's pocketsphinx-testdata (LibriVox, public domain), as is (16 kHz), resampled to
44.1 kHz with sox, and as a stereo file with the right channel at 0.3 gain (sox remix 1 1v0.3);
`espeak-22k.wav` is espeak-ng 1.51 (Debian) saying "I finally told my father that I was proud
of him, and he smiled." with `-v en-us -s 150` (22.05 kHz).
"""
import sys
from pathlib import Path

import audiofile
import opensmile


def main():
    sets = {"compare": opensmile.FeatureSet.ComParE_2016, "egemaps": opensmile.FeatureSet.eGeMAPSv02}
    for wav in map(Path, sys.argv[1:]):
        for suffix, feature_set in sets.items():
            # All channels, averaged (the default would take channel 0 only).
            smile = opensmile.Smile(
                feature_set=feature_set,
                feature_level=opensmile.FeatureLevel.LowLevelDescriptors,
                channels=list(range(audiofile.channels(str(wav)))),
                mixdown=True,
            )
            df = smile.process_file(str(wav))
            out = df.reset_index()
            out.insert(0, "start_s", out.pop("start").dt.total_seconds())
            out.insert(1, "end_s", out.pop("end").dt.total_seconds())
            out = out.drop(columns=["file"], errors="ignore")
            target = wav.with_suffix(f".{suffix}.csv")
            out.to_csv(target, index=False, float_format="%.9g")
            print(f"{target}: {len(out)} rows")


if __name__ == "__main__":
    main()
