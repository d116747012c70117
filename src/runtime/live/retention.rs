//! At service start: finish recordings a crash interrupted. At start and before every
//! session's recording: delete raw media past `recording.retention_days`.

use std::time::Duration;

use crate::capture::record::repair_interrupted;
use crate::config::Config;

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
    // Checked: a number of days too large for seconds keeps everything (the config refuses
    // more than a century, this holds whatever the caller passes).
    let Some(limit) = days.checked_mul(86_400).map(Duration::from_secs) else {
        return;
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_young_media_whatever_the_number_of_days() {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("s-1");
        std::fs::create_dir_all(&rec).unwrap();
        for f in ["session.json", "video.avi", "audio.wav"] {
            std::fs::write(rec.join(f), b"x").unwrap();
        }
        let two_days_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 86_400);
        std::fs::File::options()
            .write(true)
            .open(rec.join("session.json"))
            .unwrap()
            .set_modified(two_days_ago)
            .unwrap();
        let mut config = Config::default();
        config.recording.dir = dir.path().to_path_buf();
        // Days whose seconds overflow u64 (once wrapped to a few hours).
        for days in [u64::MAX / 86_400 + 1, u64::MAX, 3, 36_500] {
            config.recording.retention_days = days;
            apply_retention(&config);
            assert!(rec.join("video.avi").exists(), "deleted with {days} days");
        }
        config.recording.retention_days = 1;
        apply_retention(&config);
        assert!(!rec.join("video.avi").exists() && rec.join("session.json").exists());
    }
}
