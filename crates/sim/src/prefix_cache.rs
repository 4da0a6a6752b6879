//! A bounded LRU set of prompt-block hashes (see [`crate::tokenizer::PromptSink`]).

use std::collections::{HashMap, VecDeque};

use crate::tokenizer::BLOCK_SIZE;

/// Default capacity of the prefix cache in blocks (of `BLOCK_SIZE` = 16 tokens).
pub const PREFIX_CACHE_BLOCKS: usize = 100_000;

/// LRU set of chained block hashes. Amortised O(1): the order queue holds `(tick, hash)` pairs
/// and stale pairs (the block was touched again later) are skipped on eviction.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    capacity: usize,
    tick: u64,
    last_use: HashMap<u64, u64>,
    order: VecDeque<(u64, u64)>,
}

impl PrefixCache {
    pub(crate) fn new(capacity: usize) -> Self {
        PrefixCache {
            capacity: capacity.max(1),
            tick: 0,
            last_use: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Number of leading tokens of a `prompt_tokens`-token prompt (with block hashes `blocks`)
    /// that are cached. Like vLLM, at least the last prompt token is always computed, so only
    /// whole blocks inside the first `prompt_tokens - 1` tokens count. Touches the hit blocks.
    pub(crate) fn lookup(&mut self, blocks: &[u64], prompt_tokens: u64) -> u64 {
        let usable = (prompt_tokens.saturating_sub(1) / BLOCK_SIZE as u64) as usize;
        let mut hit = 0usize;
        for &h in blocks.iter().take(usable) {
            if self.last_use.contains_key(&h) {
                hit += 1;
            } else {
                break;
            }
        }
        for &h in &blocks[..hit] {
            self.touch(h);
        }
        (hit * BLOCK_SIZE) as u64
    }

    /// Remember every block of a prefilled prompt.
    pub(crate) fn insert(&mut self, blocks: &[u64]) {
        for &h in blocks {
            self.touch(h);
        }
    }

    fn touch(&mut self, h: u64) {
        self.tick += 1;
        self.last_use.insert(h, self.tick);
        self.order.push_back((self.tick, h));
        while self.last_use.len() > self.capacity {
            match self.order.pop_front() {
                Some((t, old)) => {
                    if self.last_use.get(&old) == Some(&t) {
                        self.last_use.remove(&old);
                    }
                }
                None => break,
            }
        }
        if self.order.len() > 4 * self.capacity + 1024 {
            let live = &self.last_use;
            self.order.retain(|(t, h)| live.get(h) == Some(t));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.last_use.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_and_last_token_rule() {
        let mut c = PrefixCache::new(100);
        assert_eq!(c.lookup(&[1, 2, 3], 48), 0);
        c.insert(&[1, 2, 3]);
        // 48 tokens: only blocks inside the first 47 tokens may hit -> 2 blocks
        assert_eq!(c.lookup(&[1, 2, 3], 48), 32);
        assert_eq!(c.lookup(&[1, 2, 3], 49), 48);
        assert_eq!(c.lookup(&[1, 9, 3], 60), 16);
        assert_eq!(c.lookup(&[9, 2, 3], 60), 0);
    }

    #[test]
    fn lru_eviction_is_bounded() {
        let mut c = PrefixCache::new(3);
        c.insert(&[1, 2, 3]);
        c.lookup(&[1], 100); // 1 is now most recent
        c.insert(&[4]); // evicts 2
        assert_eq!(c.len(), 3);
        assert_eq!(c.lookup(&[1], 100), 16);
        assert_eq!(c.lookup(&[2], 100), 0);
        assert_eq!(c.lookup(&[3, 4], 100), 32);
        for i in 0..10_000 {
            c.insert(&[100 + i]);
        }
        assert_eq!(c.len(), 3);
        assert!(c.order.len() <= 4 * 3 + 1024 + 1);
    }
}
