//! The compute check's operands, and how its product is checked without computing it again.
//!
//! `A` and `B` are n×n, column-major as cuBLAS holds them (element (i, j) at `i + j·n`), each
//! element an integer in -r..=r drawn from the seed ([`operand`]), r as large as exactness
//! allows ([`range`]: 45 at n = 8192). Such integers are exact in the GEMM's input type, and so
//! is every partial sum of `C = A·B` while it stays below 2^24 in magnitude (at most r²·n,
//! which [`range`] keeps below it): whatever order cuBLAS sums in, a right product equals the
//! exact integer product, and any other value is wrong.
//!
//! Why not -2..=2, which would be exact too: a GPU's rate depends on its data, and operands
//! with empty mantissas and one zero in five are far from real work. With r = 45 a bf16 operand
//! fills five of its seven mantissa bits and spans six exponents, and one element in 91 is
//! zero. How much the data moves the rate, measured on the lent H200 (2026-12-04, bf16 at
//! 8192^3 in `torch.matmul`): 791 TFLOP/s on -2..2, 827 on -45..45, 759 on `torch.randn`, so
//! several percent and not in the direction first expected (narrow operands were thought to
//! run faster at the power cap); the sustained load on -45..45 operands drew 692 of the GPU's
//! 700 W. `ci/torch_gemm.py` measures all three beside nodecert's figure.
//!
//! Computing `A·B` again on the CPU would take n³ steps (minutes at n = 8192). Instead
//! ([`check_product`]) two random integer vectors `x` are drawn and `C·x` is compared with
//! `A·(B·x)`, each n² steps (Freivalds' method, in exact 64-bit integers). A wrong element
//! `C(i, j)` changes `(C·x)_i` by its error times `x_j`, so the row disagrees unless `x_j` is
//! 0, or several errors of one row cancel for both vectors, about 1 in 2^21 each. Every
//! element of `C` is thus checked; the rows that disagree are then computed again in full
//! (the first [`MAX_ROWS_RECOMPUTED`]), which counts their wrong elements exactly.

use crate::suite::GemmPrecision;
use crate::training::reference::mix64;
use rayon::prelude::*;

/// Every right element of `C`, and every partial sum, is below this in magnitude.
const EXACT: u64 = 1 << 24;

// The check's sums fit i64: |C·x| <= n · 2^24 · 2^20, and A·(B·x) as much.
const _: () = assert!(
    (EXACT as i128) * (1i128 << 20) * (crate::suite::MAX_GEMM_SIZE as i128) < i64::MAX as i128
);

/// How many disagreeing rows are computed again element by element to count their wrong
/// elements; each further one counts as at least one wrong element.
pub const MAX_ROWS_RECOMPUTED: usize = 16;

/// The operands' range r for side `n` in `p`: the largest with r²·n below 2^24 (so that every
/// partial sum is exact in an fp32 accumulator) and every integer up to r exact in `p`'s input
/// type (bf16: 256; TF32, fp32: more than an i8 holds), at least 2; fp8: 2 (below).
pub fn range(n: usize, p: GemmPrecision) -> i8 {
    let cap: u64 = match p {
        // e4m3 holds every integer to 16, but fp8 tensor cores are reported to accumulate in
        // fewer than fp32's bits between cuBLASLt's promotions to fp32 (fast accumulation is
        // off, src/backend/cuda/lt.rs); until a GPU has shown wider operands exact there, the
        // narrow ones stay: a partial sum of 128 products is then at most 512.
        GemmPrecision::Fp8 => 2,
        _ => i8::MAX as u64,
    };
    let n = n.max(1) as u64;
    // The largest r with r² · n < 2^24.
    let mut r = ((EXACT - 1) / n).isqrt();
    while r * r * n >= EXACT {
        r -= 1;
    }
    r.clamp(2, cap) as i8
}

/// Element (i, j) of operand `matrix` (0: A, 1: B): an integer in -r..=r.
pub fn operand(seed: u64, matrix: u64, i: u64, j: u64, r: i8) -> i8 {
    let h = mix64(mix64(seed ^ matrix.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 32)) ^ j);
    let r = i16::from(r).abs().min(i16::from(i8::MAX));
    ((h % (2 * r as u64 + 1)) as i16 - r) as i8
}

/// Operand `matrix` of side `n`, column-major, its elements in -r..=r. Columns are drawn on
/// every core: each element depends on its seed and place alone, so the matrix is the same
/// whatever the number of threads.
pub fn matrix(seed: u64, matrix: u64, n: usize, r: i8) -> Vec<i8> {
    let mut out = vec![0i8; n * n];
    if n == 0 {
        return out;
    }
    out.par_chunks_mut(n).enumerate().for_each(|(j, col)| {
        for (i, v) in col.iter_mut().enumerate() {
            *v = operand(seed, matrix, i as u64, j as u64, r);
        }
    });
    out
}

/// What the product check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProductCheck {
    /// Elements of `C` checked: all of them.
    pub checked: u64,
    /// Wrong elements: counted exactly in the rows computed again, at least one in each other
    /// row that disagreed.
    pub wrong: u64,
}

/// A random vector for the check: integers in ±2^20, none of them 0.
fn probe(seed: u64, k: u64, n: usize) -> Vec<i64> {
    (0..n as u64)
        .map(|j| {
            let v = (mix64(seed ^ 0x005e_ed0f_c0de ^ (k << 40) ^ j) % (1 << 20)) as i64 + 1;
            if j % 2 == 0 {
                v
            } else {
                -v
            }
        })
        .collect()
}

/// Rows of `C` each thread of the check takes at a time: a run of elements of every column,
/// long enough to be read a cache line at a time.
const ROW_BLOCK: usize = 256;

/// `M·x` of a column-major n×n `m`, by blocks of rows on every core (exact integers: the same
/// sums whatever the order).
fn mul_vec(n: usize, m: impl Fn(usize) -> i64 + Sync, x: &[i64]) -> Vec<i64> {
    let mut y = vec![0i64; n];
    y.par_chunks_mut(ROW_BLOCK)
        .enumerate()
        .for_each(|(block, ys)| {
            let lo = block * ROW_BLOCK;
            for (j, xj) in x.iter().enumerate() {
                let col = j * n + lo;
                for (i, yi) in ys.iter_mut().enumerate() {
                    *yi += m(col + i) * xj;
                }
            }
        });
    y
}

/// `c` as an exact integer, or None where it is not one (NaN, infinite, a fraction, or beyond
/// what any right product holds).
fn exact(c: f32) -> Option<i64> {
    (c.is_finite() && c.fract() == 0.0 && c.abs() < EXACT as f32).then_some(c as i64)
}

/// Check `c` (n×n, column-major, as the GPU returned it) against `A·B` of the given operands.
pub fn check_product(n: usize, a: &[i8], b: &[i8], c: &[f32], seed: u64) -> ProductCheck {
    let total = (n * n) as u64;
    if a.len() != n * n || b.len() != n * n || c.len() != n * n {
        // Not a product of this size at all: nothing of it is right.
        return ProductCheck {
            checked: total,
            wrong: total,
        };
    }
    let mut bad_row = vec![false; n];
    bad_row
        .par_chunks_mut(ROW_BLOCK)
        .enumerate()
        .for_each(|(block, bad)| {
            let lo = block * ROW_BLOCK;
            for j in 0..n {
                let col = &c[j * n + lo..j * n + lo + bad.len()];
                for (b, v) in bad.iter_mut().zip(col) {
                    if exact(*v).is_none() {
                        *b = true;
                    }
                }
            }
        });
    for k in 0..2 {
        let x = probe(seed, k, n);
        let bx = mul_vec(n, |i| i64::from(b[i]), &x);
        let abx = mul_vec(n, |i| i64::from(a[i]), &bx);
        let cx = mul_vec(n, |i| exact(c[i]).unwrap_or(0), &x);
        for (i, (l, r)) in cx.iter().zip(&abx).enumerate() {
            if l != r {
                bad_row[i] = true;
            }
        }
    }
    let mut wrong = 0u64;
    for (rows, i) in bad_row
        .iter()
        .enumerate()
        .filter(|(_, bad)| **bad)
        .map(|(i, _)| i)
        .enumerate()
    {
        if rows >= MAX_ROWS_RECOMPUTED {
            wrong += 1;
            continue;
        }
        let row: Vec<i64> = (0..n).map(|k| i64::from(a[i + k * n])).collect();
        wrong += (0..n)
            .into_par_iter()
            .filter(|&j| {
                let col = &b[j * n..(j + 1) * n];
                let want: i64 = row.iter().zip(col).map(|(x, y)| x * i64::from(*y)).sum();
                exact(c[i + j * n]) != Some(want)
            })
            .count() as u64;
    }
    ProductCheck {
        checked: total,
        wrong,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact product, column-major, as fp32.
    fn product(n: usize, a: &[i8], b: &[i8]) -> Vec<f32> {
        let mut c = vec![0f32; n * n];
        for j in 0..n {
            for i in 0..n {
                let s: i64 = (0..n)
                    .map(|k| i64::from(a[i + k * n]) * i64::from(b[k + j * n]))
                    .sum();
                c[i + j * n] = s as f32;
            }
        }
        c
    }

    /// Operands of side `n` in the range the check uses, and their exact product.
    fn operands(n: usize) -> (Vec<i8>, Vec<i8>, Vec<f32>) {
        operands_in(n, range(n, GemmPrecision::Bf16))
    }

    fn operands_in(n: usize, r: i8) -> (Vec<i8>, Vec<i8>, Vec<f32>) {
        let a = matrix(7, 0, n, r);
        let b = matrix(7, 1, n, r);
        let c = product(n, &a, &b);
        (a, b, c)
    }

    #[test]
    fn operands_take_every_value_of_their_range_evenly_and_differ_between_matrices() {
        for r in [2i8, 45, 127] {
            let a = matrix(1, 0, 256, r);
            let b = matrix(1, 1, 256, r);
            let even = 1.0 / (2.0 * f64::from(r) + 1.0);
            for v in -r..=r {
                let share = a.iter().filter(|x| **x == v).count() as f64 / a.len() as f64;
                assert!(
                    (share - even).abs() < even * 0.5,
                    "r {r}, {v}: {share} (even: {even})"
                );
            }
            assert!(a.iter().all(|x| (-r..=r).contains(x)), "r {r}");
            assert_ne!(a, b);
            assert_ne!(a, matrix(2, 0, 256, r));
            // Column-major: element (i, j) at i + j n.
            assert_eq!(a[3 + 5 * 256], operand(1, 0, 3, 5, r));
            assert_ne!(
                (0..64).map(|i| operand(1, 0, i, 0, r)).collect::<Vec<_>>(),
                (0..64).map(|j| operand(1, 0, 0, j, r)).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn the_range_is_the_widest_whose_every_sum_is_exact_in_fp32_and_every_value_in_the_input() {
        use GemmPrecision::*;
        assert_eq!(range(8192, Bf16), 45);
        assert_eq!(range(8192, Fp32), 45);
        assert_eq!(range(16384, Tf32), 31);
        assert_eq!(range(4096, Bf16), 63);
        // Small GEMMs: as wide as an i8 holds (every integer to 127 is exact in bf16); fp8
        // stays narrow until its accumulation is measured.
        assert_eq!(range(256, Bf16), 127);
        assert_eq!(range(256, Fp8), 2);
        assert_eq!(range(8192, Fp8), 2);
        // Whatever range is asked, the operands stay within an i8 and symmetric.
        for r in [i8::MIN, -3, 0, 1] {
            let v: Vec<i8> = (0..200).map(|j| operand(3, 0, 0, j, r)).collect();
            let want = i16::from(r).abs().min(127) as i8;
            assert!(v.iter().all(|x| (-want..=want).contains(x)), "{r}: {v:?}");
        }
        for n in (256..=crate::suite::MAX_GEMM_SIZE as usize).step_by(16) {
            for p in [Fp32, Tf32, Bf16, Fp8] {
                let r = range(n, p) as u64;
                let n = n as u64;
                assert!(r * r * n < EXACT, "{n} {p}: {r}");
                // The widest: one more would leave exactness (where the type does not cap it).
                if p != Fp8 && r < 127 {
                    assert!((r + 1) * (r + 1) * n >= EXACT, "{n} {p}: {r}");
                }
            }
        }
        // The largest right element at n = 8192, every operand at 45: exact in fp32.
        let most = 45.0f64 * 45.0 * 8192.0;
        assert_eq!(most as f32 as f64, most);
        assert!(exact(most as f32).is_some());
        assert_eq!(exact(EXACT as f32), None, "no right product reaches 2^24");
    }

    #[test]
    fn the_right_product_passes_and_every_element_counts_as_checked() {
        let n = 48;
        let (a, b, c) = operands(n);
        assert_eq!(
            check_product(n, &a, &b, &c, 3),
            ProductCheck {
                checked: (n * n) as u64,
                wrong: 0
            }
        );
    }

    #[test]
    fn each_kind_of_wrong_element_is_found_and_counted_exactly() {
        let n = 40;
        let (a, b, good) = operands(n);
        // Off by one, a NaN, a fraction, an infinity, and a value beyond any right product,
        // anywhere in the matrix (first and last element included).
        for (at, v) in [
            (0, good[0] + 1.0),
            (n * n - 1, good[n * n - 1] - 1.0),
            (17 + 3 * n, f32::NAN),
            (5 + 30 * n, good[5 + 30 * n] + 0.5),
            (9, f32::INFINITY),
            (11 + n, 3.0e7),
        ] {
            let mut c = good.clone();
            c[at] = v;
            assert_eq!(check_product(n, &a, &b, &c, 3).wrong, 1, "{at}: {v}");
        }
        // Two wrong elements of one row that cancel for a plain sum are still found.
        let mut c = good.clone();
        c[2] += 1.0;
        c[2 + n] -= 1.0;
        assert_eq!(check_product(n, &a, &b, &c, 3).wrong, 2);
        // A whole wrong column: one element in each row.
        let mut c = good.clone();
        for i in 0..n {
            c[i + 7 * n] += 2.0;
        }
        // (More rows than are recomputed: the rest count one each, so still n.)
        assert!(n > MAX_ROWS_RECOMPUTED);
        assert_eq!(check_product(n, &a, &b, &c, 3).wrong, n as u64);
    }

    #[test]
    fn products_of_several_row_blocks_are_checked_in_every_block() {
        // Two blocks of rows for the threads, the second one short: every element is drawn where
        // the serial definition puts it, and a wrong element is found in either block.
        let n = ROW_BLOCK + 44;
        let (a, b, good) = operands(n);
        for (idx, v) in a.iter().enumerate() {
            assert_eq!(
                *v,
                operand(
                    7,
                    0,
                    (idx % n) as u64,
                    (idx / n) as u64,
                    range(n, GemmPrecision::Bf16)
                )
            );
        }
        assert_eq!(check_product(n, &a, &b, &good, 3).wrong, 0);
        for (at, v) in [
            (ROW_BLOCK - 1 + 5 * n, good[ROW_BLOCK - 1 + 5 * n] + 1.0),
            (ROW_BLOCK + 9 * n, good[ROW_BLOCK + 9 * n] - 2.0),
            (n - 1 + (n - 1) * n, f32::NAN),
            (ROW_BLOCK + 3, 0.25),
        ] {
            let mut c = good.clone();
            c[at] = v;
            assert_eq!(check_product(n, &a, &b, &c, 3).wrong, 1, "{at}: {v}");
        }
        // One wrong element in each of 3 rows of the second block: counted exactly.
        let mut c = good.clone();
        for i in [ROW_BLOCK, ROW_BLOCK + 1, n - 1] {
            c[i + 2 * n] += 1.0;
        }
        assert_eq!(check_product(n, &a, &b, &c, 3).wrong, 3);
    }

    #[test]
    fn rows_beyond_those_recomputed_count_at_least_one_each() {
        let n = 32;
        let (a, b, good) = operands(n);
        // Every element wrong: the first rows counted whole, the rest one each.
        let c: Vec<f32> = good.iter().map(|v| v + 1.0).collect();
        let r = check_product(n, &a, &b, &c, 3);
        let whole = MAX_ROWS_RECOMPUTED * n;
        assert_eq!(r.wrong, (whole + (n - MAX_ROWS_RECOMPUTED)) as u64);
    }

    #[test]
    fn operands_differ_between_seeds_rows_and_columns() {
        // A measurement's seed picks its operands: no two seeds may give the same matrix, and
        // no two rows or columns of one may repeat (for both A and B).
        let n = 64;
        for m in 0..2 {
            let all: Vec<Vec<i8>> = (0..16).map(|seed| matrix(seed, m, n, 2)).collect();
            for (s, x) in all.iter().enumerate() {
                assert!(
                    all[..s].iter().all(|y| y != x),
                    "matrix {m}: seed {s} repeats"
                );
                let rows: Vec<Vec<i8>> = (0..n)
                    .map(|i| (0..n).map(|j| x[i + j * n]).collect())
                    .collect();
                let cols: Vec<&[i8]> = x.chunks(n).collect();
                for i in 0..n {
                    assert!(
                        rows[..i].iter().all(|r| *r != rows[i]),
                        "matrix {m} seed {s}: row {i} repeats"
                    );
                    assert!(
                        cols[..i].iter().all(|c| *c != cols[i]),
                        "matrix {m} seed {s}: column {i} repeats"
                    );
                }
            }
        }
    }

    #[test]
    fn neighbouring_operand_elements_are_independent() {
        // Each element is its own draw: neighbours along a row or a column agree about as
        // often as two independent draws of five values (1 in 5), in A and in B.
        let n = 128;
        for m in 0..2 {
            let x = matrix(5, m, n, 2);
            let same_in_row = (0..n)
                .flat_map(|i| (1..n).map(move |j| (i, j)))
                .filter(|&(i, j)| x[i + j * n] == x[i + (j - 1) * n])
                .count() as f64
                / (n * (n - 1)) as f64;
            let same_in_col = (1..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .filter(|&(i, j)| x[i + j * n] == x[i - 1 + j * n])
                .count() as f64
                / (n * (n - 1)) as f64;
            for share in [same_in_row, same_in_col] {
                assert!(
                    (0.17..0.23).contains(&share),
                    "matrix {m}: {same_in_row} {same_in_col}"
                );
            }
        }
    }

    #[test]
    fn probes_are_never_zero_and_stay_within_2_pow_20() {
        // The check's sums fit i64 only for |x| <= 2^20, and an element x_j = 0 would hide every
        // error of column j. Edges: seeds and places where the hash is 0, 1 and 2^20 - 1 modulo
        // 2^20 (found by search), then a sweep.
        for (seed, k, j) in [(1_527_296, 1, 17), (9_740_544, 0, 14), (13_534_464, 0, 6)] {
            let x = probe(seed, k, j + 1)[j];
            assert!(
                x != 0 && x.abs() <= 1 << 20,
                "seed {seed}, vector {k}, {j}: {x}"
            );
        }
        for seed in 0..64 {
            for k in 0..2 {
                let x = probe(seed << 20, k, 4096);
                assert!(
                    x.iter().all(|v| *v != 0 && v.abs() <= 1 << 20),
                    "seed {seed}"
                );
            }
        }
    }

    // The probes' alternating sign is arbitrary: cargo-mutants' variants of it (all positive,
    // all negative, flipped) are equivalent, since negating any coordinates of x leaves it
    // nonzero, within 2^20, as likely to expose a given error, and C·x = A·(B·x) unchanged.
    #[test]
    fn probes_differ_between_seeds_and_between_the_two_vectors() {
        let n = 64;
        let all: Vec<Vec<i64>> = (0..16)
            .flat_map(|seed| (0..2).map(move |k| probe(seed, k, n)))
            .collect();
        for (i, x) in all.iter().enumerate() {
            assert!(all[..i].iter().all(|y| y != x), "probe {i} repeats");
        }
    }

    #[test]
    fn errors_that_cancel_for_one_probe_are_found_by_the_other() {
        // Two wrong elements of one row whose errors cancel exactly for the first vector
        // (e_j x_j + e_l x_l = 0): the second one still sees the row is wrong.
        let n = 24;
        let seed = 3;
        let (a, b, good) = operands(n);
        let x = probe(seed, 0, n);
        let (i, j, l) = (5, 2, 9);
        let mut c = good.clone();
        c[i + j * n] += x[l] as f32;
        c[i + l * n] -= x[j] as f32;
        assert_eq!(
            mul_vec(n, |t| exact(c[t]).unwrap(), &x),
            mul_vec(n, |t| exact(good[t]).unwrap(), &x)
        );
        assert_eq!(check_product(n, &a, &b, &c, seed).wrong, 2);
    }

    #[test]
    fn a_non_number_where_the_right_element_is_zero_is_wrong() {
        // Freivalds' sums read a NaN, an infinity or a fraction as 0, which agrees where the right
        // element is 0: such a value must still mark its own row (i), not another one.
        let n = 40;
        // Narrow operands, so that some right elements are 0.
        let (a, b, good) = operands_in(n, 2);
        let at = (0..n * n)
            .find(|&t| good[t] == 0.0 && t % n != t / n)
            .expect("a zero off the diagonal");
        for v in [f32::NAN, f32::INFINITY, 0.5] {
            let mut c = good.clone();
            c[at] = v;
            assert_eq!(check_product(n, &a, &b, &c, 3).wrong, 1, "{v} at {at}");
        }
        // The same in the second block of rows the threads take, the short one.
        let n = ROW_BLOCK + 44;
        let (a, b, good) = operands_in(n, 2);
        let at = (0..n * n)
            .find(|&t| good[t] == 0.0 && t % n >= ROW_BLOCK)
            .expect("a zero in the second block");
        let mut c = good.clone();
        c[at] = f32::NAN;
        assert_eq!(check_product(n, &a, &b, &c, 3).wrong, 1, "NaN at {at}");
    }

    #[test]
    fn operands_of_the_wrong_size_make_the_product_all_wrong() {
        let n = 8;
        let (a, b, c) = operands(n);
        let all = ProductCheck {
            checked: (n * n) as u64,
            wrong: (n * n) as u64,
        };
        assert_eq!(check_product(n, &a[1..], &b, &c, 3), all);
        assert_eq!(check_product(n, &a, &b[1..], &c, 3), all);
        let mut long = a.clone();
        long.push(1);
        assert_eq!(check_product(n, &long, &b, &c, 3), all);
    }

    #[test]
    fn a_product_of_the_wrong_size_is_all_wrong() {
        let n = 8;
        let (a, b, c) = operands(n);
        let r = check_product(n, &a, &b, &c[..n * n - 1], 3);
        assert_eq!(r.wrong, (n * n) as u64);
        let r = check_product(n + 1, &a, &b, &c, 3);
        assert_eq!(r.wrong, ((n + 1) * (n + 1)) as u64);
    }
}
