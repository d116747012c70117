//! At service start: finish recordings a crash interrupted, and delete raw media past
//! `recording.retention_days`.

use std::time::Duration;

use crate::config::Config;
use crate::session::record::repair_interrupted;

/// Finishes folders a crash left `recording`, and says what was done.
pub(super) fn finish_interrupted_recordings(config: &Config) {
    for (dir, result) in repair_interrupted(&config.recording.dir) {
        match result {
            Ok(note) => tracing::warn!(dir = %dir.display(), "recording repaired: {note}"),
            Err(e) => {
                tracing::error!(dir = %dir.display(), "recording could not be repaired (left as it is): {e}")
            }
        }
    }
}

/// Deletes the raw media of recordings older than `recording.retention_days`.
pub(super) fn apply_retention(config: &Config) {
    let days = config.recording.retention_days;
    if days == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(&config.recording.dir) else {
        return;
    };
    let limit = Duration::from_secs(days * 86_400);
    for entry in entries.flatten() {
        let dir = entry.path();
        let age = std::fs::metadata(dir.join("session.json"))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if age.is_some_and(|a| a > limit) {
            for media in ["video.avi", "audio.wav"] {
                let p = dir.join(media);
                if p.exists() {
                    match std::fs::remove_file(&p) {
                        Ok(()) => {
                            tracing::info!(file = %p.display(), "raw media past retention deleted")
                        }
                        Err(e) => {
                            tracing::warn!(file = %p.display(), "cannot delete raw media past retention: {e}")
                        }
                    }
                }
            }
        }
    }
}
