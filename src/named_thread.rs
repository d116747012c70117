//! Named threads: the one way this crate starts a thread.
//!
//! Contract: every thread has a name (`ps -L`, `top -H`, panics and journald show it) and
//! every tracing event it emits carries that name in a `thread` span. [`spawn`] starts a
//! detached-or-joined thread, [`spawn_scoped`] one inside a [`std::thread::scope`]. Both
//! return the OS error when the thread cannot start; the caller names it in its own error.
//! Threads start only in `runtime/`, in the collector's study-page thread (`cli/collect.rs`) and in
//! the alert command's pipe readers (`report/study/alert_command.rs`):
//! tests/it/architecture.rs holds the crate to that, and `clippy.toml` forbids
//! `std::thread::spawn` (an unnamed thread).

use std::thread::{JoinHandle, Scope, ScopedJoinHandle};

/// Starts `f` on a thread called `name`.
pub fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    let span_name = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _span = tracing::info_span!("thread", name = %span_name).entered();
            f()
        })
}

/// Starts `f` on a thread called `name` inside `scope`.
pub fn spawn_scoped<'scope, 'env, T: Send + 'scope>(
    scope: &'scope Scope<'scope, 'env>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::io::Result<ScopedJoinHandle<'scope, T>> {
    let span_name = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, move || {
            let _span = tracing::info_span!("thread", name = %span_name).entered();
            f()
        })
}
