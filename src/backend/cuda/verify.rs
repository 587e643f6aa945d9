//! Data checks that need no GPU: the byte pattern copy buffers are filled with, and for NCCL
//! collectives the per-rank inputs, nccl-tests' element counts and the expected results.
//!
//! Copies: every buffer is filled with a pattern that depends on the position and on a per-buffer
//! seed (so a copy from the wrong buffer or to the wrong offset shows), the destination is
//! cleared first, and after the timed copies the whole destination is compared with the pattern.
//!
//! Collectives: inputs are integer-valued f32 in [-512, 511], so every sum over fewer than 16384
//! ranks is exact whatever order NCCL adds in, and results are compared exactly, as nccl-tests'
//! #wrong does.

use crate::suite::CollectiveOp;

/// The 32-bit word at word index `i` of the pattern with `seed`.
pub fn pattern_word(seed: u32, i: u64) -> u32 {
    // splitmix64 finaliser: neighbouring words and seeds differ in about half their bits.
    let mut z = i
        .wrapping_add((seed as u64) << 32)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

/// The pattern byte at byte position `pos`.
pub fn pattern_byte(seed: u32, pos: u64) -> u8 {
    pattern_word(seed, pos / 4).to_le_bytes()[(pos % 4) as usize]
}

/// Split `len` bytes into about `parts` pieces whose starts are multiples of 4.
fn pieces(len: usize, parts: usize) -> Vec<(usize, usize)> {
    let parts = parts.max(1);
    let step = (len.div_ceil(parts)).div_ceil(4) * 4;
    let step = step.max(4);
    (0..len)
        .step_by(step)
        .map(|s| (s, (s + step).min(len)))
        .collect()
}

fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(16)
}

/// Pieces below this size are not worth a thread.
const PAR_MIN: usize = 4 << 20;

fn fill_serial(buf: &mut [u8], seed: u32, offset: u64) {
    let mut pos = offset;
    let mut rest: &mut [u8] = buf;
    // Head bytes up to a word boundary.
    while pos % 4 != 0 && !rest.is_empty() {
        rest[0] = pattern_byte(seed, pos);
        rest = &mut rest[1..];
        pos += 1;
    }
    let mut chunks = rest.chunks_exact_mut(4);
    for c in &mut chunks {
        c.copy_from_slice(&pattern_word(seed, pos / 4).to_le_bytes());
        pos += 4;
    }
    for b in chunks.into_remainder() {
        *b = pattern_byte(seed, pos);
        pos += 1;
    }
}

fn count_serial(buf: &[u8], seed: u32, offset: u64) -> u64 {
    let mut wrong = 0u64;
    let mut pos = offset;
    let mut rest: &[u8] = buf;
    while pos % 4 != 0 && !rest.is_empty() {
        wrong += u64::from(rest[0] != pattern_byte(seed, pos));
        rest = &rest[1..];
        pos += 1;
    }
    let mut chunks = rest.chunks_exact(4);
    for c in &mut chunks {
        let want = pattern_word(seed, pos / 4).to_le_bytes();
        if c != want {
            wrong += c.iter().zip(want).filter(|(a, b)| **a != *b).count() as u64;
        }
        pos += 4;
    }
    for b in chunks.remainder() {
        wrong += u64::from(*b != pattern_byte(seed, pos));
        pos += 1;
    }
    wrong
}

/// Fill `buf`, which sits at byte `offset` of the whole buffer, with the pattern (in parallel).
pub fn fill_pattern(buf: &mut [u8], seed: u32, offset: u64) {
    if buf.len() < PAR_MIN {
        return fill_serial(buf, seed, offset);
    }
    // Pieces start at multiples of 4 relative to `buf`; `fill_serial` handles any alignment.
    let ps = pieces(buf.len(), threads());
    std::thread::scope(|sc| {
        let mut rest: &mut [u8] = buf;
        let mut at = 0usize;
        for (s, e) in ps {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(e - at);
            rest = tail;
            at = e;
            sc.spawn(move || fill_serial(piece, seed, offset + s as u64));
        }
    });
}

/// How many bytes of `buf` (at byte `offset` of the whole buffer) differ from the pattern.
pub fn count_pattern_mismatches(buf: &[u8], seed: u32, offset: u64) -> u64 {
    if buf.len() < PAR_MIN {
        return count_serial(buf, seed, offset);
    }
    let ps = pieces(buf.len(), threads());
    std::thread::scope(|sc| {
        let hs: Vec<_> = ps
            .into_iter()
            .map(|(s, e)| {
                let piece = &buf[s..e];
                sc.spawn(move || count_serial(piece, seed, offset + s as u64))
            })
            .collect();
        // A piece's thread cannot panic (no indexing out of its slice); count it wrong if it did.
        hs.into_iter()
            .map(|h| h.join().unwrap_or(piece_len_as_wrong()))
            .sum()
    })
}

fn piece_len_as_wrong() -> u64 {
    u64::MAX / 1024
}

// ---------------------------------------------------------------------------------------------
// Collectives

/// Buffer sizes of one collective as nccl-tests counts them, for f32 data.
///
/// `bytes` is the size nccl-tests prints in its `size` column, and what algbw divides by time:
/// - all_reduce, broadcast: each rank's buffer (send = receive = bytes/4 elements);
/// - all_gather: the gathered result; each rank sends bytes/ranks;
/// - reduce_scatter: each rank's input; each rank receives bytes/ranks;
/// - all_to_all: what each rank sends in total (and receives); bytes/ranks to each peer.
///
/// As in nccl-tests, the per-rank block of all_gather, reduce_scatter and all_to_all is rounded
/// down to a multiple of 16 bytes (4 elements), so sizes not divisible by 16 x ranks lose a few
/// bytes; [`CollLayout::counted_bytes`] says what was really moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollLayout {
    pub op: CollectiveOp,
    pub ranks: usize,
    /// f32 elements in each rank's send buffer.
    pub send_count: usize,
    /// f32 elements in each rank's receive buffer.
    pub recv_count: usize,
    /// The per-rank block (elements) of all_gather, reduce_scatter and all_to_all; for
    /// all_reduce and broadcast the whole buffer.
    pub block: usize,
    /// The bytes nccl-tests would print for this run.
    pub counted_bytes: u64,
}

/// Bytes per element (f32, nccl-tests' default type).
pub const ELT: usize = 4;

pub fn layout(op: CollectiveOp, ranks: usize, bytes: u64) -> CollLayout {
    let n = ranks.max(1);
    let count = (bytes / ELT as u64) as usize;
    // nccl-tests: (count / nranks) & -(16 / eltSize): a multiple of 4 floats.
    let block = (count / n) / 4 * 4;
    let (send_count, recv_count, block) = match op {
        CollectiveOp::AllReduce | CollectiveOp::Broadcast => (count, count, count),
        CollectiveOp::AllGather => (block, block * n, block),
        CollectiveOp::ReduceScatter => (block * n, block, block),
        CollectiveOp::AllToAll => (block * n, block * n, block),
    };
    let counted = match op {
        CollectiveOp::AllReduce | CollectiveOp::Broadcast => count,
        _ => block * n,
    };
    CollLayout {
        op,
        ranks: n,
        send_count,
        recv_count,
        block,
        counted_bytes: (counted * ELT) as u64,
    }
}

/// Element `i` of rank `rank`'s input: an integer in [-512, 511].
pub fn input_value(rank: usize, i: usize) -> f32 {
    let w = pattern_word(
        0x00C0_11EC ^ (rank as u32).wrapping_mul(0x9E37_79B9),
        i as u64,
    );
    (w & 1023) as f32 - 512.0
}

/// The broadcast root (nccl-tests' default).
pub const ROOT: usize = 0;

impl CollLayout {
    /// What element `i` of rank `rank`'s receive buffer must hold after the collective.
    pub fn expected(&self, rank: usize, i: usize) -> f32 {
        let sum = |idx: usize| -> f32 {
            // Exact: integers with |sum| < 2^24.
            (0..self.ranks).map(|q| input_value(q, idx)).sum()
        };
        match self.op {
            CollectiveOp::AllReduce => sum(i),
            CollectiveOp::Broadcast => input_value(ROOT, i),
            CollectiveOp::AllGather => input_value(i / self.block, i % self.block),
            CollectiveOp::ReduceScatter => sum(rank * self.block + i),
            CollectiveOp::AllToAll => {
                input_value(i / self.block, rank * self.block + i % self.block)
            }
        }
    }

    /// Wrong elements in `got`, which holds elements `start..` of rank `rank`'s receive buffer.
    pub fn count_wrong(&self, rank: usize, start: usize, got: &[f32]) -> u64 {
        let serial = |from: usize, part: &[f32]| -> u64 {
            part.iter()
                .enumerate()
                // Compare bits: NaN (the fill before the check run) is never right.
                .filter(|(k, v)| v.to_bits() != self.expected(rank, from + k).to_bits())
                .count() as u64
        };
        if got.len() * ELT < PAR_MIN {
            return serial(start, got);
        }
        let per = got.len().div_ceil(threads());
        std::thread::scope(|sc| {
            let hs: Vec<_> = got
                .chunks(per)
                .enumerate()
                .map(|(j, part)| sc.spawn(move || serial(start + j * per, part)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(piece_len_as_wrong()))
                .sum()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_fill_and_check_agree_at_any_offset_and_length() {
        for (len, off) in [(0usize, 0u64), (1, 3), (7, 1), (64, 2), (1000, 4097)] {
            let mut b = vec![0u8; len];
            fill_pattern(&mut b, 7, off);
            assert_eq!(
                count_pattern_mismatches(&b, 7, off),
                0,
                "len {len} off {off}"
            );
            for (k, x) in b.iter().enumerate() {
                assert_eq!(*x, pattern_byte(7, off + k as u64));
            }
            if len > 0 {
                assert_eq!(count_pattern_mismatches(&b, 8, off), {
                    let other: Vec<u8> =
                        (0..len as u64).map(|k| pattern_byte(8, off + k)).collect();
                    b.iter().zip(&other).filter(|(a, c)| a != c).count() as u64
                });
            }
        }
    }

    #[test]
    fn chunked_fills_equal_one_fill_and_parallel_equals_serial() {
        let len = (PAR_MIN * 2) + 13;
        let mut whole = vec![0u8; len];
        fill_pattern(&mut whole, 42, 0);
        let mut serial = vec![0u8; len];
        fill_serial(&mut serial, 42, 0);
        assert!(whole == serial);
        // The same bytes written in odd-sized chunks (as device buffers are filled).
        let mut chunked = vec![0u8; len];
        let mut at = 0;
        for c in chunked.chunks_mut(1_000_003) {
            fill_pattern(c, 42, at as u64);
            at += c.len();
        }
        assert!(whole == chunked);
        assert_eq!(count_pattern_mismatches(&whole, 42, 0), 0);
        whole[5] ^= 1;
        whole[len - 1] ^= 0xff;
        whole[PAR_MIN + 1] = !whole[PAR_MIN + 1];
        assert_eq!(count_pattern_mismatches(&whole, 42, 0), 3);
        assert_eq!(count_serial(&whole, 42, 0), 3);
    }

    #[test]
    fn a_zeroed_or_misdirected_buffer_fails() {
        let mut b = vec![0u8; 4096];
        assert!(count_pattern_mismatches(&b, 1, 0) > 4000);
        fill_pattern(&mut b, 2, 0);
        assert!(count_pattern_mismatches(&b, 1, 0) > 4000, "other seed");
        assert!(
            count_pattern_mismatches(&b, 2, 4) > 4000,
            "shifted by one word"
        );
    }

    #[test]
    fn nccl_tests_counts() {
        use CollectiveOp::*;
        // 8 ranks, 1 MiB: count 262144 floats.
        let l = layout(AllReduce, 8, 1 << 20);
        assert_eq!(
            (l.send_count, l.recv_count, l.counted_bytes),
            (262_144, 262_144, 1 << 20)
        );
        let l = layout(Broadcast, 8, 1 << 20);
        assert_eq!((l.send_count, l.recv_count), (262_144, 262_144));
        let l = layout(AllGather, 8, 1 << 20);
        assert_eq!(
            (l.send_count, l.recv_count, l.block),
            (32_768, 262_144, 32_768)
        );
        assert_eq!(l.counted_bytes, 1 << 20);
        let l = layout(ReduceScatter, 8, 1 << 20);
        assert_eq!((l.send_count, l.recv_count), (262_144, 32_768));
        let l = layout(AllToAll, 8, 1 << 20);
        assert_eq!(
            (l.send_count, l.recv_count, l.block),
            (262_144, 262_144, 32_768)
        );
        // Rounding as nccl-tests: 1000 bytes over 3 ranks = 250 floats, block 83 -> 80.
        let l = layout(AllGather, 3, 1000);
        assert_eq!(
            (l.send_count, l.recv_count, l.counted_bytes),
            (80, 240, 960)
        );
        // nccl-tests' smallest size with 8 ranks: nothing to move but no failure.
        let l = layout(AllToAll, 8, 8);
        assert_eq!((l.send_count, l.recv_count, l.counted_bytes), (0, 0, 0));
        let l = layout(AllReduce, 1, 8);
        assert_eq!((l.send_count, l.counted_bytes), (2, 8));
        // One rank: every op is a local copy of the whole size.
        for op in CollectiveOp::ALL {
            assert_eq!(layout(op, 1, 1 << 20).counted_bytes, 1 << 20, "{op}");
        }
    }

    /// A plain host implementation of each collective, from its definition.
    fn reference(op: CollectiveOp, n: usize, bytes: u64) -> (CollLayout, Vec<Vec<f32>>) {
        let l = layout(op, n, bytes);
        let send: Vec<Vec<f32>> = (0..n)
            .map(|r| (0..l.send_count).map(|i| input_value(r, i)).collect())
            .collect();
        let b = l.block;
        let recv = (0..n)
            .map(|r| match op {
                CollectiveOp::AllReduce => (0..l.recv_count)
                    .map(|i| send.iter().map(|s| s[i] as f64).sum::<f64>() as f32)
                    .collect(),
                CollectiveOp::Broadcast => send[ROOT].clone(),
                CollectiveOp::AllGather => send.iter().flat_map(|s| s.iter().copied()).collect(),
                CollectiveOp::ReduceScatter => (0..b)
                    .map(|i| send.iter().map(|s| s[r * b + i] as f64).sum::<f64>() as f32)
                    .collect(),
                CollectiveOp::AllToAll => (0..n)
                    .flat_map(|q| send[q][r * b..(r + 1) * b].to_vec())
                    .collect(),
            })
            .collect();
        (l, recv)
    }

    #[test]
    fn expected_results_match_a_reference_implementation() {
        for op in CollectiveOp::ALL {
            for n in [1usize, 2, 3, 8] {
                let (l, recv) = reference(op, n, 4096 + 48);
                for (r, got) in recv.iter().enumerate() {
                    assert_eq!(got.len(), l.recv_count);
                    assert_eq!(l.count_wrong(r, 0, got), 0, "{op} n={n} rank {r}");
                    // Checking in two chunks gives the same answer.
                    let h = got.len() / 2;
                    assert_eq!(
                        l.count_wrong(r, 0, &got[..h]) + l.count_wrong(r, h, &got[h..]),
                        0
                    );
                }
            }
        }
    }

    #[test]
    fn wrong_elements_are_counted() {
        let (l, mut recv) = reference(CollectiveOp::AllReduce, 4, 1 << 12);
        recv[2][7] += 1.0;
        recv[2][100] = f32::NAN;
        recv[3][0] = -recv[3][0] - 1.0;
        assert_eq!(l.count_wrong(0, 0, &recv[0]), 0);
        assert_eq!(l.count_wrong(2, 0, &recv[2]), 2);
        assert_eq!(l.count_wrong(3, 0, &recv[3]), 1);
        // A rank's blocks swapped in all_to_all are wrong.
        let (l, mut recv) = reference(CollectiveOp::AllToAll, 4, 1 << 12);
        let b = l.block;
        let (x, y) = recv[1].split_at_mut(b);
        x.swap_with_slice(&mut y[..b]);
        assert!(l.count_wrong(1, 0, &recv[1]) > (b as u64) / 2);
        // All NaN (the fill before the check run: the collective did nothing).
        let nan = vec![f32::NAN; l.recv_count];
        assert_eq!(l.count_wrong(0, 0, &nan), l.recv_count as u64);
    }

    #[test]
    fn large_checks_run_in_parallel_and_agree() {
        let l = layout(CollectiveOp::AllReduce, 2, (PAR_MIN * 2) as u64);
        let mut got: Vec<f32> = (0..l.recv_count).map(|i| l.expected(0, i)).collect();
        assert_eq!(l.count_wrong(0, 0, &got), 0);
        got[l.recv_count - 1] = 0.5;
        got[3] = 0.5;
        assert_eq!(l.count_wrong(0, 0, &got), 2);
    }

    #[test]
    fn sums_are_exact_in_f32() {
        // The largest magnitude 1024 ranks can reach stays below 2^24.
        let n = 1024usize;
        for i in 0..256 {
            let exact: i64 = (0..n).map(|r| input_value(r, i) as i64).sum();
            let f: f32 = (0..n).map(|r| input_value(r, i)).sum();
            assert_eq!(f as i64, exact);
        }
        for r in 0..4 {
            for i in 0..1000 {
                let v = input_value(r, i);
                assert!((-512.0..=511.0).contains(&v) && v.fract() == 0.0);
            }
        }
        assert_ne!(input_value(0, 5), input_value(1, 5));
    }
}
