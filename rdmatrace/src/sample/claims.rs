//! Slots whose key the sampler may see before the identity the kernel wrote ahead of it (a
//! CPU that orders stores less strictly than x86): such a slot waits one sample, and is taken
//! as it is if it still looks so then. Shared by the QP and the socket slot readers.

use std::collections::HashMap;

/// The slots left at the previous sample as claims under way, by index: their key then.
#[derive(Default)]
pub(super) struct ClaimWait(HashMap<usize, u64>);

impl ClaimWait {
    /// Whether slot `i`, holding `key` and looking like a claim under way when `claiming`, is
    /// to be skipped this sample: only the first time it is seen so with that key.
    pub(super) fn skip(&mut self, i: usize, key: u64, claiming: bool) -> bool {
        if claiming && self.0.get(&i) != Some(&key) {
            self.0.insert(i, key);
            return true;
        }
        self.0.remove(&i);
        false
    }

    /// Slot `i` is free.
    pub(super) fn forget(&mut self, i: usize) {
        self.0.remove(&i);
    }
}
