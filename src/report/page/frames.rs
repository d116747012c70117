//! The session page's per-frame series: a modality's stored values of named columns as
//! (session seconds, value) points, read once for the plots that draw them.

use super::*;

/// A modality's per-frame values of the named columns, as (session seconds, value) per
/// column; frames where it is absent give no point. `None` when the session lacks it.
pub(super) struct Frames {
    pub(super) columns: Vec<String>,
    /// Per column, its points.
    pub(super) values: Vec<Vec<(f64, f64)>>,
    /// Per frame, present or not (for presence plots).
    pub(super) present: Vec<(f64, f64)>,
    /// Drawn from the stored window means (per-frame values are not in this database).
    pub(super) from_windows: bool,
}

/// The caption under plots drawn from window means.
pub(super) const FROM_WINDOWS: &str = "Drawn from the stored window means, one point per 8-s window: per-frame values are not synced to this database.";

/// Where a page reads per-frame vectors: the session, its modalities (read once per page)
/// and its frame rate.
pub(super) struct FrameSource<'a> {
    pub(super) store: &'a Store,
    pub(super) id: &'a str,
    pub(super) modalities: &'a [ExportModality],
    pub(super) fps: f64,
    pub(super) frames: u64,
}

/// Modality `modality`'s columns that `wanted` picks, per frame; `None` when the session
/// does not have the modality.
pub(super) fn read_frames(
    src: &FrameSource<'_>,
    modality: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Option<Frames>, PageError> {
    let (store, id, fps, frames) = (src.store, src.id, src.fps, src.frames);
    let reads = store.export_reads();
    let Some(m) = src.modalities.iter().find(|m| m.name == modality) else {
        return Ok(None);
    };
    let picked: Vec<(usize, String)> = m
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| wanted(c))
        .map(|(i, c)| (i, c.clone()))
        .collect();
    let mut values = vec![Vec::new(); picked.len()];
    // Each frame at its stored time (issue 55: frames drawn at index / (frames / duration)
    // were stretched to the audio's length when the video was shorter); a database without
    // frame rows (a central view) falls back to the nominal grid.
    let times: Vec<(u64, u64)> = reads.frame_times(id)?;
    let at: std::collections::HashMap<u64, f64> =
        times.iter().map(|&(i, t)| (i, t as f64 / 1e9)).collect();
    let t_of = |i: u64| at.get(&i).copied().unwrap_or(i as f64 / fps);
    let mut seen = vec![false; frames as usize];
    reads.frame_vectors(id, modality, |i, v| {
        let t = t_of(i);
        if let Some(s) = seen.get_mut(i as usize) {
            *s = true;
        }
        for (k, (col, _)) in picked.iter().enumerate() {
            if let Some(x) = v.get(*col) {
                values[k].push((t, f64::from(*x)));
            }
        }
    })?;
    if !seen.iter().any(|s| *s) {
        // No per-frame features (a central database that does not sync them): the stored
        // window means stand in, one point per window at its middle, presence as the
        // window's present fraction.
        let windows = reads.windows(id, None)?;
        let mut present = Vec::new();
        reads.window_means(id, modality, |w, n, mean| {
            let Some(win) = windows.iter().find(|x| x.window_index == w) else {
                return;
            };
            let t = (win.start_secs + win.end_secs) / 2.0;
            let span = win.end_frame.saturating_sub(win.start_frame).max(1);
            present.push((t, n as f64 / span as f64));
            if let Some(v) = mean {
                for (k, (col, _)) in picked.iter().enumerate() {
                    if let Some(x) = v.get(*col) {
                        values[k].push((t, f64::from(*x)));
                    }
                }
            }
        })?;
        if !present.is_empty() {
            return Ok(Some(Frames {
                columns: picked.into_iter().map(|(_, c)| c).collect(),
                values,
                present,
                from_windows: true,
            }));
        }
    }
    Ok(Some(Frames {
        columns: picked.into_iter().map(|(_, c)| c).collect(),
        values,
        from_windows: false,
        present: seen
            .iter()
            .enumerate()
            .map(|(i, p)| (t_of(i as u64), f64::from(u8::from(*p))))
            .collect(),
    }))
}

impl Frames {
    pub(super) fn column(&self, name: &str) -> Option<&Vec<(f64, f64)>> {
        self.columns
            .iter()
            .position(|c| c == name)
            .map(|i| &self.values[i])
    }
}
