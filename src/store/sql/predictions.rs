//! Predictions: written by the fusion stage; removed with a failed session's partial rows.

use rusqlite::{params, Transaction};

use super::{ctx, NOW};
use crate::core::Prediction;
use crate::store::StoreError;

/// Writes predictions of session `id`.
pub fn write(tx: &Transaction<'_>, id: &str, rows: &[Prediction]) -> Result<(), StoreError> {
    let mut stmt = tx
        .prepare_cached(&format!(
            "INSERT OR REPLACE INTO predictions (session_id, window_index, predictor, story_id,
                in_play, raw_cosine, score, calibration, modalities, coverage, synthetic,
                created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, {NOW})"
        ))
        .map_err(ctx("writing predictions"))?;
    let mut why = tx
        .prepare_cached(
            "INSERT OR REPLACE INTO attributions (session_id, window_index, predictor, story_id,
                baseline, method, coalitions, cues)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(ctx("writing attributions"))?;
    for r in rows {
        if !(r.raw_cosine.is_finite() && r.score.is_finite()) {
            return Err(StoreError::Invalid {
                message: format!(
                    "window {}: predictor `{}` gave a non-finite prediction for story `{}`",
                    r.window_index, r.predictor, r.story_id
                ),
            });
        }
        let encode = |what: &'static str, v: serde_json::Result<String>| {
            v.map_err(|e| StoreError::Encode {
                what,
                message: e.to_string(),
            })
        };
        let modalities = encode("a modality subset", serde_json::to_string(&r.modalities))?;
        let coverage = encode("a coverage", serde_json::to_string(&r.coverage))?;
        stmt.execute(params![
            id,
            r.window_index as i64,
            r.predictor,
            r.story_id,
            if r.retrieved { "retrieved" } else { "shown" },
            r.raw_cosine,
            r.score,
            r.calibration,
            modalities,
            coverage,
            r.synthetic
        ])
        .map_err(ctx("writing predictions"))?;
        if let Some(a) = &r.attribution {
            if !(a.baseline.is_finite() && a.cues.iter().all(|c| c.value.is_finite())) {
                return Err(StoreError::Invalid {
                    message: format!(
                        "window {}: predictor `{}` gave a non-finite attribution for story `{}`",
                        r.window_index, r.predictor, r.story_id
                    ),
                });
            }
            let cues = encode("an attribution", serde_json::to_string(&a.cues))?;
            why.execute(params![
                id,
                r.window_index as i64,
                r.predictor,
                r.story_id,
                a.baseline,
                a.method,
                a.coalitions as i64,
                cues
            ])
            .map_err(ctx("writing attributions"))?;
        }
    }
    Ok(())
}

/// Removes every prediction of session `id`.
pub fn delete_for_session(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    tx.execute("DELETE FROM predictions WHERE session_id = ?1", [id])
        .map_err(ctx("removing a failed session's predictions"))?;
    Ok(())
}
