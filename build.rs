//! Builds the one C shim of the crate: ALSA's message handler (src/capture/c/alsa_log.c).
//! Only the `sensing` build links ALSA; the collector build (`--no-default-features`) has no
//! microphone and needs neither the shim nor libasound.
//!
//! Also names the build (`empathic --version`, the stations' health): the commit and its
//! date from git (`EMPATHIC_BUILD_COMMIT` and `EMPATHIC_BUILD_DATE` override them, for a
//! build from a source tarball; without either, `unknown`). The commit's date, not the
//! build's: two builds of one commit are named alike.
fn main() {
    println!("cargo:rerun-if-changed=src/capture/c/alsa_log.c");
    build_identity();
    if std::env::var_os("CARGO_FEATURE_SENSING").is_none() {
        return;
    }
    cc::Build::new()
        .file("src/capture/c/alsa_log.c")
        .compile("empathic_alsa_log");
    println!("cargo:rustc-link-lib=asound");
}

fn build_identity() {
    for var in ["EMPATHIC_BUILD_COMMIT", "EMPATHIC_BUILD_DATE"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // A new commit moves HEAD or the branch it names (loose, or packed).
    for path in [".git/HEAD", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(reference) = std::fs::read_to_string(".git/HEAD")
        .ok()
        .and_then(|h| h.strip_prefix("ref: ").map(|r| r.trim().to_string()))
    {
        let path = format!(".git/{reference}");
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = std::env::var("EMPATHIC_BUILD_COMMIT")
        .ok()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let date = std::env::var("EMPATHIC_BUILD_DATE")
        .ok()
        .or_else(|| git(&["log", "-1", "--format=%cs"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=EMPATHIC_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=EMPATHIC_BUILD_DATE={date}");
}
