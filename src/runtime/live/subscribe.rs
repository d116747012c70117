//! Subscriptions on the control socket: the live perception stream a robot's dialogue app
//! listens to (`{"type":"subscribe","topics":[...]}`).
//!
//! Contract: [`Subscribers`] is the pipeline's [`Observer`] for the live service (and the
//! service's own, for session and device messages). Each message is one JSON object with
//! `topic`, `t_ms` (session time when it was sent), `at_ms` (the session time it describes)
//! and the topic's fields, handed to every subscriber of its topic. Each subscriber has its
//! own bounded queue ([`SUBSCRIBER_QUEUE`] messages): when it is full the oldest message is
//! dropped and counted, and the subscriber's next message is preceded by
//! `{"topic":"dropped","count":N,...}`; so a slow or stuck subscriber never slows the
//! pipeline or another subscriber. A subscriber that does not read at all (its socket's
//! buffer full, no byte taken for [`SLOW_CONSUMER`]) is dropped: its connection is closed
//! and its slot freed. Messages between sessions carry `t_ms` 0.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;
use crate::runtime::pipeline::{Observer, Topic};
use crate::runtime::queues::{policy_queue, Overflow, PolicyReceiver, PolicySender};
use crate::Nanos;

/// Messages a subscriber may have waiting before the oldest are dropped.
pub const SUBSCRIBER_QUEUE: usize = 256;
/// A subscriber whose socket takes no byte for this long is dropped (the slow-consumer
/// rule: a reader that keeps up takes a line within milliseconds; the kernel's buffer holds
/// a few hundred lines before a write waits at all).
pub const SLOW_CONSUMER: Duration = Duration::from_secs(5);

/// One subscriber's topics and queue.
struct Subscriber {
    topics: Vec<Topic>,
    tx: PolicySender<String>,
}

/// Every subscriber of the service.
pub(super) struct Subscribers {
    list: Mutex<Vec<Arc<Subscriber>>>,
    clock: Arc<dyn Clock>,
    /// The running session's start on the clock, 0 between sessions.
    start_clock_ns: AtomicU64,
}

impl Subscribers {
    pub(super) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            list: Mutex::new(Vec::new()),
            clock,
            start_clock_ns: AtomicU64::new(0),
        }
    }

    /// Session time is counted from `start_clock_ns` (0: no session).
    pub(super) fn set_session_start(&self, start_clock_ns: Nanos) {
        self.start_clock_ns.store(start_clock_ns, Ordering::SeqCst);
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Subscriber>>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The running session's time now (0 between sessions).
    pub(super) fn now_ms(&self) -> u64 {
        match self.start_clock_ns.load(Ordering::SeqCst) {
            0 => 0,
            start => self.clock.now_ns().saturating_sub(start) / 1_000_000,
        }
    }

    /// Streams `first`, then `topics`, to `out` until it closes or `stop` is set; the
    /// connection is the subscriber's from now on.
    pub(super) fn serve(
        &self,
        topics: Vec<Topic>,
        first: Vec<String>,
        mut out: UnixStream,
        stop: &AtomicBool,
    ) {
        let (tx, rx) = policy_queue::<String>(SUBSCRIBER_QUEUE, Overflow::DropOldest);
        for line in first {
            let _ = tx.send(line);
        }
        let me = Arc::new(Subscriber { topics, tx });
        self.list().push(me.clone());
        // Writes never wait long, so a stop is seen; a line is never cut (see `write_line`).
        let _ = out.set_write_timeout(Some(Duration::from_millis(200)));
        let reported = self.stream(&me, &rx, &mut out, stop);
        self.list().retain(|s| !Arc::ptr_eq(s, &me));
        tracing::debug!(dropped = me.tx.dropped(), reported, "subscriber gone");
    }

    /// The subscriber's loop; returns the drops it reported.
    fn stream(
        &self,
        me: &Subscriber,
        rx: &PolicyReceiver<String>,
        out: &mut UnixStream,
        stop: &AtomicBool,
    ) -> u64 {
        let mut reported = 0u64;
        // A probe of the connection while nothing is sent: a subscriber that went away
        // between sessions must not hold one of the control socket's slots.
        let mut probe = out.try_clone().ok();
        if let Some(p) = &probe {
            let _ = p.set_read_timeout(Some(Duration::from_millis(1)));
        }
        while !stop.load(Ordering::SeqCst) {
            let line = match rx.receiver().recv_timeout(Duration::from_millis(200)) {
                Ok(line) => line,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if probe.as_mut().is_some_and(peer_gone) {
                        break;
                    }
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            };
            let dropped = me.tx.dropped();
            if dropped > reported {
                let note = serde_json::json!({
                    "topic": "dropped",
                    "t_ms": self.now_ms(),
                    "count": dropped - reported,
                    "total": dropped,
                });
                if !write_line(out, &note.to_string(), stop) {
                    break;
                }
                reported = dropped;
            }
            if !write_line(out, &line, stop) {
                break;
            }
        }
        reported
    }
}

/// Whether the subscriber closed its end (anything it sends after subscribing is ignored).
fn peer_gone(probe: &mut UnixStream) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    use std::io::Read;
    // Gone means closed, not half-closed: a subscriber that shut down its writing side
    // (it has nothing more to ask) still reads its stream. Only a full close sets HUP.
    let mut fds = [PollFd::new(&*probe, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&zero)) {
        Ok(_)
            if fds[0]
                .revents()
                .intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) =>
        {
            return true
        }
        Ok(_) => {}
        Err(_) => return false,
    }
    // Whatever it sends after subscribing is read and dropped (its end of file, or
    // bytes, would otherwise keep the socket readable).
    let mut buf = [0u8; 256];
    let _ = probe.read(&mut buf);
    false
}

/// Writes `line` and a newline whole, waiting as long as the reader needs unless `stop`
/// is set; false when the connection is gone (or the service stops mid-line).
fn write_line(out: &mut UnixStream, line: &str, stop: &AtomicBool) -> bool {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    let mut at = 0;
    let mut progressed = std::time::Instant::now();
    while at < bytes.len() {
        match out.write(&bytes[at..]) {
            Ok(0) => return false,
            Ok(n) => {
                at += n;
                progressed = std::time::Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                if stop.load(Ordering::SeqCst) {
                    return false;
                }
                if progressed.elapsed() >= SLOW_CONSUMER {
                    tracing::warn!(
                        "a subscriber took no byte for {} s: dropped (it does not read its stream)",
                        SLOW_CONSUMER.as_secs()
                    );
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

impl Observer for Subscribers {
    fn observe(&self, topic: Topic, at_ms: u64, fields: serde_json::Value) {
        let list = self.list();
        if !list.iter().any(|s| s.topics.contains(&topic)) {
            return;
        }
        let line =
            crate::runtime::pipeline::message(topic, self.now_ms(), at_ms, fields).to_string();
        for s in list.iter().filter(|s| s.topics.contains(&topic)) {
            // Drop-oldest never blocks; a gone subscriber is removed by its own thread.
            let _ = s.tx.send(line.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    type Serving = (
        Arc<Subscribers>,
        UnixStream,
        Arc<AtomicBool>,
        std::thread::JoinHandle<()>,
    );

    /// A subscriber to `topic` being served on its own thread, and its client end.
    fn subscribed(topic: Topic) -> Serving {
        let subs = Arc::new(Subscribers::new(Arc::new(crate::clock::ManualClock::new(
            0,
        ))));
        let (server, client) = UnixStream::pair().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let serving = {
            let (subs, stop) = (subs.clone(), stop.clone());
            std::thread::Builder::new()
                .name("test-subscriber".into())
                .spawn(move || subs.serve(vec![topic], Vec::new(), server, &stop))
                .unwrap()
        };
        while subs.list().is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        (subs, client, stop, serving)
    }

    /// A subscriber that does not read while many messages come: the pipeline's side never
    /// waits, the oldest are dropped, and what it then reads plus what it is told was
    /// dropped is everything sent, every line whole and in order.
    #[test]
    fn a_slow_subscriber_loses_the_oldest_and_is_told_how_many() {
        let (subs, client, stop, serving) = subscribed(Topic::Voice);
        let sent = 20_000u64;
        for i in 0..sent {
            subs.observe(
                Topic::Voice,
                i,
                serde_json::json!({"event": "started", "i": i}),
            );
            // Another topic is not this subscriber's.
            subs.observe(Topic::Face, i, serde_json::json!({"event": "found"}));
        }
        let mut got = 0u64;
        let mut dropped = 0u64;
        let mut last = None;
        client
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        for line in BufReader::new(&client).lines() {
            let Ok(line) = line else { break };
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            match v["topic"].as_str().unwrap() {
                "dropped" => dropped += v["count"].as_u64().unwrap(),
                "voice" => {
                    let i = v["i"].as_u64().unwrap();
                    assert!(last.is_none_or(|l| i > l), "out of order at {i}");
                    last = Some(i);
                    got += 1;
                }
                other => panic!("topic {other} was not subscribed to"),
            }
            if last == Some(sent - 1) {
                break;
            }
        }
        assert!(dropped > 0, "nothing dropped: the queue never filled");
        assert_eq!(got + dropped, sent, "{got} read, {dropped} dropped");
        stop.store(true, Ordering::SeqCst);
        serving.join().unwrap();
        assert!(subs.list().is_empty());
    }

    /// A subscriber that hangs up while nothing is sent (between sessions) is let go, so it
    /// never keeps one of the control socket's connection slots.
    #[test]
    fn a_subscriber_that_hangs_up_in_silence_is_let_go() {
        let (subs, client, _stop, serving) = subscribed(Topic::Session);
        drop(client);
        // Ends by itself (the stop flag is never set); the join would hang otherwise.
        serving.join().unwrap();
        assert!(subs.list().is_empty());
    }

    /// A subscriber that hangs up in the middle of a line (it read a few bytes of a long
    /// message and closed): the write fails, the subscriber is let go by itself, and the
    /// pipeline's side goes on sending to the others without waiting.
    #[test]
    fn a_subscriber_that_hangs_up_mid_line_is_let_go_and_the_others_go_on() {
        use std::io::Read;
        let (subs, mut client, _stop, serving) = subscribed(Topic::Utterance);
        let long = "word ".repeat(40_000);
        subs.observe(Topic::Utterance, 1, serde_json::json!({ "text": long }));
        let mut first = [0u8; 16];
        client.read_exact(&mut first).unwrap();
        assert!(first.starts_with(b"{"), "{first:?}");
        drop(client);
        for i in 0..100 {
            subs.observe(Topic::Utterance, i, serde_json::json!({ "text": long }));
        }
        serving.join().unwrap();
        assert!(subs.list().is_empty());
        // Nobody left to tell: observing still returns at once.
        let t = std::time::Instant::now();
        subs.observe(
            Topic::Utterance,
            101,
            serde_json::json!({ "text": "after" }),
        );
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
