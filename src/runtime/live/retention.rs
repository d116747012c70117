//! At service start: finish recordings a crash interrupted. At start and before every
//! session's recording: delete raw media past `recording.retention_days`, by the sessions'
//! stored ends, never on a stepped clock, never through a link.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::capture::record::repair_interrupted;
use crate::clock::utc_at;
use crate::config::Config;
use crate::files::beneath::{Beneath, Kind};
use crate::store::{Owner, Store};

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

/// Deletes the raw media (`video.avi`, `audio.wav`) of recordings that ended more than
/// `recording.retention_days` ago, beneath the recordings folder only (`files::beneath`:
/// a linked folder or file is never followed, only named in the log).
///
/// A recording's end is its session's stored end (the row's last write; `session.json`'s
/// modification time for a folder the store does not know). A clock step deletes nothing:
/// when the clock is behind the newest stored session, or when a session stored in this
/// boot would have ended before the boot began (the wall clock jumped ahead since), the
/// step is logged and nothing is deleted this time.
pub(super) fn apply_retention(config: &Config, store: &Store) {
    let days = config.recording.retention_days;
    if days == 0 {
        return;
    }
    // Checked: a number of days too large for seconds keeps everything (the config refuses
    // more than a century, this holds whatever the caller passes).
    let Some(limit) = days.checked_mul(86_400).map(Duration::from_secs) else {
        return;
    };
    let now = SystemTime::now();
    let Some(cutoff) = now.checked_sub(limit).map(utc_at) else {
        return;
    };
    let ends = match store.session_ends() {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("raw media retention skipped: {e}");
            return;
        }
    };
    if let Some(step) = clock_step(&ends, now) {
        tracing::warn!("raw media retention skipped, nothing deleted: {step}");
        return;
    }
    let ended: HashMap<&str, &str> = ends
        .iter()
        .map(|(id, end, _)| (id.as_str(), end.as_str()))
        .collect();
    let Ok(root) = Beneath::open(&config.recording.dir) else {
        return;
    };
    let Ok(entries) = root.entries() else {
        return;
    };
    for (name, kind) in entries {
        if kind == Kind::Link {
            tracing::warn!(link = %root.shown(&name).display(), "a symbolic link in the recordings folder: not followed by retention");
            continue;
        }
        if kind != Kind::Folder {
            continue;
        }
        let Ok(folder) = root.folder(&name) else {
            continue;
        };
        let id = folder
            .read_to_string("session.json")
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["session_id"].as_str().map(str::to_string))
            .unwrap_or_else(|| name.to_string_lossy().into_owned());
        let end = match ended.get(id.as_str()) {
            Some(end) => end.to_string(),
            None => match folder.modified("session.json") {
                Ok(t) => utc_at(t),
                Err(_) => continue,
            },
        };
        if end >= cutoff {
            continue;
        }
        for media in ["video.avi", "audio.wav"] {
            let shown = folder.shown(media);
            match folder.kind(media) {
                Ok(Some(Kind::File)) => match folder.remove_file(media) {
                    Ok(_) => {
                        tracing::info!(file = %shown.display(), "raw media past retention deleted")
                    }
                    Err(e) => {
                        tracing::warn!(file = %shown.display(), "cannot delete raw media past retention: {e}")
                    }
                },
                Ok(Some(Kind::Link)) => {
                    tracing::warn!(file = %shown.display(), "a symbolic link where raw media belong: not followed by retention")
                }
                _ => {}
            }
        }
    }
}

/// Why the wall clock cannot be trusted to age recordings now, if it cannot: it is behind
/// the newest stored session's end, or a session stored in this boot ended before the boot
/// began by the clock's reckoning (the clock jumped ahead since).
fn clock_step(ends: &[(String, String, String)], now: SystemTime) -> Option<String> {
    let now_text = utc_at(now);
    if let Some((id, newest, _)) = ends.iter().max_by(|a, b| a.1.cmp(&b.1)) {
        if *newest > now_text {
            return Some(format!(
                "the clock ({now_text}) is behind session {id}'s stored end ({newest}): it was stepped back"
            ));
        }
    }
    let boot = Owner::current().boot_id;
    let up = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let up = Duration::new(
        up.tv_sec.max(0) as u64,
        up.tv_nsec.clamp(0, 999_999_999) as u32,
    );
    let booted_at = utc_at(now.checked_sub(up)?);
    ends.iter()
        .filter(|(_, end, b)| !boot.is_empty() && *b == boot && *end < booted_at)
        .min_by(|a, b| a.1.cmp(&b.1))
        .map(|(id, end, _)| {
            format!(
                "session {id} ended at {end} in this boot, which by the clock began at {booted_at}: the clock was stepped ahead"
            )
        })
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
        let store = Store::open(&dir.path().join("station.db")).unwrap();
        // Days whose seconds overflow u64 (once wrapped to a few hours).
        for days in [u64::MAX / 86_400 + 1, u64::MAX, 3, 36_500] {
            config.recording.retention_days = days;
            apply_retention(&config, &store);
            assert!(rec.join("video.avi").exists(), "deleted with {days} days");
        }
        config.recording.retention_days = 1;
        apply_retention(&config, &store);
        assert!(!rec.join("video.avi").exists() && rec.join("session.json").exists());
    }

    #[test]
    fn retention_follows_no_link_and_deletes_nothing_on_a_stepped_clock() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("recordings");
        let outside = dir.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        for f in ["session.json", "video.avi", "audio.wav"] {
            std::fs::write(outside.join(f), b"x").unwrap();
        }
        std::fs::create_dir_all(root.join("s-1")).unwrap();
        std::fs::write(root.join("s-1/session.json"), b"{}").unwrap();
        std::os::unix::fs::symlink(outside.join("video.avi"), root.join("s-1/video.avi")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("s-2")).unwrap();
        let old = SystemTime::now() - Duration::from_secs(40 * 86_400);
        for f in [outside.join("session.json"), root.join("s-1/session.json")] {
            std::fs::File::options()
                .write(true)
                .open(f)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        let mut config = Config::default();
        config.recording.dir = root.clone();
        config.recording.retention_days = 1;
        let store = Store::open(&dir.path().join("station.db")).unwrap();
        apply_retention(&config, &store);
        for f in ["session.json", "video.avi", "audio.wav"] {
            assert!(outside.join(f).exists(), "{f} deleted through a link");
        }
        assert!(std::fs::symlink_metadata(root.join("s-1/video.avi")).is_ok());

        // A session stored with an end ahead of the clock: the clock was stepped back.
        let ends = vec![(
            "s-9".to_string(),
            "2999-01-01T00:00:00.000Z".to_string(),
            String::new(),
        )];
        let step = clock_step(&ends, SystemTime::now()).unwrap();
        assert!(step.contains("stepped back"), "{step}");
        // A session of this boot that ended "before the boot began": stepped ahead.
        let boot = Owner::current().boot_id;
        let ends = vec![(
            "s-8".to_string(),
            "2001-01-01T00:00:00.000Z".to_string(),
            boot,
        )];
        let step = clock_step(&ends, SystemTime::now()).unwrap();
        assert!(step.contains("stepped ahead"), "{step}");
        // Sessions of another boot, ended in the past: the clock is believed.
        let ends = vec![(
            "s-7".to_string(),
            "2001-01-01T00:00:00.000Z".to_string(),
            "other".to_string(),
        )];
        assert!(clock_step(&ends, SystemTime::now()).is_none());
    }
}
