//! Byte patterns. Every message byte is a function of (source, destination, sequence number,
//! offset), so a receiver can verify a delivered message byte for byte and tell which message it
//! got. Receive buffers are pre-filled with a per-buffer pattern, so any byte the endpoint writes
//! outside the delivered range (guards, gaps between segments, the tail of a buffer longer than
//! the message, a truncated receive) is detected; send buffers carry poison in their gaps, so a
//! sender that reads a gap delivers bytes that fail verification.

use nicmsg_proto::Rank;

/// SplitMix64 finaliser: a cheap, well-mixed 64-bit hash.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// An infinite pseudo-random byte string named by a key; byte `i` depends only on (key, i).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern(u64);

impl Pattern {
    /// The contents of message `seq` from `src` to `dst` (`seq` counts messages per pair).
    pub fn message(src: Rank, dst: Rank, seq: u64) -> Self {
        Self(mix(
            mix(0x4D53_4700 ^ ((src as u64) << 32 | dst as u64)) ^ seq
        ))
    }

    /// The initial fill of a receive buffer region.
    pub fn fill(rank: Rank, region: u32) -> Self {
        Self(mix(
            mix(0x4649_4C4C ^ ((rank as u64) << 32 | region as u64)),
        ))
    }

    /// The poison around and between the segments of a send buffer.
    pub fn poison(rank: Rank, region: u32) -> Self {
        Self(mix(
            mix(0x504F_4953 ^ ((rank as u64) << 32 | region as u64)),
        ))
    }

    fn word(self, index: u64) -> [u8; 8] {
        mix(self.0 ^ mix(index)).to_le_bytes()
    }

    pub fn byte(self, pos: u64) -> u8 {
        self.word(pos / 8)[(pos % 8) as usize]
    }

    /// Writes pattern bytes `pos..pos + out.len()` into `out`.
    pub fn fill_into(self, pos: u64, out: &mut [u8]) {
        let mut at = 0usize;
        let mut p = pos;
        while at < out.len() {
            let word = self.word(p / 8);
            let start = (p % 8) as usize;
            let take = (8 - start).min(out.len() - at);
            out[at..at + take].copy_from_slice(&word[start..start + take]);
            at += take;
            p += take as u64;
        }
    }

    /// Index (relative to `bytes`) of the first byte that differs from pattern bytes
    /// `pos..pos + bytes.len()`, if any.
    pub fn first_mismatch(self, pos: u64, bytes: &[u8]) -> Option<usize> {
        let mut at = 0usize;
        let mut p = pos;
        while at < bytes.len() {
            let word = self.word(p / 8);
            let start = (p % 8) as usize;
            let take = (8 - start).min(bytes.len() - at);
            if bytes[at..at + take] != word[start..start + take] {
                let offset = (0..take)
                    .find(|&i| bytes[at + i] != word[start + i])
                    .unwrap_or(0);
                return Some(at + offset);
            }
            at += take;
            p += take as u64;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_check_agree_at_any_alignment() {
        let pattern = Pattern::message(1, 2, 3);
        for pos in 0..20u64 {
            for len in 0..40usize {
                let mut buf = vec![0u8; len];
                pattern.fill_into(pos, &mut buf);
                assert_eq!(pattern.first_mismatch(pos, &buf), None);
                for (i, &b) in buf.iter().enumerate() {
                    assert_eq!(b, pattern.byte(pos + i as u64));
                }
                if len > 0 {
                    let flip = len / 2;
                    buf[flip] ^= 0x10;
                    assert_eq!(pattern.first_mismatch(pos, &buf), Some(flip));
                }
            }
        }
    }

    #[test]
    fn messages_differ() {
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        Pattern::message(0, 1, 5).fill_into(0, &mut a);
        Pattern::message(0, 1, 6).fill_into(0, &mut b);
        assert_ne!(a, b);
        Pattern::message(1, 0, 5).fill_into(0, &mut b);
        assert_ne!(a, b);
    }
}
