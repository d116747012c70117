//! Bounded queues with a written overflow policy.
//!
//! Contract: every queue between the runtime's threads is bounded. Its policy says what a
//! full queue does to the producer:
//! - [`Overflow::Block`]: the producer waits. Used for everything in replay (nothing may be
//!   lost, and replays must be deterministic), for audio always (audio is never dropped),
//!   and for the store writer.
//! - [`Overflow::DropOldest`]: the oldest queued item is evicted and counted, and the new
//!   one goes in. Used for live video, where the newest frame matters more than a stale one.
//!
//! Control (end of stream, stop) is never a queued item that could be evicted: a stream ends
//! when its sender is dropped, and stop is a flag.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, SendError, Sender, TrySendError};

/// What a full queue does to its producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    Block,
    DropOldest,
}

/// The producing end of a policy queue.
pub struct PolicySender<T> {
    tx: Sender<T>,
    /// A receiver kept by the producer to evict with (DropOldest only).
    evict: Option<Receiver<T>>,
    consumer_gone: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    /// Most items seen queued right after a send (for the end-of-run summary).
    max_depth: AtomicUsize,
    capacity: usize,
}

/// The consuming end; dropping it tells the producer nobody is listening.
pub struct PolicyReceiver<T> {
    rx: Receiver<T>,
    consumer_gone: Arc<AtomicBool>,
}

/// The consumer is gone; the item is handed back.
#[derive(Debug)]
pub struct Disconnected<T>(pub T);

/// A bounded queue of `capacity` items with overflow policy `overflow`.
pub fn policy_queue<T>(
    capacity: usize,
    overflow: Overflow,
) -> (PolicySender<T>, PolicyReceiver<T>) {
    let capacity = capacity.max(1);
    let (tx, rx) = bounded(capacity);
    let consumer_gone = Arc::new(AtomicBool::new(false));
    let evict = (overflow == Overflow::DropOldest).then(|| rx.clone());
    (
        PolicySender {
            tx,
            evict,
            consumer_gone: consumer_gone.clone(),
            dropped: Arc::new(AtomicU64::new(0)),
            max_depth: AtomicUsize::new(0),
            capacity,
        },
        PolicyReceiver { rx, consumer_gone },
    )
}

impl<T> PolicySender<T> {
    /// Sends `item` following the queue's policy.
    pub fn send(&self, item: T) -> Result<(), Disconnected<T>> {
        if self.consumer_gone.load(Ordering::Acquire) {
            return Err(Disconnected(item));
        }
        let sent = self.send_by_policy(item);
        self.max_depth.fetch_max(self.tx.len(), Ordering::Relaxed);
        sent
    }

    fn send_by_policy(&self, item: T) -> Result<(), Disconnected<T>> {
        let Some(evict) = &self.evict else {
            return self.tx.send(item).map_err(|SendError(i)| Disconnected(i));
        };
        let mut item = item;
        loop {
            match self.tx.try_send(item) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(i)) => return Err(Disconnected(i)),
                Err(TrySendError::Full(i)) => {
                    if evict.try_recv().is_ok() {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    if self.consumer_gone.load(Ordering::Acquire) {
                        return Err(Disconnected(i));
                    }
                    item = i;
                }
            }
        }
    }

    /// Items evicted so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The most items seen waiting in the queue, and its capacity.
    pub fn depth(&self) -> (usize, usize) {
        (self.max_depth.load(Ordering::Relaxed), self.capacity)
    }
}

impl<T> PolicyReceiver<T> {
    /// The underlying receiver, for `select!`.
    pub fn receiver(&self) -> &Receiver<T> {
        &self.rx
    }

    pub fn recv(&self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> Drop for PolicyReceiver<T> {
    fn drop(&mut self) {
        self.consumer_gone.store(true, Ordering::Release);
    }
}

impl<T> Iterator for &PolicyReceiver<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_oldest_keeps_the_newest_and_counts() {
        let (tx, rx) = policy_queue(2, Overflow::DropOldest);
        for i in 0..5 {
            tx.send(i).unwrap();
        }
        assert_eq!(tx.dropped(), 3);
        assert_eq!(rx.recv(), Some(3));
        assert_eq!(rx.recv(), Some(4));
    }

    #[test]
    #[allow(clippy::disallowed_methods)]
    fn block_loses_nothing() {
        let (tx, rx) = policy_queue(1, Overflow::Block);
        let producer = std::thread::spawn(move || {
            for i in 0..100 {
                tx.send(i).unwrap();
            }
        });
        let got: Vec<i32> = (&rx).take(100).collect();
        producer.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn producer_learns_the_consumer_is_gone() {
        for overflow in [Overflow::Block, Overflow::DropOldest] {
            let (tx, rx) = policy_queue(1, overflow);
            tx.send(1).unwrap();
            drop(rx);
            assert!(tx.send(2).is_err(), "{overflow:?}");
        }
    }

    #[test]
    fn end_of_stream_is_seen_after_the_queued_items() {
        let (tx, rx) = policy_queue(4, Overflow::DropOldest);
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        drop(tx);
        assert_eq!((&rx).collect::<Vec<_>>(), vec![1, 2]);
    }
}
