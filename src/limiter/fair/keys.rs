//! The keys table: each key's hash to its entry, at most `max_keys` entries, found
//! without a lock or a write.
//!
//! * **Entries.** `max_keys` hashes (0: free). A new key claims a free one with a
//!   compare-exchange from 0, so two keys never share one; when none is free, the key
//!   is the overflow key's (the entry after the last). The roll frees an idle key's
//!   entry by storing 0.
//! * **Index.** Open addressing with linear probing over a power of two of at least
//!   twice `max_keys` words, a word per key: the hash's high 48 bits and the entry number
//!   plus one (0: empty). A key goes in with one compare-exchange on an empty word, so
//!   two threads inserting one key meet on the same word and one entry wins (the other
//!   gives its entry back). A found word is checked against its entry's full hash.
//! * **Rebuild.** Freed keys would stay in the index, so the roll that frees any
//!   rebuilds the index in the other of two buffers from the entries and switches to it
//!   (a generation number, release on the switch and acquire on every lookup). A lookup
//!   that still reads the old buffer, or a key inserted there while the rebuild runs,
//!   can miss and claim a second entry for its key: the two then count as two keys until
//!   the older ages out. Every probe is bounded by the index's length.
//!
//! Memory: 8 bytes per entry and 2 × 8 × (at least 2, at most 4) per entry of index.

use crate::sync::{AtomicU64, Ordering};

/// Bits of an index word that hold the entry number plus one.
const ENTRY_BITS: u32 = 16;
const ENTRY_MASK: u64 = (1 << ENTRY_BITS) - 1;

/// The most keys a table holds (the entry number plus one, and the overflow entry,
/// fit in [`ENTRY_BITS`]).
pub(crate) const MAX_KEYS: usize = (1 << ENTRY_BITS) - 2;

/// A key's hash as the table holds it: mixed (the finalizer of MurmurHash3, so every
/// bit of the key reaches the low bits that place it in the index) and never 0, the
/// free entry's mark (0 and the key mixing to it share one entry).
#[inline]
pub(super) fn hash_of(key: u64) -> u64 {
    let mut x = key;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x.max(1)
}

pub(super) struct Keys {
    hashes: Box<[AtomicU64]>,
    /// Claimed entries (a fast "full" test; the bound itself is the entries' number).
    claimed: AtomicU64,
    /// Where the next claim starts looking.
    cursor: AtomicU64,
    index: [Box<[AtomicU64]>; 2],
    generation: AtomicU64,
    mask: usize,
}

impl Keys {
    /// A table of `max_keys` entries (at most [`MAX_KEYS`]; the caller checks).
    pub(super) fn new(max_keys: usize) -> Self {
        let slots = (2 * max_keys).next_power_of_two().max(2);
        let words = || (0..slots).map(|_| AtomicU64::new(0)).collect();
        Self {
            hashes: (0..max_keys).map(|_| AtomicU64::new(0)).collect(),
            claimed: AtomicU64::new(0),
            cursor: AtomicU64::new(0),
            index: [words(), words()],
            generation: AtomicU64::new(0),
            mask: slots - 1,
        }
    }

    /// The overflow key's entry: the one after the last.
    #[inline]
    pub(super) fn overflow(&self) -> usize {
        self.hashes.len()
    }

    /// The entry of the key hashed `hash`, claimed now if it has none, or the overflow
    /// entry when every entry is taken. Writes only to add a key.
    #[inline]
    pub(super) fn entry_of(&self, hash: u64) -> usize {
        // Acquire: pairs with the Release of the switch in `rebuild`, so the buffer's
        // words written before it are seen.
        let index = self.current(self.generation.load(Ordering::Acquire));
        match self.find(index, hash) {
            Ok(entry) => entry,
            Err(()) => self.insert(index, hash),
        }
    }

    #[inline]
    fn current(&self, generation: u64) -> &[AtomicU64] {
        &self.index[(generation & 1) as usize]
    }

    /// The entry of `hash` in `index`, or `Err` on reaching an empty word.
    #[inline]
    fn find(&self, index: &[AtomicU64], hash: u64) -> Result<usize, ()> {
        let mut pos = hash as usize & self.mask;
        for _ in 0..index.len() {
            // Acquire: pairs with the Release of the insert, so the entry's hash stored
            // before it is seen.
            let word = index[pos].load(Ordering::Acquire);
            if word == 0 {
                return Err(());
            }
            if let Some(entry) = self.matches(word, hash) {
                return Ok(entry);
            }
            pos = (pos + 1) & self.mask;
        }
        Err(())
    }

    /// The entry an index word names, if it is `hash`'s.
    #[inline]
    fn matches(&self, word: u64, hash: u64) -> Option<usize> {
        if word & !ENTRY_MASK != hash & !ENTRY_MASK {
            return None;
        }
        let entry = (word & ENTRY_MASK) as usize - 1;
        // Relaxed: the index word's Acquire ordered this read after the claim.
        (self.hashes.get(entry)?.load(Ordering::Relaxed) == hash).then_some(entry)
    }

    #[cold]
    fn insert(&self, index: &[AtomicU64], hash: u64) -> usize {
        let Some(entry) = self.claim(hash) else {
            return self.overflow();
        };
        let word = (hash & !ENTRY_MASK) | (entry as u64 + 1);
        let mut pos = hash as usize & self.mask;
        for _ in 0..index.len() {
            // Release on success: the claim's hash store happens before a reader's
            // Acquire of this word. Acquire on failure: the word found is read as above.
            match index[pos].compare_exchange(0, word, Ordering::Release, Ordering::Acquire) {
                Ok(_) => return entry,
                Err(found) => {
                    if let Some(theirs) = self.matches(found, hash) {
                        self.free(entry);
                        return theirs;
                    }
                }
            }
            pos = (pos + 1) & self.mask;
        }
        self.free(entry);
        self.overflow()
    }

    /// Claims a free entry for `hash`, or `None` when all are taken.
    fn claim(&self, hash: u64) -> Option<usize> {
        let n = self.hashes.len();
        // Relaxed: a hint; the compare-exchange below is what claims.
        if self.claimed.load(Ordering::Relaxed) >= n as u64 {
            return None;
        }
        // Relaxed: a starting place only.
        let start = self.cursor.fetch_add(1, Ordering::Relaxed) as usize;
        let entry = (0..n).map(|i| (start + i) % n).find(|&i| {
            // Relaxed: the entry's hash publishes nothing by itself; the index word's
            // Release does.
            self.hashes[i]
                .compare_exchange(0, hash, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })?;
        // Relaxed: a counter.
        self.claimed.fetch_add(1, Ordering::Relaxed);
        Some(entry)
    }

    /// Gives an entry back.
    pub(super) fn free(&self, entry: usize) {
        if let Some(hash) = self.hashes.get(entry) {
            // Relaxed: as in `claim`.
            if hash.swap(0, Ordering::Relaxed) != 0 {
                // Relaxed: a counter.
                self.claimed.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// The hash an entry holds (0: free).
    pub(super) fn hash(&self, entry: usize) -> u64 {
        // Relaxed: read by the roll, which needs no order with the entry's other state.
        self.hashes
            .get(entry)
            .map_or(0, |h| h.load(Ordering::Relaxed))
    }

    /// Entries claimed now.
    pub(super) fn len(&self) -> usize {
        // Relaxed: a snapshot.
        self.claimed.load(Ordering::Relaxed) as usize
    }

    /// Rebuilds the index from the entries in the other buffer and switches to it. Only
    /// the roll calls it (one thread at a time).
    pub(super) fn rebuild(&self) {
        // Relaxed: only the roll writes the generation.
        let generation = self.generation.load(Ordering::Relaxed);
        let next = self.current(generation + 1);
        for word in next.iter() {
            // Relaxed: published by the switch below.
            word.store(0, Ordering::Relaxed);
        }
        for (entry, hash) in self.hashes.iter().enumerate() {
            // Relaxed: as `hash`.
            let hash = hash.load(Ordering::Relaxed);
            if hash != 0 {
                let word = (hash & !ENTRY_MASK) | (entry as u64 + 1);
                let mut pos = hash as usize & self.mask;
                // At most `max_keys` words of twice as many are taken: an empty one is
                // found.
                for _ in 0..next.len() {
                    // Relaxed: published by the switch below.
                    if next[pos].load(Ordering::Relaxed) == 0 {
                        next[pos].store(word, Ordering::Relaxed);
                        break;
                    }
                    pos = (pos + 1) & self.mask;
                }
            }
        }
        // Release: every word written above happens before a lookup's Acquire of the
        // new generation.
        self.generation.store(generation + 1, Ordering::Release);
    }

    /// What the table holds on the heap.
    pub(super) fn heap_bytes(&self) -> usize {
        Self::heap_bytes_for(self.hashes.len())
    }

    /// What a table of `max_keys` entries holds on the heap ([`new`](Self::new)'s sizes).
    pub(super) fn heap_bytes_for(max_keys: usize) -> usize {
        let slots = (2 * max_keys).next_power_of_two().max(2);
        (max_keys + 2 * slots) * std::mem::size_of::<AtomicU64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn keys_get_their_own_entries_until_full_then_the_overflow() {
        let keys = Keys::new(3);
        let a = keys.entry_of(hash_of(10));
        let b = keys.entry_of(hash_of(11));
        assert_ne!(a, b);
        assert_eq!(keys.entry_of(hash_of(10)), a);
        let c = keys.entry_of(hash_of(12));
        assert_eq!(keys.entry_of(hash_of(13)), keys.overflow());
        assert_eq!(keys.len(), 3);
        // Freed and rebuilt: the key is gone, a new one takes its entry.
        keys.free(b);
        keys.rebuild();
        assert_eq!(keys.entry_of(hash_of(13)), b);
        assert_eq!(
            (keys.entry_of(hash_of(10)), keys.entry_of(hash_of(12))),
            (a, c)
        );
        assert_eq!(keys.entry_of(hash_of(11)), keys.overflow());
    }

    #[test]
    fn threads_inserting_one_key_agree_on_its_entry() {
        for round in 0..50u64 {
            let keys = Keys::new(8);
            let found: Vec<usize> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|_| s.spawn(|| keys.entry_of(hash_of(round))))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(found.iter().all(|&e| e == found[0]), "{found:?}");
            assert_eq!(keys.len(), 1, "the losers gave their entries back");
        }
    }
}
