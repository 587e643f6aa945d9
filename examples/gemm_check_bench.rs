//! How much faster the compute check's host side runs on every core than on one, measured in the
//! same run: drawing the operands of an n×n GEMM, and checking a right product (Freivalds' method,
//! `gemm_data::check_product`). On the first H200 run (2026-12-04) this host work, on one core,
//! took most of the compute check's 60.7 s.
//!
//!   cargo run --release --example gemm_check_bench [DRAW_N] [CHECK_N]
//!
//! DRAW_N (default 8192): the side whose operands are drawn; CHECK_N (default 1024): the side of
//! the product checked (its right product is computed here first, n³ steps).
use nodecert::backend::gemm_data;
use nodecert::suite::GemmPrecision;
use rayon::prelude::*;
use std::time::Instant;

fn timed<T>(threads: usize, f: impl FnOnce() -> T + Send) -> (T, f64)
where
    T: Send,
{
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let t = Instant::now();
    let out = pool.install(f);
    (out, t.elapsed().as_secs_f64())
}

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .map(|s| s.parse().expect("a number"))
            .unwrap_or(d)
    };
    let (draw_n, check_n) = (arg(1, 8192), arg(2, 1024));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let r = gemm_data::range(draw_n, GemmPrecision::Bf16);
    let (one, t1) = timed(1, || gemm_data::matrix(1, 0, draw_n, r));
    let (all, tn) = timed(cores, || gemm_data::matrix(1, 0, draw_n, r));
    assert_eq!(
        one, all,
        "the operands must not depend on the number of threads"
    );
    println!(
        "draw {draw_n}x{draw_n}: 1 thread {t1:.3} s, {cores} threads {tn:.3} s, ratio {:.2}",
        t1 / tn
    );

    let n = check_n;
    let r = gemm_data::range(n, GemmPrecision::Bf16);
    let a = gemm_data::matrix(7, 0, n, r);
    let b = gemm_data::matrix(7, 1, n, r);
    // The right product, column-major, every column on its own core.
    let mut c = vec![0f32; n * n];
    c.par_chunks_mut(n).enumerate().for_each(|(j, col)| {
        for (i, v) in col.iter_mut().enumerate() {
            let s: i64 = (0..n)
                .map(|k| i64::from(a[i + k * n]) * i64::from(b[k + j * n]))
                .sum();
            *v = s as f32;
        }
    });
    let (k1, t1) = timed(1, || gemm_data::check_product(n, &a, &b, &c, 3));
    let (kn, tn) = timed(cores, || gemm_data::check_product(n, &a, &b, &c, 3));
    assert_eq!((k1.wrong, kn.wrong), (0, 0), "a right product must pass");
    println!(
        "check {n}x{n}: 1 thread {t1:.3} s, {cores} threads {tn:.3} s, ratio {:.2}",
        t1 / tn
    );
}
