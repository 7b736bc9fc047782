//! Faults a test injects into a node's links: the peers it neither sends to nor hears from,
//! so that a test can partition a cluster of processes without touching the network itself.
//!
//! Owns: [`Faults`]. May call: `std` only. Must never touch: the transport that consults it
//! (`http` asks [`Faults::blocks`] before each send and on each request received).
//!
//! A node that blocks peer `p` fails every message to `p` as unreachable and answers every
//! message from `p` with 503 (which `p` takes as unreachable), so blocking each other on both
//! sides cuts the link in both directions, as a partition does. Nothing else changes: the
//! node's clients are served as before (a node cut from its quorum then refuses writes and
//! linearizable reads by itself). Cost: one read lock and a set lookup per message.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};

use crate::NodeId;

/// The peers a node is cut from (none at first). Cheap to clone; clones share the set.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    blocked: Arc<RwLock<BTreeSet<NodeId>>>,
}

impl Faults {
    /// No peer blocked.
    pub fn new() -> Faults {
        Faults::default()
    }

    /// Cuts this node from exactly `peers` (an empty set heals every link).
    pub fn set_blocked(&self, peers: BTreeSet<NodeId>) {
        *self.blocked.write().unwrap_or_else(PoisonError::into_inner) = peers;
    }

    /// The peers this node is cut from.
    pub fn blocked(&self) -> BTreeSet<NodeId> {
        self.blocked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the link with `peer` is cut.
    pub fn blocks(&self, peer: NodeId) -> bool {
        self.blocked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&peer)
    }
}
