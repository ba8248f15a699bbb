//! The scan kernels, picked once at run time. With AVX-512: f32 dot with four FMA
//! accumulators, and i8 dot with AVX-512 VNNI (`vpdpbusd`, u8 × i8). With AVX2 and FMA only
//! (AMD EPYC before Zen 4, older Intel): the same kernels at half the width, the i8 ones
//! widening to i16. Elsewhere: simsimd.
//!
//! `vpdpbusd` multiplies *unsigned* bytes by signed bytes, so the stored code `c` is read as
//! `c ^ 0x80 = c + 128` (u8) and the kernel subtracts `128 · Σ q` for the query: exact. simsimd
//! has a VNNI kernel too, but enables it only with the whole Ice Lake feature set
//! (VBMI2, BITALG, ...), which this project's machines lack, so it falls back to AVX2 there;
//! and it scores one pair per call, where the multi-query kernels here hold a tile of pairs in
//! registers. This file, `bits.rs` and `mmap.rs` hold the crate's only `unsafe` (`docs/safety.md`).

use simsimd::SpatialSimilarity;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cpu {
    avx512: bool,
    vnni: bool,
    /// AVX2 and FMA.
    pub(super) avx2: bool,
    /// AVX-512 F and BW: the bit codes' 64-byte kernel (`bits.rs`).
    pub(super) avx512bw: bool,
    /// AVX-512 F, BW and VBMI: the bit codes' `vpermb` kernel (`bits.rs`).
    pub(super) avx512vbmi: bool,
}

/// No vector extension this file uses: simsimd for everything.
#[cfg(any(test, not(target_arch = "x86_64")))]
const PLAIN: Cpu = Cpu {
    avx512: false,
    vnni: false,
    avx2: false,
    avx512bw: false,
    avx512vbmi: false,
};

fn detected() -> Cpu {
    static DETECTED: OnceLock<Cpu> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = std::is_x86_feature_detected!("avx512f");
            let vnni = avx512
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni");
            let avx2 =
                std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
            let avx512bw = avx512 && std::is_x86_feature_detected!("avx512bw");
            let avx512vbmi = avx512bw && std::is_x86_feature_detected!("avx512vbmi");
            let cpu = Cpu {
                avx512,
                vnni,
                avx2,
                avx512bw,
                avx512vbmi,
            };
            capped(cpu, kernels_asked())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            PLAIN
        }
    })
}

/// The environment variable that caps the kernels a process picks, for benchmarks that
/// measure a lesser path on a host with AVX-512 in the same run (docs/benchmarks.md): `avx2`
/// uses no AVX-512 instruction, `avx512bw` no VBMI (the AVX-512 path of a Skylake-X); unset,
/// the best this CPU has. Read once, before the first scan.
const KERNELS_ENV: &str = "AMBERDB_KERNELS";

/// What `AMBERDB_KERNELS` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelsAsked {
    /// The best this CPU has (`auto`).
    Best,
    /// AVX2 and FMA at most (`avx2`).
    Avx2,
    /// AVX-512 without VBMI at most (`avx512bw`).
    Avx512Bw,
}

/// `cpu` with what `asked` leaves of it.
fn capped(cpu: Cpu, asked: Option<KernelsAsked>) -> Cpu {
    match asked {
        Some(KernelsAsked::Avx2) => Cpu {
            avx512: false,
            vnni: false,
            avx512bw: false,
            avx512vbmi: false,
            ..cpu
        },
        Some(KernelsAsked::Avx512Bw) => Cpu {
            avx512vbmi: false,
            ..cpu
        },
        Some(KernelsAsked::Best) | None => cpu,
    }
}

/// `AMBERDB_KERNELS` read: `None` unset, `Some` a value it knows. A value it does not know is
/// treated as unset here; `kernels_env_error` names it, for a caller that can refuse it.
#[must_use]
pub fn kernels_asked() -> Option<KernelsAsked> {
    asked_by(&std::env::var(KERNELS_ENV).ok()?)
}

fn asked_by(value: &str) -> Option<KernelsAsked> {
    match value {
        "avx2" => Some(KernelsAsked::Avx2),
        "avx512bw" => Some(KernelsAsked::Avx512Bw),
        "auto" => Some(KernelsAsked::Best),
        _ => None,
    }
}

/// The error a caller should refuse to run with: `AMBERDB_KERNELS` set to a value other than
/// `auto`, `avx512bw` or `avx2`.
#[must_use]
pub fn kernels_env_error() -> Option<String> {
    let value = std::env::var(KERNELS_ENV).ok()?;
    asked_by(&value).is_none().then(|| {
        format!("{KERNELS_ENV}={value:?}: the values are \"auto\", \"avx512bw\" and \"avx2\"")
    })
}

#[cfg(test)]
thread_local! {
    /// The kernels a test thread runs instead of the detected ones (`for_each_backend`).
    static FORCED: std::cell::Cell<Option<Cpu>> = const { std::cell::Cell::new(None) };
}

#[inline]
pub(super) fn cpu() -> Cpu {
    #[cfg(test)]
    if let Some(forced) = FORCED.with(std::cell::Cell::get) {
        return forced;
    }
    detected()
}

/// Runs `check` once under each set of kernels this CPU can run (the detected one, AVX2 when
/// it has it, simsimd), with its name: the kernel tests cover every path on any test host.
#[cfg(test)]
pub(crate) fn for_each_backend(mut check: impl FnMut(&'static str)) {
    let host = detected();
    let mut sets = vec![host];
    if host.avx512vbmi {
        // What `AMBERDB_KERNELS=avx512bw` runs.
        sets.push(capped(host, Some(KernelsAsked::Avx512Bw)));
    }
    if host.avx2 {
        // What `AMBERDB_KERNELS=avx2` runs.
        sets.push(capped(host, Some(KernelsAsked::Avx2)));
    }
    sets.push(PLAIN);
    sets.dedup();
    for set in sets {
        FORCED.with(|f| f.set(Some(set)));
        check(backend());
        FORCED.with(|f| f.set(None));
    }
}

/// Which kernels this process uses, for benchmark reports.
#[must_use]
pub fn backend() -> &'static str {
    match cpu() {
        Cpu {
            avx512: true,
            vnni: true,
            ..
        } => "avx512f + avx512vnni",
        Cpu {
            avx512: true,
            avx2: true,
            ..
        } => "avx512f + avx2 i8",
        Cpu { avx512: true, .. } => "avx512f + simsimd i8",
        Cpu { avx2: true, .. } => "avx2 + fma",
        _ => "simsimd",
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m512, __m512i, _mm512_add_epi32, _mm512_add_ps, _mm512_dpbusd_epi32, _mm512_fmadd_ps,
        _mm512_loadu_ps, _mm512_loadu_si512, _mm512_reduce_add_epi32, _mm512_reduce_add_ps,
        _mm512_set1_epi8, _mm512_setzero_ps, _mm512_setzero_si512, _mm512_xor_si512,
    };

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_f32(block: &[f32; 16]) -> __m512 {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `block` is 16 f32 = 64 readable bytes; loadu has no alignment requirement.
        unsafe {
            _mm512_loadu_ps(block.as_ptr())
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_i8(block: &[i8; 64]) -> __m512i {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `block` is 64 readable bytes; loadu has no alignment requirement.
        unsafe {
            _mm512_loadu_si512(block.as_ptr().cast())
        }
    }

    /// f32 dot: four independent FMA chains over 64-float blocks, one over the remaining
    /// 16-float blocks, then a scalar tail.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let (a64, a_rest) = a.as_chunks::<64>();
        let (b64, b_rest) = b.as_chunks::<64>();
        let (mut s0, mut s1, mut s2, mut s3) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        );
        for (x, y) in a64.iter().zip(b64) {
            let (xs, _) = x.as_chunks::<16>();
            let (ys, _) = y.as_chunks::<16>();
            if let ([x0, x1, x2, x3], [y0, y1, y2, y3]) = (xs, ys) {
                s0 = _mm512_fmadd_ps(load_f32(x0), load_f32(y0), s0);
                s1 = _mm512_fmadd_ps(load_f32(x1), load_f32(y1), s1);
                s2 = _mm512_fmadd_ps(load_f32(x2), load_f32(y2), s2);
                s3 = _mm512_fmadd_ps(load_f32(x3), load_f32(y3), s3);
            }
        }
        let (a16, a_tail) = a_rest.as_chunks::<16>();
        let (b16, b_tail) = b_rest.as_chunks::<16>();
        for (x, y) in a16.iter().zip(b16) {
            s0 = _mm512_fmadd_ps(load_f32(x), load_f32(y), s0);
        }
        let mut sum =
            _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
        for (x, y) in a_tail.iter().zip(b_tail) {
            sum += x * y;
        }
        sum
    }

    /// 128 × the sum of the query bytes the VNNI blocks cover (the offset to remove).
    #[inline]
    pub(super) fn offset_i8(query: &[i8]) -> i32 {
        let (blocks, _) = query.as_chunks::<64>();
        128 * blocks.iter().flatten().map(|&q| i32::from(q)).sum::<i32>()
    }

    /// Exact i8 dot with `vpdpbusd`; `offset` is `offset_i8(q)`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn dot_i8(q: &[i8], c: &[i8], offset: i32) -> i32 {
        let (q64, q_tail) = q.as_chunks::<64>();
        let (c64, c_tail) = c.as_chunks::<64>();
        let flip = _mm512_set1_epi8(i8::MIN);
        let (mut even, mut odd) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        for (i, (x, y)) in q64.iter().zip(c64).enumerate() {
            let unsigned_codes = _mm512_xor_si512(load_i8(y), flip);
            if i % 2 == 0 {
                even = _mm512_dpbusd_epi32(even, unsigned_codes, load_i8(x));
            } else {
                odd = _mm512_dpbusd_epi32(odd, unsigned_codes, load_i8(x));
            }
        }
        let mut sum = _mm512_reduce_add_epi32(_mm512_add_epi32(even, odd)) - offset;
        for (x, y) in q_tail.iter().zip(c_tail) {
            sum += i32::from(*x) * i32::from(*y);
        }
        sum
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn each_dot_f32(query: &[f32], rows: &[f32], mut on_row: impl FnMut(usize, f32)) {
        for (i, row) in rows.chunks_exact(query.len().max(1)).enumerate() {
            on_row(i, dot_f32(query, row));
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn each_dot_i8(query: &[i8], rows: &[i8], mut on_row: impl FnMut(usize, i32)) {
        let offset = offset_i8(query);
        for (i, row) in rows.chunks_exact(query.len().max(1)).enumerate() {
            on_row(i, dot_i8(query, row, offset));
        }
    }

    /// The whole 16-float blocks of `v`.
    fn blocks(v: &[f32]) -> &[[f32; 16]] {
        v.as_chunks::<16>().0
    }

    /// Up to four queries against rows four at a time, in registers: per 16-float block,
    /// four row loads and four query loads feed sixteen FMAs (one load per two FMAs, where a
    /// dot of one pair needs two per FMA). One accumulator per pair, so the sums round
    /// differently from `dot_f32` (within the kernels' tolerance, not bit for bit), but the
    /// same way for a pair whatever the other queries and wherever the row lies: every pair's
    /// sum is the same sequence of FMAs, then the same reduction.
    #[target_feature(enable = "avx512f")]
    pub(super) fn each_dot_f32_tile(
        queries: &[&[f32]],
        dim: usize,
        rows: &[f32],
        on_row: impl FnMut(usize, usize, f32),
    ) {
        if dim == 0 {
            return;
        }
        // As many accumulators as queries: one query costs a quarter of four.
        match queries {
            [] => {}
            [a] => tile::<1>([a], dim, rows, on_row),
            [a, b] => tile::<2>([a, b], dim, rows, on_row),
            [a, b, c] => tile::<3>([a, b, c], dim, rows, on_row),
            [a, b, c, d, ..] => tile::<4>([a, b, c, d], dim, rows, on_row),
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn tile<const NQ: usize>(
        qs: [&&[f32]; NQ],
        dim: usize,
        rows: &[f32],
        mut on_row: impl FnMut(usize, usize, f32),
    ) {
        // Whole 16-float blocks as arrays, so the loop below loads without bounds checks.
        let qb = qs.map(|q| blocks(q));
        let blocks_per_row = dim / 16;
        let whole = blocks_per_row * 16;
        let tail = |a: &[f32], b: &[f32]| -> f32 {
            let (a, b) = (a.get(whole..).unwrap_or(&[]), b.get(whole..).unwrap_or(&[]));
            a.iter().zip(b).map(|(x, y)| x * y).sum()
        };
        let mut rows_iter = rows.chunks_exact(dim);
        let mut r = 0;
        while let (Some(r0), Some(r1), Some(r2), Some(r3)) = (
            rows_iter.next(),
            rows_iter.next(),
            rows_iter.next(),
            rows_iter.next(),
        ) {
            let tile = [r0, r1, r2, r3];
            // Not `tile.map(..)`: its closure would not be inlined into this AVX-512 code.
            let xb = [blocks(r0), blocks(r1), blocks(r2), blocks(r3)];
            let mut acc = [[_mm512_setzero_ps(); NQ]; 4];
            for b in 0..blocks_per_row {
                let (Some(x0), Some(x1), Some(x2), Some(x3)) =
                    (xb[0].get(b), xb[1].get(b), xb[2].get(b), xb[3].get(b))
                else {
                    break;
                };
                let x = [load_f32(x0), load_f32(x1), load_f32(x2), load_f32(x3)];
                for (j, q) in qb.iter().enumerate() {
                    let Some(q) = q.get(b) else { continue };
                    let q = load_f32(q);
                    for (k, xk) in x.iter().enumerate() {
                        acc[k][j] = _mm512_fmadd_ps(*xk, q, acc[k][j]);
                    }
                }
            }
            for (k, row) in tile.iter().enumerate() {
                for (j, q) in qs.iter().enumerate() {
                    on_row(r + k, j, _mm512_reduce_add_ps(acc[k][j]) + tail(q, row));
                }
            }
            r += 4;
        }
        // The rows after the last whole tile (the iterator stopped inside it).
        for (k, row) in rows.chunks_exact(dim).skip(r).enumerate() {
            let x = blocks(row);
            let mut acc = [_mm512_setzero_ps(); NQ];
            for b in 0..blocks_per_row {
                let Some(xb) = x.get(b) else { break };
                let xb = load_f32(xb);
                for (j, q) in qb.iter().enumerate() {
                    if let Some(q) = q.get(b) {
                        acc[j] = _mm512_fmadd_ps(xb, load_f32(q), acc[j]);
                    }
                }
            }
            for (j, q) in qs.iter().enumerate() {
                on_row(r + k, j, _mm512_reduce_add_ps(acc[j]) + tail(q, row));
            }
        }
    }

    /// The i8 twin of `each_dot_f32_tile`: up to four queries against rows four at a time,
    /// in registers. Per 64-byte block, four row loads (made unsigned as in `dot_i8`) and one
    /// load per query feed a `vpdpbusd` per pair. Integer sums, so every score equals
    /// `dot_i8`'s.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn each_dot_i8_tile(
        queries: &[&[i8]],
        dim: usize,
        rows: &[i8],
        on_row: impl FnMut(usize, usize, i32),
    ) {
        if dim == 0 {
            return;
        }
        // As many accumulators as queries: a chunk of a batch read by one query costs a
        // quarter of one read by four.
        match queries {
            [] => {}
            [a] => tile_i8::<1>([a], dim, rows, on_row),
            [a, b] => tile_i8::<2>([a, b], dim, rows, on_row),
            [a, b, c] => tile_i8::<3>([a, b, c], dim, rows, on_row),
            [a, b, c, d, ..] => tile_i8::<4>([a, b, c, d], dim, rows, on_row),
        }
    }

    /// The whole 64-byte blocks of `v`.
    fn blocks_i8(v: &[i8]) -> &[[i8; 64]] {
        v.as_chunks::<64>().0
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    fn tile_i8<const NQ: usize>(
        qs: [&&[i8]; NQ],
        dim: usize,
        rows: &[i8],
        mut on_row: impl FnMut(usize, usize, i32),
    ) {
        let offsets = qs.map(|q| offset_i8(q));
        let qb = qs.map(|q| blocks_i8(q));
        let blocks_per_row = dim / 64;
        let whole = blocks_per_row * 64;
        let tail = |a: &[i8], b: &[i8]| -> i32 {
            let (a, b) = (a.get(whole..).unwrap_or(&[]), b.get(whole..).unwrap_or(&[]));
            a.iter()
                .zip(b)
                .map(|(x, y)| i32::from(*x) * i32::from(*y))
                .sum()
        };
        let flip = _mm512_set1_epi8(i8::MIN);
        let mut rows_iter = rows.chunks_exact(dim);
        let mut r = 0;
        while let (Some(r0), Some(r1), Some(r2), Some(r3)) = (
            rows_iter.next(),
            rows_iter.next(),
            rows_iter.next(),
            rows_iter.next(),
        ) {
            let tile = [r0, r1, r2, r3];
            // Not `tile.map(..)`: its closure would not be inlined into this AVX-512 code.
            let xb = [blocks_i8(r0), blocks_i8(r1), blocks_i8(r2), blocks_i8(r3)];
            let mut acc = [[_mm512_setzero_si512(); NQ]; 4];
            for b in 0..blocks_per_row {
                let (Some(x0), Some(x1), Some(x2), Some(x3)) =
                    (xb[0].get(b), xb[1].get(b), xb[2].get(b), xb[3].get(b))
                else {
                    break;
                };
                let x = [
                    _mm512_xor_si512(load_i8(x0), flip),
                    _mm512_xor_si512(load_i8(x1), flip),
                    _mm512_xor_si512(load_i8(x2), flip),
                    _mm512_xor_si512(load_i8(x3), flip),
                ];
                for (j, q) in qb.iter().enumerate() {
                    let Some(q) = q.get(b) else { continue };
                    let q = load_i8(q);
                    for (k, xk) in x.iter().enumerate() {
                        acc[k][j] = _mm512_dpbusd_epi32(acc[k][j], *xk, q);
                    }
                }
            }
            for (k, row) in tile.iter().enumerate() {
                for (j, q) in qs.iter().enumerate() {
                    let sum = _mm512_reduce_add_epi32(acc[k][j]);
                    on_row(r + k, j, sum - offsets[j] + tail(q, row));
                }
            }
            r += 4;
        }
        // The rows after the last whole tile (the iterator stopped inside it).
        for (k, row) in rows.chunks_exact(dim).skip(r).enumerate() {
            for (j, q) in qs.iter().enumerate() {
                on_row(r + k, j, dot_i8(q, row, offsets[j]));
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn each_dot_f32_batch(
        queries: &[&[f32]],
        dim: usize,
        rows: &[f32],
        mut on_row: impl FnMut(usize, usize, f32),
    ) {
        for (i, row) in rows.chunks_exact(dim.max(1)).enumerate() {
            for (q, query) in queries.iter().enumerate() {
                on_row(i, q, dot_f32(query, row));
            }
        }
    }
}

/// The kernels of hosts with AVX2 and FMA but no AVX-512 (AMD EPYC before Zen 4, older
/// Intel): the same shapes as `avx512` at half the width. AVX2 has no u8 × i8 dot that is
/// exact (`vpmaddubsw` saturates at i16), so the i8 kernels widen both sides to i16
/// (`vpmovsxbw`) and multiply-add pairs into i32 (`vpmaddwd`): exact, as `vpdpbusd` is.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m128i, __m256, __m256i, _mm_add_epi32, _mm_add_ps, _mm_add_ss, _mm_cvtsi128_si32,
        _mm_cvtss_f32, _mm_loadu_si128, _mm_movehl_ps, _mm_shuffle_epi32, _mm_shuffle_ps,
        _mm256_add_epi32, _mm256_add_ps, _mm256_castps256_ps128, _mm256_castsi256_si128,
        _mm256_cvtepi8_epi16, _mm256_extractf128_ps, _mm256_extracti128_si256, _mm256_fmadd_ps,
        _mm256_loadu_ps, _mm256_madd_epi16, _mm256_setzero_ps, _mm256_setzero_si256,
    };

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn load_f32(block: &[f32; 8]) -> __m256 {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `block` is 8 f32 = 32 readable bytes; loadu has no alignment requirement.
        unsafe {
            _mm256_loadu_ps(block.as_ptr())
        }
    }

    /// 16 codes widened to i16.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn load_i8_as_i16(block: &[i8; 16]) -> __m256i {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `block` is 16 readable bytes; loadu has no alignment requirement.
        let codes: __m128i = unsafe { _mm_loadu_si128(block.as_ptr().cast()) };
        _mm256_cvtepi8_epi16(codes)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn reduce_add_ps(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<0b01>(s, s)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn reduce_add_epi32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)))
    }

    /// f32 dot: four independent FMA chains over 32-float blocks, one over the remaining
    /// 8-float blocks, then a scalar tail.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let (a32, a_rest) = a.as_chunks::<32>();
        let (b32, b_rest) = b.as_chunks::<32>();
        let (mut s0, mut s1, mut s2, mut s3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        for (x, y) in a32.iter().zip(b32) {
            let (xs, _) = x.as_chunks::<8>();
            let (ys, _) = y.as_chunks::<8>();
            if let ([x0, x1, x2, x3], [y0, y1, y2, y3]) = (xs, ys) {
                s0 = _mm256_fmadd_ps(load_f32(x0), load_f32(y0), s0);
                s1 = _mm256_fmadd_ps(load_f32(x1), load_f32(y1), s1);
                s2 = _mm256_fmadd_ps(load_f32(x2), load_f32(y2), s2);
                s3 = _mm256_fmadd_ps(load_f32(x3), load_f32(y3), s3);
            }
        }
        let (a8, a_tail) = a_rest.as_chunks::<8>();
        let (b8, b_tail) = b_rest.as_chunks::<8>();
        for (x, y) in a8.iter().zip(b8) {
            s0 = _mm256_fmadd_ps(load_f32(x), load_f32(y), s0);
        }
        let mut sum = reduce_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
        for (x, y) in a_tail.iter().zip(b_tail) {
            sum += x * y;
        }
        sum
    }

    /// Exact i8 dot: 16 codes a step widened to i16, pairs multiplied and added into i32
    /// lanes; two chains over 32-code blocks, one over a remaining 16, then a scalar tail.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dot_i8(q: &[i8], c: &[i8]) -> i32 {
        let (q32, q_rest) = q.as_chunks::<32>();
        let (c32, c_rest) = c.as_chunks::<32>();
        let (mut s0, mut s1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for (x, y) in q32.iter().zip(c32) {
            let (xs, _) = x.as_chunks::<16>();
            let (ys, _) = y.as_chunks::<16>();
            if let ([x0, x1], [y0, y1]) = (xs, ys) {
                s0 = _mm256_add_epi32(
                    s0,
                    _mm256_madd_epi16(load_i8_as_i16(x0), load_i8_as_i16(y0)),
                );
                s1 = _mm256_add_epi32(
                    s1,
                    _mm256_madd_epi16(load_i8_as_i16(x1), load_i8_as_i16(y1)),
                );
            }
        }
        let (q16, q_tail) = q_rest.as_chunks::<16>();
        let (c16, c_tail) = c_rest.as_chunks::<16>();
        for (x, y) in q16.iter().zip(c16) {
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(load_i8_as_i16(x), load_i8_as_i16(y)));
        }
        let mut sum = reduce_add_epi32(_mm256_add_epi32(s0, s1));
        for (x, y) in q_tail.iter().zip(c_tail) {
            sum += i32::from(*x) * i32::from(*y);
        }
        sum
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn each_dot_f32(query: &[f32], rows: &[f32], mut on_row: impl FnMut(usize, f32)) {
        for (i, row) in rows.chunks_exact(query.len().max(1)).enumerate() {
            on_row(i, dot_f32(query, row));
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn each_dot_i8(query: &[i8], rows: &[i8], mut on_row: impl FnMut(usize, i32)) {
        for (i, row) in rows.chunks_exact(query.len().max(1)).enumerate() {
            on_row(i, dot_i8(query, row));
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn each_dot_f32_batch(
        queries: &[&[f32]],
        dim: usize,
        rows: &[f32],
        mut on_row: impl FnMut(usize, usize, f32),
    ) {
        for (i, row) in rows.chunks_exact(dim.max(1)).enumerate() {
            for (q, query) in queries.iter().enumerate() {
                on_row(i, q, dot_f32(query, row));
            }
        }
    }

    /// The whole 8-float blocks of `v`.
    fn blocks(v: &[f32]) -> &[[f32; 8]] {
        v.as_chunks::<8>().0
    }

    /// The whole 16-code blocks of `v`.
    fn blocks_i8(v: &[i8]) -> &[[i8; 16]] {
        v.as_chunks::<16>().0
    }

    /// As `avx512::each_dot_f32_tile`, rows two at a time: sixteen ymm registers hold eight
    /// accumulators, two rows and a query. A pair's sum is the same sequence of FMAs in a
    /// tile as alone, so the same bits whatever the other queries.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn each_dot_f32_tile(
        queries: &[&[f32]],
        dim: usize,
        rows: &[f32],
        on_row: impl FnMut(usize, usize, f32),
    ) {
        if dim == 0 {
            return;
        }
        match queries {
            [] => {}
            [a] => tile::<1>([a], dim, rows, on_row),
            [a, b] => tile::<2>([a, b], dim, rows, on_row),
            [a, b, c] => tile::<3>([a, b, c], dim, rows, on_row),
            [a, b, c, d, ..] => tile::<4>([a, b, c, d], dim, rows, on_row),
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn tile<const NQ: usize>(
        qs: [&&[f32]; NQ],
        dim: usize,
        rows: &[f32],
        mut on_row: impl FnMut(usize, usize, f32),
    ) {
        let qb = qs.map(|q| blocks(q));
        let blocks_per_row = dim / 8;
        let whole = blocks_per_row * 8;
        let tail = |a: &[f32], b: &[f32]| -> f32 {
            let (a, b) = (a.get(whole..).unwrap_or(&[]), b.get(whole..).unwrap_or(&[]));
            a.iter().zip(b).map(|(x, y)| x * y).sum()
        };
        let mut rows_iter = rows.chunks_exact(dim);
        let mut r = 0;
        while let (Some(r0), Some(r1)) = (rows_iter.next(), rows_iter.next()) {
            let (xb0, xb1) = (blocks(r0), blocks(r1));
            let mut acc = [[_mm256_setzero_ps(); NQ]; 2];
            for b in 0..blocks_per_row {
                let (Some(x0), Some(x1)) = (xb0.get(b), xb1.get(b)) else {
                    break;
                };
                let x = [load_f32(x0), load_f32(x1)];
                for (j, q) in qb.iter().enumerate() {
                    let Some(q) = q.get(b) else { continue };
                    let q = load_f32(q);
                    for (k, xk) in x.iter().enumerate() {
                        acc[k][j] = _mm256_fmadd_ps(*xk, q, acc[k][j]);
                    }
                }
            }
            for (k, row) in [r0, r1].iter().enumerate() {
                for (j, q) in qs.iter().enumerate() {
                    on_row(r + k, j, reduce_add_ps(acc[k][j]) + tail(q, row));
                }
            }
            r += 2;
        }
        // The row after the last whole pair (the iterator stopped inside it).
        for (k, row) in rows.chunks_exact(dim).skip(r).enumerate() {
            let x = blocks(row);
            let mut acc = [_mm256_setzero_ps(); NQ];
            for b in 0..blocks_per_row {
                let Some(xb) = x.get(b) else { break };
                let xb = load_f32(xb);
                for (j, q) in qb.iter().enumerate() {
                    if let Some(q) = q.get(b) {
                        acc[j] = _mm256_fmadd_ps(xb, load_f32(q), acc[j]);
                    }
                }
            }
            for (j, q) in qs.iter().enumerate() {
                on_row(r + k, j, reduce_add_ps(acc[j]) + tail(q, row));
            }
        }
    }

    /// The i8 twin of `each_dot_f32_tile`, rows two at a time; integer sums, so every score
    /// equals `dot_i8`'s.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn each_dot_i8_tile(
        queries: &[&[i8]],
        dim: usize,
        rows: &[i8],
        on_row: impl FnMut(usize, usize, i32),
    ) {
        if dim == 0 {
            return;
        }
        match queries {
            [] => {}
            [a] => tile_i8::<1>([a], dim, rows, on_row),
            [a, b] => tile_i8::<2>([a, b], dim, rows, on_row),
            [a, b, c] => tile_i8::<3>([a, b, c], dim, rows, on_row),
            [a, b, c, d, ..] => tile_i8::<4>([a, b, c, d], dim, rows, on_row),
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn tile_i8<const NQ: usize>(
        qs: [&&[i8]; NQ],
        dim: usize,
        rows: &[i8],
        mut on_row: impl FnMut(usize, usize, i32),
    ) {
        let qb = qs.map(|q| blocks_i8(q));
        let blocks_per_row = dim / 16;
        let whole = blocks_per_row * 16;
        let tail = |a: &[i8], b: &[i8]| -> i32 {
            let (a, b) = (a.get(whole..).unwrap_or(&[]), b.get(whole..).unwrap_or(&[]));
            a.iter()
                .zip(b)
                .map(|(x, y)| i32::from(*x) * i32::from(*y))
                .sum()
        };
        let mut rows_iter = rows.chunks_exact(dim);
        let mut r = 0;
        while let (Some(r0), Some(r1)) = (rows_iter.next(), rows_iter.next()) {
            let (xb0, xb1) = (blocks_i8(r0), blocks_i8(r1));
            let mut acc = [[_mm256_setzero_si256(); NQ]; 2];
            for b in 0..blocks_per_row {
                let (Some(x0), Some(x1)) = (xb0.get(b), xb1.get(b)) else {
                    break;
                };
                let x = [load_i8_as_i16(x0), load_i8_as_i16(x1)];
                for (j, q) in qb.iter().enumerate() {
                    let Some(q) = q.get(b) else { continue };
                    let q = load_i8_as_i16(q);
                    for (k, xk) in x.iter().enumerate() {
                        acc[k][j] = _mm256_add_epi32(acc[k][j], _mm256_madd_epi16(*xk, q));
                    }
                }
            }
            for (k, row) in [r0, r1].iter().enumerate() {
                for (j, q) in qs.iter().enumerate() {
                    on_row(r + k, j, reduce_add_epi32(acc[k][j]) + tail(q, row));
                }
            }
            r += 2;
        }
        for (k, row) in rows.chunks_exact(dim).skip(r).enumerate() {
            for (j, q) in qs.iter().enumerate() {
                on_row(r + k, j, dot_i8(q, row));
            }
        }
    }
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "f32 inputs, f64 accumulator; exact i32 for i8"
)]
fn simsimd_f32(a: &[f32], b: &[f32]) -> f32 {
    <f32 as SpatialSimilarity>::dot(a, b).map_or(0.0, |d| d as f32)
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "exact integer result < 2^31"
)]
fn simsimd_i8(a: &[i8], b: &[i8]) -> i32 {
    <i8 as SpatialSimilarity>::dot(a, b).map_or(0, |d| d as i32)
}

/// Asks the CPU to start loading `rows` into its caches, every 64-byte line of them, and
/// returns at once: a hint that never faults. The bit scan asks for the few rows it will score
/// exactly before it scores the first, so their reads from memory overlap instead of each
/// waiting its turn (`docs/ivf.md`, "1-bit codes with error bounds").
#[inline]
pub(crate) fn prefetch(rows: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in rows.chunks(16) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        #[expect(unsafe_code, reason = "a prefetch hint")]
        // SAFETY: a prefetch reads nothing the program sees and never faults; the pointer is
        // inside `rows` anyway. SSE is part of every x86-64 CPU.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = rows;
}

/// Calls `on_row(i, dot(query, row_i))` for each `query.len()`-wide row of `rows`.
#[inline]
pub(crate) fn each_dot_f32(query: &[f32], rows: &[f32], mut on_row: impl FnMut(usize, f32)) {
    #[cfg(target_arch = "x86_64")]
    if cpu().avx512 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx512::each_dot_f32` enables.
        unsafe {
            avx512::each_dot_f32(query, rows, on_row);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cpu().avx2 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx2::each_dot_f32` enables.
        unsafe {
            avx2::each_dot_f32(query, rows, on_row);
        }
        return;
    }
    for (i, row) in rows.chunks_exact(query.len().max(1)).enumerate() {
        on_row(i, simsimd_f32(query, row));
    }
}

/// Calls `on_row(i, dot(query, row_i))` for each `query.len()`-wide row of i8 codes.
#[inline]
pub(crate) fn each_dot_i8(query: &[i8], rows: &[i8], mut on_row: impl FnMut(usize, i32)) {
    #[cfg(target_arch = "x86_64")]
    if cpu().vnni {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx512::each_dot_i8` enables.
        unsafe {
            avx512::each_dot_i8(query, rows, on_row);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cpu().avx2 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx2::each_dot_i8` enables.
        unsafe {
            avx2::each_dot_i8(query, rows, on_row);
        }
        return;
    }
    for (i, row) in rows.chunks_exact(query.len().max(1)).enumerate() {
        on_row(i, simsimd_i8(query, row));
    }
}

/// Calls `on_row(i, q, score)` for each row and each of up to four queries (more are
/// ignored), `score` the dot product within the kernels' tolerance (not bit for bit `dot`):
/// the multi-query kernel, four queries and four rows held in registers at a time.
#[inline]
pub(crate) fn each_dot_f32_tile(
    queries: &[&[f32]],
    dim: usize,
    rows: &[f32],
    mut on_row: impl FnMut(usize, usize, f32),
) {
    #[cfg(target_arch = "x86_64")]
    if cpu().avx512 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx512::each_dot_f32_tile` enables.
        unsafe {
            avx512::each_dot_f32_tile(queries, dim, rows, on_row);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cpu().avx2 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx2::each_dot_f32_tile` enables.
        unsafe {
            avx2::each_dot_f32_tile(queries, dim, rows, on_row);
        }
        return;
    }
    for (i, row) in rows.chunks_exact(dim.max(1)).enumerate() {
        for (q, query) in queries.iter().take(4).enumerate() {
            on_row(i, q, simsimd_f32(query, row));
        }
    }
}

/// Calls `on_row(i, q, dot_i8(queries[q], row_i))` for each `dim`-wide row of i8 codes and
/// each of up to four queries (more are ignored), exact: the i8 multi-query kernel, four
/// queries and four rows held in registers at a time. Every query must be `dim` long.
#[inline]
pub(crate) fn each_dot_i8_tile(
    queries: &[&[i8]],
    dim: usize,
    rows: &[i8],
    mut on_row: impl FnMut(usize, usize, i32),
) {
    #[cfg(target_arch = "x86_64")]
    if cpu().vnni {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx512::each_dot_i8_tile` enables.
        unsafe {
            avx512::each_dot_i8_tile(queries, dim, rows, on_row);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cpu().avx2 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx2::each_dot_i8_tile` enables.
        unsafe {
            avx2::each_dot_i8_tile(queries, dim, rows, on_row);
        }
        return;
    }
    for (i, row) in rows.chunks_exact(dim.max(1)).enumerate() {
        for (q, query) in queries.iter().take(4).enumerate() {
            on_row(i, q, simsimd_i8(query, row));
        }
    }
}

/// Calls `on_row(i, q, dot(queries[q], row_i))` for each row and each query; each row is read
/// from memory once for the whole batch.
#[inline]
pub(crate) fn each_dot_f32_batch(
    queries: &[&[f32]],
    dim: usize,
    rows: &[f32],
    mut on_row: impl FnMut(usize, usize, f32),
) {
    #[cfg(target_arch = "x86_64")]
    if cpu().avx512 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx512::each_dot_f32_batch` enables.
        unsafe {
            avx512::each_dot_f32_batch(queries, dim, rows, on_row);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cpu().avx2 {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` detected every feature `avx2::each_dot_f32_batch` enables.
        unsafe {
            avx2::each_dot_f32_batch(queries, dim, rows, on_row);
        }
        return;
    }
    for (i, row) in rows.chunks_exact(dim.max(1)).enumerate() {
        for (q, query) in queries.iter().enumerate() {
            on_row(i, q, simsimd_f32(query, row));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cpu, KernelsAsked, asked_by, capped};

    const EVERYTHING: Cpu = Cpu {
        avx512: true,
        vnni: true,
        avx2: true,
        avx512bw: true,
        avx512vbmi: true,
    };

    #[test]
    fn amberdb_kernels_takes_three_values_and_caps_what_it_names() {
        assert_eq!(asked_by("auto"), Some(KernelsAsked::Best));
        assert_eq!(asked_by("avx2"), Some(KernelsAsked::Avx2));
        assert_eq!(asked_by("avx512bw"), Some(KernelsAsked::Avx512Bw));
        for unknown in ["", "AVX2", "avx512", "sse4", " avx2"] {
            assert_eq!(asked_by(unknown), None, "{unknown:?}");
        }
        assert_eq!(capped(EVERYTHING, None), EVERYTHING);
        assert_eq!(capped(EVERYTHING, Some(KernelsAsked::Best)), EVERYTHING);
        let avx512bw = capped(EVERYTHING, Some(KernelsAsked::Avx512Bw));
        assert!(avx512bw.avx512bw && avx512bw.vnni && !avx512bw.avx512vbmi);
        let avx2 = capped(EVERYTHING, Some(KernelsAsked::Avx2));
        assert!(avx2.avx2 && !avx2.avx512 && !avx2.vnni && !avx2.avx512bw && !avx2.avx512vbmi);
    }
}
