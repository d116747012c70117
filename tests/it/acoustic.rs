//! ComParE-2016 LLDs: agreement with openSMILE 3.0 references, block-size invariance, the
//! `extract audio` command, and the acoustic vectors replay stores.

use std::path::Path;

use crate::common::csv::read_csv;
use crate::common::*;
use empathic::cli::station::extract_audio::extract_audio_csv;
use empathic::core::LldSet;
use empathic::features::acoustic::{column_names, LldExtractor};
use proptest::prelude::*;

/// Per column, the share of rows with |err| <= 1e-4 + 1e-3 |ref| (the reference's last 4
/// rows excluded).
fn agreement(ours: &Path, reference: &Path) -> Vec<(String, f64)> {
    let (oh, o) = read_csv(ours);
    let (rh, r) = read_csv(reference);
    assert_eq!(&oh[1..], &rh[2..], "column names and order");
    let n = o.len().min(r.len() - 4);
    assert!(
        n + 5 >= r.len(),
        "{} rows vs reference {}",
        o.len(),
        r.len()
    );
    oh.iter()
        .enumerate()
        .skip(1)
        .map(|(c, name)| {
            let agree = (0..n)
                .filter(|&t| {
                    let (a, b) = (o[t][c], r[t][c + 1]);
                    (a - b).abs() <= 1e-4 + 1e-3 * b.abs()
                })
                .count();
            (name.clone(), agree as f64 / n as f64)
        })
        .collect()
}

/// Panics naming every column below 99 % agreement.
fn assert_agrees(ours: &Path, reference: &Path) {
    let failures: Vec<String> = agreement(ours, reference)
        .into_iter()
        .filter(|(_, share)| *share < 0.99)
        .map(|(name, share)| format!("{name}: {:.2} %", share * 100.0))
        .collect();
    assert!(
        failures.is_empty(),
        "{}: below 99 % agreement: {failures:?}",
        ours.display()
    );
}

/// eGeMAPS: the first 13 columns (loudness, alpha ratio, Hammarberg, slopes, flux, MFCC 1-4,
/// F0 semitones, jitter, shimmer dB) must agree like ComParE (>= 99 %). The HNR, harmonic
/// and formant columns (specified but not prototyped in the specification) measure 85-100 %
/// (docs/features.md, "Acoustic features"); the 80 % floor guards that level against regressions and
/// is not a target.
fn assert_egemaps_agrees(ours: &Path, reference: &Path) {
    let failures: Vec<String> = agreement(ours, reference)
        .iter()
        .enumerate()
        .filter(|(i, (_, share))| *share < if *i < 13 { 0.99 } else { 0.80 })
        .map(|(_, (name, share))| format!("{name}: {:.2} %", share * 100.0))
        .collect();
    assert!(failures.is_empty(), "{}: {failures:?}", ours.display());
}

#[test]
fn agrees_with_opensmile_on_committed_references() {
    let dir = root().join("tests/data/acoustic");
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wav") {
            let out = tmp.path().join("out.csv");
            extract_audio_csv(
                &path,
                &out,
                LldSet::Compare,
                &indicatif::ProgressBar::hidden(),
            )
            .unwrap();
            assert_agrees(&out, &path.with_extension("compare.csv"));
            extract_audio_csv(
                &path,
                &out,
                LldSet::Egemaps,
                &indicatif::ProgressBar::hidden(),
            )
            .unwrap();
            assert_egemaps_agrees(&out, &path.with_extension("egemaps.csv"));
            checked += 1;
        }
    }
    assert_eq!(
        checked, 2,
        "LibriVox 16 kHz and espeak-ng 22.05 kHz references"
    );
}

#[test]
fn agrees_with_opensmile_on_shared_sessions() {
    let Some(fixtures) = fixtures_or_skip("agrees_with_opensmile_on_shared_sessions") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for name in ["grid", "selfie", "still"] {
        let out = tmp.path().join(format!("{name}.csv"));
        extract_audio_csv(
            &fixtures.join(format!("sessions/{name}/audio.wav")),
            &out,
            LldSet::Compare,
            &indicatif::ProgressBar::hidden(),
        )
        .unwrap();
        assert_agrees(
            &out,
            &fixtures.join(format!("references/opensmile/{name}.compare.csv")),
        );
        extract_audio_csv(
            &fixtures.join(format!("sessions/{name}/audio.wav")),
            &out,
            LldSet::Egemaps,
            &indicatif::ProgressBar::hidden(),
        )
        .unwrap();
        assert_egemaps_agrees(
            &out,
            &fixtures.join(format!("references/opensmile/{name}.egemaps.csv")),
        );
    }
}

fn librivox_samples(secs: f32) -> Vec<f32> {
    let mut r =
        hound::WavReader::open(root().join("tests/data/acoustic/librivox-0880-16k.wav")).unwrap();
    r.samples::<i16>()
        .take((secs * 16_000.0) as usize)
        .map(|s| f32::from(s.unwrap()) / 32768.0)
        .collect()
}

fn rows_in_blocks(
    set: LldSet,
    signal: &[f32],
    sizes: &[usize],
) -> Vec<empathic::features::AudioRow> {
    let mut stage = LldExtractor::new(set, 16_000);
    let mut rows = Vec::new();
    let (mut pos, mut k) = (0, 0);
    while pos < signal.len() {
        let n = sizes[k % sizes.len()].clamp(1, signal.len() - pos);
        let t = empathic::capture::samples_to_ns(pos as u64, 16_000);
        rows.extend(stage.push_samples(t, &signal[pos..pos + n]));
        pos += n;
        k += 1;
    }
    rows.extend(stage.finish_rows());
    rows
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn output_does_not_depend_on_block_sizes(sizes in proptest::collection::vec(1usize..3000, 1..8)) {
        let signal = librivox_samples(1.0);
        let whole = rows_in_blocks(LldSet::Compare, &signal, &[signal.len()]);
        prop_assert_eq!(whole.len(), 95);
        prop_assert_eq!(whole, rows_in_blocks(LldSet::Compare, &signal, &sizes));
    }
}

fn write_wav(path: &Path, samples: &[i16]) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
}

#[test]
fn extract_cli_writes_the_columns_and_handles_bad_files() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.csv");
    let wav = root().join("tests/data/acoustic/librivox-0880-16k.wav");
    let o = empathic(&["extract", "audio", path_str(&wav), "--out", path_str(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (header, rows) = read_csv(&out);
    assert_eq!(header.len(), 66);
    assert_eq!(header[0], "frameTime");
    assert_eq!(&header[1..], column_names().as_slice());
    assert_eq!(rows.len(), 294);
    assert_eq!(rows[1][0], 0.01);
    assert!(rows.iter().flatten().all(|v| v.is_finite()));
    let o = empathic(&[
        "extract",
        "audio",
        path_str(&wav),
        "--out",
        path_str(&out),
        "--set",
        "egemaps",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (header, rows) = read_csv(&out);
    assert_eq!(header.len(), 26);
    assert_eq!(header[1], "Loudness_sma3");
    assert_eq!(header[25], "F3amplitudeLogRelF0_sma3nz");
    assert_eq!(rows.len(), 294);
    assert!(rows.iter().flatten().all(|v| v.is_finite()));

    // Empty and 10 ms files: a header and no rows.
    for (name, len) in [("empty.wav", 0usize), ("ten_ms.wav", 160)] {
        let p = tmp.path().join(name);
        write_wav(&p, &vec![1000; len]);
        let o = empathic(&["extract", "audio", path_str(&p), "--out", path_str(&out)]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let (h, r) = read_csv(&out);
        assert_eq!((h.len(), r.len()), (66, 0), "{name}");
    }
    // Digital silence and a DC offset: finite values everywhere.
    let p = tmp.path().join("dc.wav");
    write_wav(&p, &vec![8000; 16_000]);
    let o = empathic(&["extract", "audio", path_str(&p), "--out", path_str(&out)]);
    assert!(o.status.success());
    assert!(read_csv(&out).1.iter().flatten().all(|v| v.is_finite()));

    // A truncated file: exit 2, the file named, no CSV left behind.
    let bytes = std::fs::read(&wav).unwrap();
    let cut = tmp.path().join("cut.wav");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let target = tmp.path().join("cut.csv");
    let o = empathic(&[
        "extract",
        "audio",
        path_str(&cut),
        "--out",
        path_str(&target),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cut.wav") && stderr(&o).contains("truncated"));
    assert!(!target.exists());
    // Not a WAV at all.
    let junk = tmp.path().join("junk.wav");
    std::fs::write(&junk, b"RIFF....not really").unwrap();
    let o = empathic(&[
        "extract",
        "audio",
        path_str(&junk),
        "--out",
        path_str(&target),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("junk.wav"));
}

#[test]
fn replay_stores_the_pooled_acoustic_vector_of_every_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("a.db");
    let fast = config_without_vision_models(tmp.path());
    let o = replay_cli(&demo_session(), &db, Some(&fast));
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = tmp.path().join("demo.csv");
    extract_audio_csv(
        &demo_session().join("audio.wav"),
        &csv,
        LldSet::Compare,
        &indicatif::ProgressBar::hidden(),
    )
    .unwrap();
    let (_, rows) = read_csv(&csv);

    let conn = crate::common::store::open_db(&db);
    let present: i64 = conn
        .query_row(
            "SELECT count(*) FROM frame_features WHERE modality = 'acoustic_compare' AND present = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    // The last frame (27.933-28.0 s) has no complete 60 ms analysis frame.
    assert!(present >= 419, "{present}");
    let masks: i64 = conn
        .query_row(
            "SELECT count(*) FROM window_features WHERE modality = 'acoustic_compare' AND length(presence) = 120",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(masks, 21);
    for frame in [30u32, 200, 333] {
        let blob: Vec<u8> = conn
            .query_row(
                "SELECT vec FROM frame_features WHERE modality = 'acoustic_compare' AND frame_index = ?1",
                [frame],
                |r| r.get(0),
            )
            .unwrap();
        let stored = empathic::store::rows::blob_to_vec(&blob);
        assert_eq!(stored.len(), 65);
        // Rows whose start falls in the frame's 66.7 ms, averaged (non-pitch columns).
        let (lo, hi) = (f64::from(frame) / 15.0, f64::from(frame + 1) / 15.0);
        let inside: Vec<&Vec<f64>> = rows
            .iter()
            .filter(|r| r[0] >= lo - 1e-9 && r[0] < hi - 1e-9)
            .collect();
        assert!(inside.len() == 6 || inside.len() == 7);
        for c in [6usize, 8, 20, 40, 60] {
            let mean = inside.iter().map(|r| r[c + 1]).sum::<f64>() / inside.len() as f64;
            assert!(
                (f64::from(stored[c]) - mean).abs() <= 1e-5 + 1e-5 * mean.abs(),
                "frame {frame} column {c}: {} vs {mean}",
                stored[c]
            );
        }
    }
}

#[test]
fn egemaps_is_block_size_invariant_and_finite_on_hostile_input() {
    let signal = librivox_samples(1.5);
    let run = |sizes: &[usize]| rows_in_blocks(LldSet::Egemaps, &signal, sizes);
    let whole = run(&[signal.len()]);
    assert_eq!(whole.len(), 145);
    assert_eq!(whole, run(&[7, 1000, 321]));
    assert!(whole.iter().all(|r| r.values.len() == 25));

    let mut stage = LldExtractor::new(LldSet::Egemaps, 16_000);
    let mut hostile: Vec<f32> = vec![0.0; 8000];
    hostile.extend((0..8000).map(|i| if i % 50 < 25 { 1.0 } else { -1.0 }));
    hostile.extend(std::iter::repeat_n(0.3, 8000));
    let mut rows = stage.push_samples(0, &hostile);
    rows.extend(stage.finish_rows());
    assert!(rows.iter().all(|r| r.values.iter().all(|v| v.is_finite())));
}

#[test]
fn replay_with_the_egemaps_set_stores_25_values_a_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("c.toml");
    std::fs::write(
        &config,
        "[audio]\nlld_set = \"egemaps\"\n[models]\nappearance_encoder = \"\"\n",
    )
    .unwrap();
    let db = tmp.path().join("e.db");
    let o = replay_cli(&demo_session(), &db, Some(&config));
    assert!(o.status.success(), "{}", stderr(&o));
    let conn = crate::common::store::open_db(&db);
    let (dims, present): (i64, i64) = conn
        .query_row(
            "SELECT m.dims, (SELECT count(*) FROM frame_features f WHERE f.modality = m.name AND f.present = 1)
             FROM modalities m WHERE m.name = 'acoustic_egemaps'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(dims, 25);
    assert!(present >= 419, "{present}");
    // A typo in the set is named.
    std::fs::write(&config, "[audio]\nlld_set = \"gemaps\"\n").unwrap();
    let o = empathic(&["doctor", "--config", path_str(&config)]);
    assert!(
        stdout(&o).contains("lld_set") || stdout(&o).contains("gemaps"),
        "{}",
        stdout(&o)
    );
}
