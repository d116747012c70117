//! Frames and windows with their per-modality features.

use rusqlite::{params, Transaction};

use super::ctx;
use crate::core::{FrameRecord, ModalityId};
use crate::store::rows::{vec_to_blob, WindowRow};
use crate::store::StoreError;

/// Which rows of a frame record to write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FrameRows {
    /// The frame and every modality's row.
    All,
    /// The frame and every modality's row but this one's (not known yet: a live frame
    /// before its words).
    AllBut(ModalityId),
    /// Only this modality's row (the frame was written before it was known).
    Only(ModalityId),
}

impl FrameRows {
    fn writes(self, m: usize) -> bool {
        match self {
            FrameRows::All => true,
            FrameRows::AllBut(x) => x.index() != m,
            FrameRows::Only(x) => x.index() == m,
        }
    }
}

/// Writes one frame record of session `id` (the rows `rows` says); `modality_names` in
/// layout order.
pub fn write_frame(
    tx: &Transaction<'_>,
    id: &str,
    modality_names: &[&'static str],
    record: &FrameRecord,
    rows: FrameRows,
) -> Result<(), StoreError> {
    if !matches!(rows, FrameRows::Only(_)) {
        write_frame_row(tx, id, record)?;
    }
    let mut st = tx
        .prepare_cached(
            "INSERT INTO frame_features (session_id, modality, frame_index, present, vec)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(ctx("writing frame features"))?;
    for (m, (name, v)) in modality_names.iter().zip(&record.features).enumerate() {
        if !rows.writes(m) {
            continue;
        }
        st.execute(params![
            id,
            name,
            record.index as i64,
            v.is_some(),
            v.as_deref().map(vec_to_blob)
        ])
        .map_err(ctx("writing frame features"))?;
    }
    Ok(())
}

fn write_frame_row(tx: &Transaction<'_>, id: &str, record: &FrameRecord) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO frames (session_id, frame_index, t_ns, decoded) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            record.index as i64,
            record.t_ns as i64,
            record.decoded
        ])
    })
    .map_err(ctx("writing frames"))?;
    Ok(())
}

/// Writes one window of session `id`.
pub fn write_window(tx: &Transaction<'_>, id: &str, w: &WindowRow) -> Result<(), StoreError> {
    let q = &w.quality;
    tx.prepare_cached(
        "INSERT INTO windows (session_id, window_index, start_frame, end_frame, start_ns, end_ns,
            phase, video_presence, audio_presence, brightness, sharpness, level_dbfs,
            voice_activity, clipped_fraction)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            w.index as i64,
            w.start_frame as i64,
            w.end_frame as i64,
            w.start_ns as i64,
            w.end_ns as i64,
            w.phase.map(|p| p.as_str()),
            q.video_presence,
            q.audio_presence,
            q.brightness,
            q.sharpness,
            q.level_dbfs,
            q.voice_activity,
            q.clipped_fraction
        ])
    })
    .map_err(ctx("writing windows"))?;
    let mut st = tx
        .prepare_cached(
            "INSERT INTO window_features (session_id, window_index, modality, present_frames, presence, mean)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(ctx("writing window features"))?;
    for m in &w.modalities {
        st.execute(params![
            id,
            w.index as i64,
            m.name,
            m.present_frames as i64,
            m.presence,
            m.mean.as_deref().map(vec_to_blob)
        ])
        .map_err(ctx("writing window features"))?;
    }
    Ok(())
}

/// Removes session `id`'s frames and windows with their features.
pub fn delete_for_session(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    for table in ["window_features", "windows", "frame_features", "frames"] {
        tx.execute(&format!("DELETE FROM {table} WHERE session_id = ?1"), [id])
            .map_err(ctx("removing a failed session's partial rows"))?;
    }
    Ok(())
}
