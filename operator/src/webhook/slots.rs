//! Who holds the webhook server's connections, and which one gives its place up when
//! every place is taken.
//!
//! The API server opens a connection, sends a review's headers and body together and
//! reads the answer within milliseconds; it keeps a few such connections open between
//! reviews. A client that holds connections without finishing a request (silent, slow
//! headers, a body that never comes) is not it. Invariants:
//! - one address holds at most `per_peer` connections; one more is closed at once;
//! - when all `max` places are taken, a newcomer is never made to wait: the address
//!   holding the most connections (the newcomer counted with its own) gives up its
//!   oldest one that is not answering a request whose body has arrived. A client of a
//!   few connections (the API server) loses one only when nobody holds more; a review
//!   already read is never cut off;
//! - only when every place is answering a review is a newcomer closed (each answer
//!   takes milliseconds).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its address holds `per_peer` connections already.
    PeerFull,
    /// Every place is answering a review.
    AllBusy,
}

struct Held {
    ip: IpAddr,
    busy: Arc<AtomicBool>,
    reclaim: CancellationToken,
}

#[derive(Default)]
struct Table {
    next: u64,
    /// By admission order: the oldest first.
    open: BTreeMap<u64, Held>,
    per_ip: HashMap<IpAddr, usize>,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Held> {
        let held = self.open.remove(&id)?;
        if let Some(n) = self.per_ip.get_mut(&held.ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&held.ip);
            }
        }
        Some(held)
    }

    /// The connection to give up for a newcomer from `ip`: the oldest idle one of the
    /// address that holds the most (the newcomer counted with its own).
    fn victim(&self, ip: IpAddr) -> Option<u64> {
        let holds = |a: IpAddr| self.per_ip.get(&a).copied().unwrap_or(0) + usize::from(a == ip);
        let mut best: Option<(usize, u64)> = None;
        for (id, h) in &self.open {
            if h.busy.load(Ordering::Acquire) {
                continue;
            }
            let n = holds(h.ip);
            // Oldest first: a later one of the same address never replaces it.
            if best.is_none_or(|(m, _)| n > m) {
                best = Some((n, *id));
            }
        }
        best.map(|(_, id)| id)
    }
}

/// The server's places.
pub struct Slots {
    max: usize,
    per_peer: usize,
    table: Mutex<Table>,
}

/// One admitted connection's place, given back when dropped.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// Set while a request whose body has arrived is being answered.
    pub busy: Arc<AtomicBool>,
    /// Cancelled when the place is given to a newcomer: the connection closes at once.
    pub reclaimed: CancellationToken,
}

impl Slots {
    pub fn new(max: usize, per_peer: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max: max.max(1),
            per_peer: per_peer.max(1),
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A poisoned lock only means a holder panicked between two whole updates.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a connection from `ip`, taking one from the biggest holder if all are
    /// taken.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let mut t = self.lock();
        if t.per_ip.get(&ip).copied().unwrap_or(0) >= self.per_peer {
            return Err(Refused::PeerFull);
        }
        if t.open.len() >= self.max {
            let id = t.victim(ip).ok_or(Refused::AllBusy)?;
            if let Some(h) = t.remove(id) {
                h.reclaim.cancel();
            }
        }
        let id = t.next;
        t.next += 1;
        let (busy, reclaimed) = (Arc::new(AtomicBool::new(false)), CancellationToken::new());
        t.open.insert(
            id,
            Held {
                ip,
                busy: busy.clone(),
                reclaim: reclaimed.clone(),
            },
        );
        *t.per_ip.entry(ip).or_default() += 1;
        Ok(Slot {
            slots: self.clone(),
            id,
            busy,
            reclaimed,
        })
    }

    /// Connections held now.
    pub fn held(&self) -> usize {
        self.lock().open.len()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(self.id);
    }
}

/// Marks a connection busy while a review is answered (its body read); as a request
/// extension, so the body-reading middleware finds it.
#[derive(Clone)]
pub struct Busy(pub Arc<AtomicBool>);

impl Busy {
    /// Busy until the guard is dropped.
    pub fn hold(&self) -> BusyGuard {
        self.0.store(true, Ordering::Release);
        BusyGuard(self.0.clone())
    }
}

pub struct BusyGuard(Arc<AtomicBool>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    #[test]
    fn a_newcomer_takes_the_oldest_idle_place_of_the_biggest_holder() {
        let slots = Slots::new(4, 3);
        let a: Vec<Slot> = (0..3).map(|_| slots.admit(ip(2)).expect("a")).collect();
        let b = slots.admit(ip(3)).expect("b");
        // Full: the API server's connection takes a's oldest place.
        let api = slots.admit(ip(1)).expect("api");
        assert!(a[0].reclaimed.is_cancelled());
        assert!(!a[1].reclaimed.is_cancelled() && !b.reclaimed.is_cancelled());
        assert_eq!(slots.held(), 4);
        // a's next connection takes its own next place, never the API server's.
        drop(a);
        assert_eq!(slots.held(), 2);
        let mut more = Vec::new();
        for _ in 0..3 {
            more.push(slots.admit(ip(2)).expect("a again"));
        }
        assert!(more[0].reclaimed.is_cancelled(), "a's own oldest goes");
        assert!(!api.reclaimed.is_cancelled() && !b.reclaimed.is_cancelled());
    }

    #[test]
    fn a_place_answering_a_review_is_never_taken_and_an_address_keeps_to_its_share() {
        let slots = Slots::new(2, 2);
        let x = slots.admit(ip(2)).expect("x");
        let y = slots.admit(ip(2)).expect("y");
        assert_eq!(slots.admit(ip(2)).err(), Some(Refused::PeerFull));
        let _bx = Busy(x.busy.clone()).hold();
        let by = Busy(y.busy.clone()).hold();
        assert_eq!(slots.admit(ip(1)).err(), Some(Refused::AllBusy));
        drop(by);
        let z = slots.admit(ip(1)).expect("z");
        assert!(y.reclaimed.is_cancelled() && !x.reclaimed.is_cancelled());
        drop(z);
        assert_eq!(slots.held(), 1, "y was given up, z dropped");
    }
}
