//! The live station end to end, with no webcam and no sound card: `empathic run` as a
//! child process, its microphone a user-space PulseAudio null sink (Debian's `pulseaudio`,
//! installed by set-up) fed with the demo session's real speech by `paplay`, its camera the
//! demo session's Motion-JPEG video played in real time by the file camera, and a scripted
//! session over the control socket (all five phases, three stories, three ratings, a
//! survey item). Checked: the session is stored with features, windows and predictions;
//! replaying the folder the live run recorded stores the same rows, bit for bit; a camera
//! unplugged and plugged back mid-session leaves a gap both agree on; a microphone pulled
//! out (its source removed from the sound server) and plugged back is a counted
//! discontinuity; the service with no camera and no microphone tells systemd it is ready,
//! stays up, says so, and finds them when they appear; SIGTERM and SIGKILL mid-session
//! keep what was stored and the recording; a nearly full disk stops raw media first; ended
//! sessions reach the study's collector.
//!
//! The tests of this file run one at a time: each is a real-time session, and on a
//! two-core machine two at once would make the camera drop frames.
//!
//! One concern per module: `session` (a session end to end, stops and faults), `devices`
//! (camera and microphone lost and back), `control` (the control socket and the app's
//! tie), `study` (sync and the study page), `dialogue` (the reference dialogue app),
//! `upgrade` (a replaced binary restarts between sessions), `soak` (a month of sessions
//! with faults, accelerated). The harness is `tests/common/live.rs`.

#[path = "../common/mod.rs"]
mod common;

mod bystanders;
mod control;
mod devices;
mod dialogue;
mod session;
mod soak;
mod study;
mod upgrade;
