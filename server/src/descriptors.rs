//! File descriptors as a budget (`docs/reliability.md`, "Descriptors"): the soft limit
//! raised to the hard one at start, and connections capped to what is left after a reserve
//! for the store itself, so that idle clients can never take the descriptors a checkpoint,
//! purge, backup or index build needs.
//!
//! The rule: `max_connections ≤ soft limit − reserve`, with `reserve = 64 + 2 × (the store's
//! files at start)`; unauthenticated connections (when tokens are configured) have their own
//! cap, a quarter of that, and a deadline to authenticate. Every listener counts against the
//! one connection cap.

use crate::limits::Limits;

/// Descriptors the store and the process keep for themselves beyond two per store file: the
/// runtime, the log, the lock, a checkpoint's new files and directory syncs, ONNX Runtime's
/// libraries, a backup's open source and target (peak measured in `docs/reliability.md`).
pub const BASE_RESERVE: u64 = 64;

/// What the start found and decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft limit the process was started with.
    pub soft_before: u64,
    /// The soft limit now (the hard one, when raising it worked).
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
    /// Descriptors kept for the store.
    pub reserve: u64,
}

impl Budget {
    /// The most connections the budget allows (at least 1).
    #[must_use]
    pub fn connections(&self) -> usize {
        usize::try_from(self.soft.saturating_sub(self.reserve).max(1)).unwrap_or(usize::MAX)
    }
}

/// The reserve for a store directory holding `store_files` files.
#[must_use]
pub fn reserve_for(store_files: usize) -> u64 {
    BASE_RESERVE + 2 * store_files as u64
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and returns the budget for a store of
/// `store_files` files. A limit that cannot be read or raised is kept as it is (and said so).
#[must_use]
pub fn raise(store_files: usize) -> Budget {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    let soft_before = before.current.unwrap_or(u64::MAX);
    let hard = before.maximum.unwrap_or(u64::MAX);
    let mut soft = soft_before;
    if soft_before < hard {
        let raised = rustix::process::Rlimit {
            current: before.maximum,
            maximum: before.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => soft = hard,
            Err(e) => {
                tracing::warn!(error = %e, soft_before, hard, "could not raise the descriptor limit")
            }
        }
    }
    Budget {
        soft_before,
        soft,
        hard,
        reserve: reserve_for(store_files),
    }
}

/// Caps `limits`' connections to the budget (and the unauthenticated ones to a quarter of
/// that); says in the log what was capped.
pub fn apply(budget: &Budget, limits: &mut Limits) {
    let allowed = budget.connections();
    if limits.max_connections > allowed {
        tracing::warn!(
            asked = limits.max_connections,
            allowed,
            soft_limit = budget.soft,
            reserve = budget.reserve,
            "max_connections capped to the descriptors left after the store's reserve (raise `ulimit -n` to allow more)"
        );
        limits.max_connections = allowed;
    }
    limits.max_unauthenticated = limits
        .max_unauthenticated
        .min(limits.max_connections.div_ceil(4).max(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_fit_what_the_reserve_leaves_and_unauthenticated_ones_a_quarter() {
        let budget = Budget {
            soft_before: 256,
            soft: 256,
            hard: 256,
            reserve: reserve_for(10),
        };
        assert_eq!(budget.reserve, 84);
        let mut limits = Limits::default();
        apply(&budget, &mut limits);
        assert_eq!(limits.max_connections, 172);
        assert_eq!(limits.max_unauthenticated, 43);
        // A limit below the reserve still lets one client in.
        let tiny = Budget { soft: 10, ..budget };
        assert_eq!(tiny.connections(), 1);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let budget = raise(0);
        assert_eq!(budget.soft, budget.hard);
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(now.current, now.maximum);
    }
}
