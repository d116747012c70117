//! ALSA's library messages through `tracing` instead of stderr (in the binary: the library
//! crate forbids `unsafe`, and this is a foreign callback).
//!
//! Contract: after [`route_messages`] (called once by `main` before any device is opened),
//! every message libasound would print (`ALSA lib pcm.c:...: Unknown PCM ...`: dozens while
//! probing for a microphone that is not there) is logged at debug under the target
//! `alsa`, with ALSA's file, line and function. Whether a device is missing is the capture
//! code's to say, once, at warn; these lines are how it found out.

use std::ffi::{c_char, c_int, CStr};

extern "C" {
    fn empathic_alsa_route_messages() -> c_int;
}

/// Called by the C shim for each ALSA message.
#[no_mangle]
extern "C" fn empathic_alsa_message(
    file: *const c_char,
    line: c_int,
    function: *const c_char,
    err: c_int,
    message: *const c_char,
) {
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: ALSA passes NUL-terminated strings (or null), valid for the call.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    tracing::debug!(
        target: "alsa",
        file = %text(file),
        line,
        function = %text(function),
        err,
        "{}",
        text(message)
    );
}

/// Routes ALSA's messages through `tracing` for the rest of the process.
pub fn route_messages() {
    // SAFETY: sets a process-wide function pointer in libasound; the handler is a plain
    // C function that only formats and calls back into Rust.
    let rc = unsafe { empathic_alsa_route_messages() };
    if rc != 0 {
        tracing::debug!("ALSA messages not routed (snd_lib_error_set_handler returned {rc})");
    }
}
