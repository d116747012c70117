//! Builds the one C shim of the crate: ALSA's message handler (src/capture/c/alsa_log.c).
//! Only the `sensing` build links ALSA; the collector build (`--no-default-features`) has no
//! microphone and needs neither the shim nor libasound.
fn main() {
    println!("cargo:rerun-if-changed=src/capture/c/alsa_log.c");
    if std::env::var_os("CARGO_FEATURE_SENSING").is_none() {
        return;
    }
    cc::Build::new()
        .file("src/capture/c/alsa_log.c")
        .compile("empathic_alsa_log");
    println!("cargo:rustc-link-lib=asound");
}
