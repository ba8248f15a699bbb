//! The bit codes' kernel (`crate::bitcodes`): for a block of 32 rows' 1-bit codes and a
//! query's four bit planes, each row's `Σ_j 2^j · popcount(bits & plane_j)`, exact.
//!
//! Picked once per process with the scan kernels (`x86.rs`): AVX-512 VPOPCNTDQ counts eight
//! rows' words in one instruction; AVX2 counts bytes with the `vpshufb` nibble table (Muła's
//! method) and sums them with `vpsadbw`, four rows at a time; elsewhere the plain loop, which
//! on x86-64 is compiled with `popcnt` when the CPU has it. Every path the test host can run
//! is tested against [`bit_dots_scalar`] for every word count 1..=20 (`tests` below).
//!
//! A block is `words × 32` u64, word-major: row `r`'s word `w` at `w · 32 + r`
//! (`docs/format/segment-ivf.md`, version 3): one load reads the same word of consecutive
//! rows, as the vector paths need.

use crate::bitcodes::{BLOCK_ROWS, QUERY_BITS};

/// The plain loop every path is checked against. `block` holds `words × 32` u64 and
/// `planes` `QUERY_BITS × words`; shorter input counts as zero words.
pub fn bit_dots_scalar(block: &[u64], planes: &[u64], words: usize, out: &mut [u32; BLOCK_ROWS]) {
    *out = [0; BLOCK_ROWS];
    for w in 0..words {
        let plane = |j: usize| planes.get(j * words + w).copied().unwrap_or(0);
        let p = [plane(0), plane(1), plane(2), plane(3)];
        let rows = block
            .get(w * BLOCK_ROWS..(w + 1) * BLOCK_ROWS)
            .unwrap_or_default();
        for (o, &x) in out.iter_mut().zip(rows) {
            *o += (x & p[0]).count_ones()
                + ((x & p[1]).count_ones() << 1)
                + ((x & p[2]).count_ones() << 2)
                + ((x & p[3]).count_ones() << 3);
        }
    }
}

/// `bit_dots_scalar` with the best kernel this CPU has. A block or planes shorter than
/// `words` asks for give zeros.
pub fn bit_dots(block: &[u64], planes: &[u64], words: usize, out: &mut [u32; BLOCK_ROWS]) {
    let (Some(block), Some(planes)) = (
        block.get(..words * BLOCK_ROWS),
        planes.get(..QUERY_BITS * words),
    ) else {
        *out = [0; BLOCK_ROWS];
        return;
    };
    #[cfg(target_arch = "x86_64")]
    {
        let cpu = super::x86::cpu();
        if cpu.vpopcntdq {
            #[expect(unsafe_code, reason = "calling a target_feature function")]
            // SAFETY: `cpu()` confirmed AVX-512 F and VPOPCNTDQ (`x86::detected`).
            unsafe {
                avx512::bit_dots(block, planes, words, out);
            }
            return;
        }
        if cpu.avx2 {
            #[expect(unsafe_code, reason = "calling a target_feature function")]
            // SAFETY: `cpu()` confirmed AVX2.
            unsafe {
                avx2::bit_dots(block, planes, words, out);
            }
            return;
        }
        if std::is_x86_feature_detected!("popcnt") {
            #[expect(unsafe_code, reason = "calling a target_feature function")]
            // SAFETY: the CPU has POPCNT, checked just above.
            unsafe {
                with_popcnt(block, planes, words, out);
            }
            return;
        }
    }
    bit_dots_scalar(block, planes, words, out);
}

/// The plain loop [`bit_planes`] is checked against: plane `j` of word `w` holds bit `j` of
/// levels `64·w .. 64·w + 64` (`levels` is `64 × words` long; a shorter one counts as zeros).
pub fn bit_planes_scalar(levels: &[u8], words: usize, planes: &mut [u64]) {
    planes.fill(0);
    for w in 0..words {
        for b in 0..64 {
            let level = levels.get(w * 64 + b).copied().unwrap_or(0);
            for j in 0..QUERY_BITS {
                if let Some(p) = planes.get_mut(j * words + w) {
                    *p |= u64::from(level >> j & 1) << b;
                }
            }
        }
    }
}

/// A query's levels (0..=15 each, `64 × words` of them) as `QUERY_BITS` bit planes of
/// `words` u64 each, with AVX2's `vpmovmskb` (32 levels a plane an instruction) where the CPU
/// has it: a probe builds these once a list.
pub fn bit_planes(levels: &[u8], words: usize, planes: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::cpu().avx2 && levels.len() == words * 64 && planes.len() == QUERY_BITS * words {
        #[expect(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `cpu()` confirmed AVX2.
        unsafe {
            avx2::bit_planes(levels, words, planes);
        }
        return;
    }
    bit_planes_scalar(levels, words, planes);
}

/// Which path `bit_dots` takes here, for benchmark reports.
#[must_use]
pub fn bit_backend() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let cpu = super::x86::cpu();
        if cpu.vpopcntdq {
            return "avx512 vpopcntdq";
        }
        if cpu.avx2 {
            return "avx2 vpshufb";
        }
        if std::is_x86_feature_detected!("popcnt") {
            return "popcnt";
        }
    }
    "scalar"
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn with_popcnt(block: &[u64], planes: &[u64], words: usize, out: &mut [u32; BLOCK_ROWS]) {
    bit_dots_scalar(block, planes, words, out);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::BLOCK_ROWS;
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi64, _mm512_and_si512, _mm512_loadu_si512, _mm512_popcnt_epi64,
        _mm512_set1_epi64, _mm512_setzero_si512, _mm512_slli_epi64, _mm512_storeu_si512,
    };

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(rows: &[u64; 8]) -> __m512i {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `rows` is 64 readable bytes; loadu has no alignment requirement.
        unsafe {
            _mm512_loadu_si512(rows.as_ptr().cast())
        }
    }

    /// Eight rows at a time: one 512-bit load holds the same word of eight rows.
    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    pub(super) fn bit_dots(
        block: &[u64],
        planes: &[u64],
        words: usize,
        out: &mut [u32; BLOCK_ROWS],
    ) {
        #[expect(clippy::cast_possible_wrap, reason = "bit patterns")]
        let plane = |j: usize, w: usize| planes.get(j * words + w).copied().unwrap_or(0) as i64;
        for (g, out8) in out.chunks_exact_mut(8).enumerate() {
            let mut acc = _mm512_setzero_si512();
            for w in 0..words {
                let Some(rows) = block
                    .get(w * BLOCK_ROWS + 8 * g..w * BLOCK_ROWS + 8 * g + 8)
                    .and_then(|r| <&[u64; 8]>::try_from(r).ok())
                else {
                    continue;
                };
                let x = load(rows);
                let c0 = _mm512_popcnt_epi64(_mm512_and_si512(x, _mm512_set1_epi64(plane(0, w))));
                let c1 = _mm512_popcnt_epi64(_mm512_and_si512(x, _mm512_set1_epi64(plane(1, w))));
                let c2 = _mm512_popcnt_epi64(_mm512_and_si512(x, _mm512_set1_epi64(plane(2, w))));
                let c3 = _mm512_popcnt_epi64(_mm512_and_si512(x, _mm512_set1_epi64(plane(3, w))));
                acc = _mm512_add_epi64(acc, c0);
                acc = _mm512_add_epi64(acc, _mm512_slli_epi64::<1>(c1));
                acc = _mm512_add_epi64(acc, _mm512_slli_epi64::<2>(c2));
                acc = _mm512_add_epi64(acc, _mm512_slli_epi64::<3>(c3));
            }
            let mut sums = [0u64; 8];
            #[expect(unsafe_code, reason = "unaligned vector store")]
            // SAFETY: `sums` is 64 writable bytes; storeu has no alignment requirement.
            unsafe {
                _mm512_storeu_si512(sums.as_mut_ptr().cast(), acc);
            }
            for (o, s) in out8.iter_mut().zip(sums) {
                *o = u32::try_from(s).unwrap_or(u32::MAX);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::BLOCK_ROWS;
    use super::QUERY_BITS;
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi8, _mm256_add_epi64, _mm256_and_si256, _mm256_loadu_si256,
        _mm256_movemask_epi8, _mm256_sad_epu8, _mm256_set1_epi8, _mm256_set1_epi64x,
        _mm256_setr_epi8, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_slli_epi16,
        _mm256_srli_epi16, _mm256_storeu_si256,
    };

    /// 32 levels at a time: shifted so bit `j` of each byte is its top bit, then gathered.
    /// (A 16-bit shift carries a low byte's bits into the high byte's low bits only, never
    /// into its top bit, for shifts below 8.)
    #[target_feature(enable = "avx2")]
    pub(super) fn bit_planes(levels: &[u8], words: usize, planes: &mut [u64]) {
        for w in 0..words {
            let mut word = [0u64; QUERY_BITS];
            for half in 0..2 {
                let at = w * 64 + half * 32;
                let Some(chunk) = levels
                    .get(at..at + 32)
                    .and_then(|c| <&[u8; 32]>::try_from(c).ok())
                else {
                    continue;
                };
                #[expect(unsafe_code, reason = "unaligned vector load")]
                // SAFETY: `chunk` is 32 readable bytes; loadu has no alignment requirement.
                let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
                let masks = [
                    _mm256_movemask_epi8(_mm256_slli_epi16::<7>(v)),
                    _mm256_movemask_epi8(_mm256_slli_epi16::<6>(v)),
                    _mm256_movemask_epi8(_mm256_slli_epi16::<5>(v)),
                    _mm256_movemask_epi8(_mm256_slli_epi16::<4>(v)),
                ];
                for (out, mask) in word.iter_mut().zip(masks) {
                    #[expect(clippy::cast_sign_loss, reason = "a bit mask")]
                    let mask = u64::from(mask as u32);
                    *out |= mask << (32 * half);
                }
            }
            for (j, plane) in word.into_iter().enumerate() {
                if let Some(p) = planes.get_mut(j * words + w) {
                    *p = plane;
                }
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn load(rows: &[u64; 4]) -> __m256i {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `rows` is 32 readable bytes; loadu has no alignment requirement.
        unsafe {
            _mm256_loadu_si256(rows.as_ptr().cast())
        }
    }

    /// Bits set in each byte of `x`: two nibble lookups.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn byte_counts(x: __m256i, table: __m256i, low: __m256i) -> __m256i {
        let lo = _mm256_and_si256(x, low);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low);
        _mm256_add_epi8(
            _mm256_shuffle_epi8(table, lo),
            _mm256_shuffle_epi8(table, hi),
        )
    }

    /// Four rows at a time: per word, each plane's byte counts weighted by Horner's rule
    /// (at most 8 · 15 = 120 a byte), summed into the rows' u64 lanes by `vpsadbw`.
    #[target_feature(enable = "avx2")]
    pub(super) fn bit_dots(
        block: &[u64],
        planes: &[u64],
        words: usize,
        out: &mut [u32; BLOCK_ROWS],
    ) {
        let table = _mm256_setr_epi8(
            0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2,
            3, 3, 4,
        );
        let low = _mm256_set1_epi8(0x0f);
        let zero = _mm256_setzero_si256();
        #[expect(clippy::cast_possible_wrap, reason = "bit patterns")]
        let plane = |j: usize, w: usize| {
            _mm256_set1_epi64x(planes.get(j * words + w).copied().unwrap_or(0) as i64)
        };
        for (g, out4) in out.chunks_exact_mut(4).enumerate() {
            let mut acc = _mm256_setzero_si256();
            for w in 0..words {
                let Some(rows) = block
                    .get(w * BLOCK_ROWS + 4 * g..w * BLOCK_ROWS + 4 * g + 4)
                    .and_then(|r| <&[u64; 4]>::try_from(r).ok())
                else {
                    continue;
                };
                let x = load(rows);
                let mut h = byte_counts(_mm256_and_si256(x, plane(3, w)), table, low);
                for j in [2, 1, 0] {
                    let c = byte_counts(_mm256_and_si256(x, plane(j, w)), table, low);
                    h = _mm256_add_epi8(_mm256_add_epi8(h, h), c);
                }
                acc = _mm256_add_epi64(acc, _mm256_sad_epu8(h, zero));
            }
            let mut sums = [0u64; 4];
            #[expect(unsafe_code, reason = "unaligned vector store")]
            // SAFETY: `sums` is 32 writable bytes; storeu has no alignment requirement.
            unsafe {
                _mm256_storeu_si256(sums.as_mut_ptr().cast(), acc);
            }
            for (o, s) in out4.iter_mut().zip(sums) {
                *o = u32::try_from(s).unwrap_or(u32::MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{bit_backend, bit_dots, bit_dots_scalar, bit_planes, bit_planes_scalar};
    use crate::bitcodes::{BLOCK_ROWS, QUERY_BITS};
    use crate::synthetic::{SeededRng, seed_from_env};

    /// Every path this host runs equals the plain loop, for every word count and for bits
    /// dense, sparse, all ones and all zeros.
    #[test]
    fn every_bit_kernel_equals_the_plain_loop() {
        let seed = seed_from_env("every_bit_kernel_equals_the_plain_loop", 9);
        eprintln!("seed {seed}");
        let mut rng = SeededRng::new(seed);
        super::super::x86::for_each_backend(|name| {
            for words in 1..=20 {
                for density in 0..4 {
                    let mut word = || match density {
                        0 => rng.next_u64(),
                        1 => rng.next_u64() & rng.next_u64() & rng.next_u64(),
                        2 => u64::MAX,
                        _ => 0,
                    };
                    let block: Vec<u64> = (0..words * BLOCK_ROWS).map(|_| word()).collect();
                    let planes: Vec<u64> = (0..QUERY_BITS * words).map(|_| word()).collect();
                    let (mut want, mut got) = ([0; BLOCK_ROWS], [7; BLOCK_ROWS]);
                    bit_dots_scalar(&block, &planes, words, &mut want);
                    bit_dots(&block, &planes, words, &mut got);
                    assert_eq!(got, want, "{name} / {}: {words} words", bit_backend());
                }
            }
            // Too short a block: zeros, never a read past it.
            let mut got = [7; BLOCK_ROWS];
            bit_dots(&[u64::MAX; 10], &[u64::MAX; 8], 2, &mut got);
            assert_eq!(got, [0; BLOCK_ROWS], "{name}");
        });
    }

    #[test]
    fn every_plane_builder_equals_the_plain_loop() {
        let seed = seed_from_env("every_plane_builder_equals_the_plain_loop", 10);
        eprintln!("seed {seed}");
        let mut rng = SeededRng::new(seed);
        super::super::x86::for_each_backend(|name| {
            for words in 1..=8 {
                let levels: Vec<u8> = (0..words * 64).map(|_| rng.below(16) as u8).collect();
                let mut want = vec![0; QUERY_BITS * words];
                let mut got = vec![7; QUERY_BITS * words];
                bit_planes_scalar(&levels, words, &mut want);
                bit_planes(&levels, words, &mut got);
                assert_eq!(got, want, "{name}: {words} words");
                // The planes weigh back to the levels.
                for (i, &level) in levels.iter().enumerate() {
                    let back: u8 = (0..QUERY_BITS)
                        .map(|j| ((want[j * words + i / 64] >> (i % 64)) & 1) as u8)
                        .enumerate()
                        .map(|(j, bit)| bit << j)
                        .sum();
                    assert_eq!(back, level, "level {i}");
                }
            }
        });
    }

    #[test]
    fn the_plain_loop_weighs_each_plane_by_its_bit() {
        let mut block = vec![0u64; BLOCK_ROWS];
        block[0] = 0b1011;
        block[31] = u64::MAX;
        // Levels 1, 2, 4, 8 on dimensions 0, 1, 2, 3.
        let planes = [0b0001, 0b0010, 0b0100, 0b1000];
        let mut out = [0; BLOCK_ROWS];
        bit_dots_scalar(&block, &planes, 1, &mut out);
        assert_eq!(out[0], 1 + 2 + 8);
        assert_eq!(out[31], 15);
        assert_eq!(out[1..31], [0; 30]);
    }
}
