//! Headless Chromium (Debian's `chromium`, installed by `scripts/setup.sh`), as staff open
//! the pages: the DOM after load, and a screenshot's pixel spread (0 = blank).

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn chromium() -> PathBuf {
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(o) = Command::new("which").arg(c).output() {
            if o.status.success() {
                return PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            }
        }
    }
    panic!("headless Chromium is needed to check the reports: run scripts/setup.sh (Debian package `chromium`)");
}

pub fn browser(page: &Path, extra: &[&str]) -> std::process::Output {
    let url = format!("file://{}", page.display());
    let profile = tempfile::tempdir().unwrap();
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            // Containers often have a tiny /dev/shm; Chromium then crashes without this.
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            // No network: a page that needed one would render incomplete.
            "--proxy-server=127.0.0.1:9",
            &format!("--user-data-dir={}", profile.path().display()),
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium")
}

/// The DOM after load, and a screenshot's pixel spread (0 = blank).
pub fn open_in_chromium(page: &Path) -> (String, f64) {
    let dom = browser(page, &["--dump-dom"]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let png = page.with_extension("png");
    let shot = browser(
        page,
        &[
            "--window-size=1000,2400",
            &format!("--screenshot={}", png.display()),
        ],
    );
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    use opencv::core::{mean_std_dev, Mat};
    use opencv::prelude::*;
    let img = opencv::imgcodecs::imread(png.to_str().unwrap(), opencv::imgcodecs::IMREAD_GRAYSCALE)
        .unwrap();
    assert!(img.rows() > 0, "no screenshot at {}", png.display());
    let (mut mean, mut std) = (Mat::default(), Mat::default());
    mean_std_dev(&img, &mut mean, &mut std, &opencv::core::no_array()).unwrap();
    let spread = *std.at::<f64>(0).unwrap();
    (String::from_utf8_lossy(&dom.stdout).into_owned(), spread)
}
