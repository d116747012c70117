//! Builds the one C shim of the crate: ALSA's message handler (src/capture/c/alsa_log.c).
fn main() {
    println!("cargo:rerun-if-changed=src/capture/c/alsa_log.c");
    cc::Build::new()
        .file("src/capture/c/alsa_log.c")
        .compile("empathic_alsa_log");
    println!("cargo:rustc-link-lib=asound");
}
