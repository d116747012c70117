//! `empathic export session ID --out DIR`: one session as CSV files a researcher opens in
//! pandas or a spreadsheet as they are (issue 55: researchers reached for `sqlite3`).
//!
//! Contract: into a new or empty folder, `utterances.csv`, `predictions.csv`,
//! `events.csv` and one `frames_<modality>.csv` per stored modality; comma-separated, a
//! header row, times in session seconds. The per-frame files follow OpenFace's CSV
//! conventions where they apply (`frame` counted from 1, `timestamp` in seconds, `success`
//! 0/1, then the modality's own column names as docs/features.md gives them); a frame
//! where the modality is absent has `success` 0 and empty values, never zeros. Nothing is
//! written when the session does not exist or is not complete.

use std::path::Path;

use crate::cli::{fail, Failure};
use crate::exit::ExitKind;
use crate::store::Store;

/// Writes the session's CSV files; returns each file's name and its data rows.
pub fn export_session(
    store: &Store,
    id: &str,
    out: &Path,
) -> Result<Vec<(String, usize)>, Failure> {
    let reads = store.export_reads();
    if reads.sessions(Some(id)).map_err(fail)?.is_empty() {
        return Err((
            ExitKind::BadInput,
            format!("no complete session `{id}` in {}", store.path().display()),
        ));
    }
    if out.exists() && std::fs::read_dir(out).map_err(io(out))?.next().is_some() {
        return Err((
            ExitKind::BadInput,
            format!(
                "{} is not empty: export into a new or empty folder",
                out.display()
            ),
        ));
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut written = Vec::new();
    let secs = |ns: u64| format!("{:.3}", ns as f64 / 1e9);

    let rows: Vec<Vec<String>> = store
        .utterances(id)
        .map_err(fail)?
        .into_iter()
        .map(|u| {
            vec![
                format!("{:.3}", u.start_secs),
                format!("{:.3}", u.end_secs),
                u.speaker,
                u.source,
                u.text,
            ]
        })
        .collect();
    written.push(write(
        out,
        "utterances.csv",
        &["start_s", "end_s", "speaker", "source", "text"],
        &rows,
    )?);

    let rows: Vec<Vec<String>> = store
        .prediction_series(id)
        .map_err(fail)?
        .into_iter()
        .map(|p| {
            vec![
                format!("{:.3}", p.end_secs),
                p.predictor,
                p.story_id,
                if p.retrieved { "retrieved" } else { "shown" }.to_string(),
                format!("{:.4}", p.score),
                p.calibration,
                u8::from(p.synthetic).to_string(),
            ]
        })
        .collect();
    written.push(write(
        out,
        "predictions.csv",
        &[
            "window_end_s",
            "predictor",
            "story_id",
            "in_play",
            "score",
            "calibration",
            "synthetic",
        ],
        &rows,
    )?);

    let rows: Vec<Vec<String>> = reads
        .events(id)
        .map_err(fail)?
        .into_iter()
        .map(|(t, kind, payload)| vec![secs(t), kind, payload])
        .collect();
    written.push(write(out, "events.csv", &["t_s", "type", "json"], &rows)?);

    let times = reads.frame_times(id).map_err(fail)?;
    for m in reads.modalities(id).map_err(fail)? {
        let mut values: std::collections::HashMap<u64, Vec<f32>> = Default::default();
        reads
            .frame_vectors(id, &m.name, |i, v| {
                values.insert(i, v);
            })
            .map_err(fail)?;
        let rows: Vec<Vec<String>> = times
            .iter()
            .map(|(i, t)| {
                let mut row = vec![(i + 1).to_string(), secs(*t)];
                match values.get(i).filter(|v| v.len() == m.columns.len()) {
                    Some(v) => {
                        row.push("1".into());
                        row.extend(v.iter().map(|x| x.to_string()));
                    }
                    None => {
                        row.push("0".into());
                        row.extend(std::iter::repeat_n(String::new(), m.columns.len()));
                    }
                }
                row
            })
            .collect();
        let mut header: Vec<&str> = vec!["frame", "timestamp", "success"];
        header.extend(m.columns.iter().map(String::as_str));
        written.push(write(
            out,
            &format!("frames_{}.csv", m.name),
            &header,
            &rows,
        )?);
    }
    Ok(written)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| {
        (
            ExitKind::Runtime,
            format!("cannot write {}: {e}", path.display()),
        )
    }
}

/// One CSV file, written whole or not at all.
fn write(
    out: &Path,
    name: &str,
    header: &[&str],
    rows: &[Vec<String>],
) -> Result<(String, usize), Failure> {
    let path = out.join(name);
    let mut w = csv::Writer::from_writer(Vec::new());
    let bad = |e: csv::Error| {
        (
            ExitKind::Runtime,
            format!("cannot encode {}: {e}", path.display()),
        )
    };
    w.write_record(header).map_err(bad)?;
    for r in rows {
        w.write_record(r).map_err(bad)?;
    }
    let bytes = w.into_inner().map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot encode {}: {e}", path.display()),
        )
    })?;
    crate::files::write_atomically(&path, &bytes)
        .map_err(|e| (ExitKind::Runtime, e.to_string()))?;
    Ok((name.to_string(), rows.len()))
}
