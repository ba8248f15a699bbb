//! The bit codes' kernel: for a block of 32 rows' 1-bit codes and a query's nibble tables
//! (both made by `crate::bitcodes`), each row's `Σ_i b_i · level_i`, exact.
//!
//! A block is byte-major (`code_bytes × 32` bytes; row `r`'s byte `k` at `k · 32 + r`), so
//! one 32-byte load holds the same byte of all 32 rows; its low and high nibbles index the
//! query's tables of that nibble position (16 entries each: the sum of the levels of the
//! dimensions a nibble's bits name, at most 60) with `vpshufb`, 32 rows a lookup, as FAISS's
//! fast-scan indexes do (our own code). Two byte positions add up in bytes (at most 240),
//! then widen to 16-bit sums (at most 60 · 2 · 512 = 61,440 for 4,096 dimensions).
//!
//! Picked once per process with the scan kernels (`x86.rs`): AVX-512 VBMI (`vpermb`: one
//! 64-entry table holds the four 16-entry tables of two byte positions, laid out once a query
//! in [`BitTables`]), AVX-512 BW (`vpshufb` over tables assembled from 16-byte pieces), both 64
//! bytes a lookup (two byte positions of the 32 rows), AVX2 (32 bytes), elsewhere the plain
//! loop. Measured on 2,048 rows in L2 (`benches/benches/kernels.rs`, `bit_dots_2048_rows_384`,
//! docs/benchmarks.md): VBMI 3.52 µs, BW 3.78 µs. A popcount kernel (AVX-512 BITALG
//! `vpopcntb` of the rows' bytes against the query's four bit planes, as RaBitQ's own code
//! counts) took 6.5 µs on the same layout: four AND-popcount pairs and three doublings where
//! the lookups need two shuffles, so it is not a path. Every path the test host can run is
//! tested against [`bit_dots_scalar`] for every code length 8..=512 bytes (`tests` below).

/// Rows of one block of codes: the bits of 32 rows, byte by byte (`code_bytes(dim) × 32`
/// bytes; row `r`'s byte `k` at `k · 32 + r`), so one 32-byte load holds the same byte of
/// every row of the block, as the table lookups need.
pub const BLOCK_ROWS: usize = 32;
/// Entries of one nibble table (`BitTables`): one per value of 4 bits.
pub const TABLE_LEN: usize = 16;

/// Bytes of a row's code that `tables` covers: two tables a byte.
fn code_bytes_of(tables: &[u8]) -> usize {
    tables.len() / (2 * TABLE_LEN)
}

/// A query's nibble tables (`crate::bitcodes::SegmentQuery`), and the same laid out once a
/// query for the VBMI kernel: for each pair of code bytes `k`, `k + 1`, one 64-byte register
/// of their four tables (`k`'s low nibble, `k + 1`'s low, `k`'s high, `k + 1`'s high), which
/// one `vpermb` reads as a 64-entry table.
#[derive(Debug, Clone)]
pub struct BitTables {
    plain: Vec<u8>,
    /// Empty unless this CPU runs the VBMI kernel and the code has an even number of bytes
    /// (what the AVX-512 kernels take): `bit_dots` takes that path only when it is laid out.
    vbmi: Vec<u8>,
}

impl BitTables {
    /// `plain`: `code_bytes × 2` tables of `TABLE_LEN` entries, the low nibble's table of
    /// each byte first.
    #[must_use]
    pub fn new(plain: Vec<u8>) -> BitTables {
        let bytes = code_bytes_of(&plain);
        let mut vbmi = Vec::new();
        if vbmi_kernel() && bytes.is_multiple_of(2) {
            vbmi.reserve(bytes * 2 * TABLE_LEN);
            for k in (0..bytes).step_by(2) {
                for t in [2 * k, 2 * k + 2, 2 * k + 1, 2 * k + 3] {
                    vbmi.extend_from_slice(
                        plain.get(t * TABLE_LEN..(t + 1) * TABLE_LEN).unwrap_or(&[]),
                    );
                }
            }
        }
        BitTables { plain, vbmi }
    }

    /// The tables as `new` took them.
    #[must_use]
    pub fn plain(&self) -> &[u8] {
        &self.plain
    }
}

/// Whether this process runs the VBMI kernel (what `BitTables::new` lays the tables out for).
fn vbmi_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::cpu().avx512vbmi
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The plain loop every path is checked against. `block` holds `code_bytes × 32` bytes and
/// `tables` `code_bytes × 2 × 16`; a shorter block counts as zero bytes.
pub fn bit_dots_scalar(block: &[u8], tables: &[u8], out: &mut [u32; BLOCK_ROWS]) {
    *out = [0; BLOCK_ROWS];
    for k in 0..code_bytes_of(tables) {
        let low = tables.get(2 * k * TABLE_LEN..(2 * k + 1) * TABLE_LEN);
        let high = tables.get((2 * k + 1) * TABLE_LEN..(2 * k + 2) * TABLE_LEN);
        let (Some(low), Some(high)) = (low, high) else {
            continue;
        };
        let rows = block
            .get(k * BLOCK_ROWS..(k + 1) * BLOCK_ROWS)
            .unwrap_or_default();
        for (o, &byte) in out.iter_mut().zip(rows) {
            let at = |t: &[u8], i: u8| u32::from(t.get(usize::from(i)).copied().unwrap_or(0));
            *o += at(low, byte & 0x0f) + at(high, byte >> 4);
        }
    }
}

/// `bit_dots_scalar` with the best kernel this CPU has. A block shorter than the tables ask
/// for gives zeros.
pub fn bit_dots(block: &[u8], tables: &BitTables, out: &mut [u32; BLOCK_ROWS]) {
    let bytes = code_bytes_of(&tables.plain);
    let (Some(block), Some(plain)) = (
        block.get(..bytes * BLOCK_ROWS),
        tables.plain.get(..bytes * 2 * TABLE_LEN),
    ) else {
        *out = [0; BLOCK_ROWS];
        return;
    };
    #[cfg(target_arch = "x86_64")]
    {
        let cpu = super::x86::cpu();
        if cpu.avx512vbmi && !tables.vbmi.is_empty() {
            #[expect(unsafe_code, reason = "calling a target_feature function")]
            // SAFETY: `cpu()` confirmed AVX-512 F, BW and VBMI (`x86::detected`).
            unsafe {
                avx512::bit_dots_vbmi(block, &tables.vbmi, bytes, out);
            }
            return;
        }
        if cpu.avx512bw && bytes.is_multiple_of(2) {
            #[expect(unsafe_code, reason = "calling a target_feature function")]
            // SAFETY: `cpu()` confirmed AVX-512 F and BW (`x86::detected`).
            unsafe {
                avx512::bit_dots_bw(block, plain, bytes, out);
            }
            return;
        }
        if cpu.avx2 {
            #[expect(unsafe_code, reason = "calling a target_feature function")]
            // SAFETY: `cpu()` confirmed AVX2.
            unsafe {
                avx2::bit_dots(block, plain, out);
            }
            return;
        }
    }
    bit_dots_scalar(block, plain, out);
}

/// Which path `bit_dots` takes here, for benchmark reports.
#[must_use]
pub fn bit_backend() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let cpu = super::x86::cpu();
        if cpu.avx512vbmi {
            return "avx512vbmi vpermb";
        }
        if cpu.avx512bw {
            return "avx512bw vpshufb";
        }
        if cpu.avx2 {
            return "avx2 vpshufb";
        }
    }
    "scalar"
}

/// The sums a kernel kept in 16-bit lanes after `vpunpcklbw` / `vpunpckhbw` against zero of
/// 32 rows' bytes: `low` holds rows 0..8 and 16..24, `high` rows 8..16 and 24..32.
fn unshuffle(low: [u16; 16], high: [u16; 16], out: &mut [u32; BLOCK_ROWS]) {
    for i in 0..8 {
        let get = |v: &[u16; 16], j: usize| u32::from(v.get(j).copied().unwrap_or(0));
        let put = |out: &mut [u32; BLOCK_ROWS], r: usize, x: u32| {
            if let Some(o) = out.get_mut(r) {
                *o = x;
            }
        };
        put(out, i, get(&low, i));
        put(out, 16 + i, get(&low, 8 + i));
        put(out, 8 + i, get(&high, i));
        put(out, 24 + i, get(&high, 8 + i));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BLOCK_ROWS, TABLE_LEN, unshuffle};
    use std::arch::x86_64::{
        __m256i, _mm_loadu_si128, _mm256_add_epi8, _mm256_add_epi16, _mm256_and_si256,
        _mm256_broadcastsi128_si256, _mm256_loadu_si256, _mm256_set1_epi8, _mm256_setzero_si256,
        _mm256_shuffle_epi8, _mm256_srli_epi16, _mm256_storeu_si256, _mm256_unpackhi_epi8,
        _mm256_unpacklo_epi8,
    };

    #[inline]
    #[target_feature(enable = "avx2")]
    fn load(bytes: &[u8; 32]) -> __m256i {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `bytes` is 32 readable bytes; loadu has no alignment requirement.
        unsafe {
            _mm256_loadu_si256(bytes.as_ptr().cast())
        }
    }

    /// A 16-entry table in both 128-bit lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn table(t: &[u8; 16]) -> __m256i {
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `t` is 16 readable bytes; loadu has no alignment requirement.
        let t = unsafe { _mm_loadu_si128(t.as_ptr().cast()) };
        _mm256_broadcastsi128_si256(t)
    }

    /// Byte position `k` of the block looked up in its two tables: 32 rows' sums (≤ 120).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn lookup(block: &[u8], tables: &[u8], k: usize) -> __m256i {
        let rows = block
            .get(k * BLOCK_ROWS..(k + 1) * BLOCK_ROWS)
            .and_then(|r| <&[u8; 32]>::try_from(r).ok());
        let t = |i: usize| {
            tables
                .get(i * TABLE_LEN..(i + 1) * TABLE_LEN)
                .and_then(|t| <&[u8; 16]>::try_from(t).ok())
        };
        let (Some(rows), Some(low_t), Some(high_t)) = (rows, t(2 * k), t(2 * k + 1)) else {
            return _mm256_setzero_si256();
        };
        let x = load(rows);
        let nibble = _mm256_set1_epi8(0x0f);
        let low = _mm256_and_si256(x, nibble);
        let high = _mm256_and_si256(_mm256_srli_epi16::<4>(x), nibble);
        _mm256_add_epi8(
            _mm256_shuffle_epi8(table(low_t), low),
            _mm256_shuffle_epi8(table(high_t), high),
        )
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn bit_dots(block: &[u8], tables: &[u8], out: &mut [u32; BLOCK_ROWS]) {
        let bytes = super::code_bytes_of(tables);
        let zero = _mm256_setzero_si256();
        let (mut low, mut high) = (zero, zero);
        let mut k = 0;
        while k < bytes {
            // Two byte positions add up in bytes (≤ 240), then widen.
            let mut sum = lookup(block, tables, k);
            if k + 1 < bytes {
                sum = _mm256_add_epi8(sum, lookup(block, tables, k + 1));
            }
            low = _mm256_add_epi16(low, _mm256_unpacklo_epi8(sum, zero));
            high = _mm256_add_epi16(high, _mm256_unpackhi_epi8(sum, zero));
            k += 2;
        }
        finish(low, high, out);
    }

    /// The 16-bit sums of `vpunpcklbw` (`low`) and `vpunpckhbw` (`high`) against zero, as
    /// each row's sum (`unshuffle`); the AVX-512 kernels end here too.
    #[target_feature(enable = "avx2")]
    pub(super) fn finish(low: __m256i, high: __m256i, out: &mut [u32; BLOCK_ROWS]) {
        let (mut l, mut h) = ([0u16; 16], [0u16; 16]);
        #[expect(unsafe_code, reason = "unaligned vector stores")]
        // SAFETY: `l` and `h` are 32 writable bytes each; storeu has no alignment requirement.
        unsafe {
            _mm256_storeu_si256(l.as_mut_ptr().cast(), low);
            _mm256_storeu_si256(h.as_mut_ptr().cast(), high);
        }
        unshuffle(l, h, out);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{BLOCK_ROWS, TABLE_LEN};
    use std::arch::x86_64::{
        __m512i, _mm_loadu_si128, _mm256_add_epi16, _mm512_add_epi8, _mm512_add_epi16,
        _mm512_and_si512, _mm512_broadcast_i32x4, _mm512_castsi512_si256,
        _mm512_extracti64x4_epi64, _mm512_inserti64x4, _mm512_loadu_si512, _mm512_mask_blend_epi64,
        _mm512_permutexvar_epi8, _mm512_set1_epi8, _mm512_setzero_si512, _mm512_shuffle_epi8,
        _mm512_srli_epi16, _mm512_ternarylogic_epi32, _mm512_unpackhi_epi8, _mm512_unpacklo_epi8,
    };

    /// 64 bytes from `bytes`, if it holds exactly 64.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(bytes: Option<&[u8]>) -> Option<__m512i> {
        let bytes = bytes.and_then(|b| <&[u8; 64]>::try_from(b).ok())?;
        #[expect(unsafe_code, reason = "unaligned vector load")]
        // SAFETY: `bytes` is 64 readable bytes; loadu has no alignment requirement.
        Some(unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) })
    }

    /// Two 16-entry tables: `a` in the low two 128-bit lanes, `b` in the high two.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn tables(a: &[u8; 16], b: &[u8; 16]) -> __m512i {
        #[expect(unsafe_code, reason = "unaligned vector loads")]
        // SAFETY: `a` and `b` are 16 readable bytes each; loadu has no alignment requirement.
        let (a, b) = unsafe {
            (
                _mm_loadu_si128(a.as_ptr().cast()),
                _mm_loadu_si128(b.as_ptr().cast()),
            )
        };
        let high = _mm512_castsi512_si256(_mm512_broadcast_i32x4(b));
        _mm512_inserti64x4::<1>(_mm512_broadcast_i32x4(a), high)
    }

    /// Byte positions `k` and `k + 1` of the block (one 64-byte load) looked up in their
    /// tables (`plain`: `BitTables::plain`) with `vpshufb`: the low half holds position `k`'s
    /// 32 rows, the high half `k + 1`'s (≤ 120).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn lookup_bw(block: &[u8], plain: &[u8], k: usize) -> __m512i {
        let t = |i: usize| {
            plain
                .get(i * TABLE_LEN..(i + 1) * TABLE_LEN)
                .and_then(|t| <&[u8; 16]>::try_from(t).ok())
        };
        let (Some(x), Some(l0), Some(h0), Some(l1), Some(h1)) = (
            load(block.get(k * BLOCK_ROWS..(k + 2) * BLOCK_ROWS)),
            t(2 * k),
            t(2 * k + 1),
            t(2 * k + 2),
            t(2 * k + 3),
        ) else {
            return _mm512_setzero_si512();
        };
        let nibble = _mm512_set1_epi8(0x0f);
        let low = _mm512_and_si512(x, nibble);
        let high = _mm512_and_si512(_mm512_srli_epi16::<4>(x), nibble);
        _mm512_add_epi8(
            _mm512_shuffle_epi8(tables(l0, l1), low),
            _mm512_shuffle_epi8(tables(h0, h1), high),
        )
    }

    /// `lookup_bw` with `vpermb` (VBMI), whose one 64-byte table (`BitTables::vbmi`: the four
    /// tables of positions `k` and `k + 1`) serves both nibbles of both positions: each index
    /// is the nibble with the table's number in bits 4 and 5 (one `vpternlogd`: `nibble & 0x0f
    /// | table`), so no table is assembled from 16-byte pieces.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    fn lookup_vbmi(block: &[u8], vbmi: &[u8], k: usize) -> __m512i {
        let (Some(x), Some(t)) = (
            load(block.get(k * BLOCK_ROWS..(k + 2) * BLOCK_ROWS)),
            load(vbmi.get(k * 2 * TABLE_LEN..(k + 2) * 2 * TABLE_LEN)),
        ) else {
            return _mm512_setzero_si512();
        };
        let nibble = _mm512_set1_epi8(0x0f);
        // Table numbers: position k's rows (the low 32 bytes) read tables 0 and 2, k + 1's
        // tables 1 and 3.
        let number = |k0: i8, k1: i8| {
            _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi8(k0), _mm512_set1_epi8(k1))
        };
        // (a & b) | c
        const A_AND_B_OR_C: i32 = 0xea;
        let low = _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(x, nibble, number(0x00, 0x10));
        let high = _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(
            _mm512_srli_epi16::<4>(x),
            nibble,
            number(0x20, 0x30),
        );
        _mm512_add_epi8(
            _mm512_permutexvar_epi8(low, t),
            _mm512_permutexvar_epi8(high, t),
        )
    }

    /// A kernel from a lookup of two byte positions: four positions a step (two lookups, ≤
    /// 240 a byte), widened into 16-bit sums whose halves (positions `k` and `k + 1`) are
    /// added at the end, as the AVX2 kernel's (`avx2::finish`). `code_bytes` must be even.
    macro_rules! kernel {
        ($(#[$doc:meta])* $name:ident, $lookup:ident, $features:literal) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(super) fn $name(
                block: &[u8],
                tables: &[u8],
                code_bytes: usize,
                out: &mut [u32; BLOCK_ROWS],
            ) {
                let zero = _mm512_setzero_si512();
                let (mut low, mut high) = (zero, zero);
                let mut k = 0;
                while k < code_bytes {
                    let mut sum = $lookup(block, tables, k);
                    if k + 2 < code_bytes {
                        sum = _mm512_add_epi8(sum, $lookup(block, tables, k + 2));
                    }
                    low = _mm512_add_epi16(low, _mm512_unpacklo_epi8(sum, zero));
                    high = _mm512_add_epi16(high, _mm512_unpackhi_epi8(sum, zero));
                    k += 4;
                }
                let half = |v| {
                    _mm256_add_epi16(
                        _mm512_castsi512_si256(v),
                        _mm512_extracti64x4_epi64::<1>(v),
                    )
                };
                super::avx2::finish(half(low), half(high), out);
            }
        };
    }
    kernel!(
        /// `tables`: `BitTables::plain`.
        bit_dots_bw,
        lookup_bw,
        "avx512f,avx512bw"
    );
    kernel!(
        /// `tables`: `BitTables::vbmi`.
        bit_dots_vbmi,
        lookup_vbmi,
        "avx512f,avx512bw,avx512vbmi"
    );
}

#[cfg(test)]
mod tests {
    use super::{BLOCK_ROWS, TABLE_LEN};
    use super::{bit_backend, bit_dots, bit_dots_scalar};
    use crate::synthetic::{SeededRng, seed_from_env};

    /// Every path this host runs equals the plain loop, for every code length a segment can
    /// have (8..=512 bytes: 64..=4,096 dimensions) and a few odd ones, with bits dense,
    /// sparse, all ones and all zeros and tables at their largest.
    #[test]
    fn every_bit_kernel_equals_the_plain_loop() {
        let seed = seed_from_env("every_bit_kernel_equals_the_plain_loop", 9);
        eprintln!("seed {seed}");
        let mut rng = SeededRng::new(seed);
        let lengths: Vec<usize> = (1..=16).chain((24..=512).step_by(8)).collect();
        super::super::x86::for_each_backend(|name| {
            for &bytes in &lengths {
                for density in 0..4 {
                    let mut byte = || -> u8 {
                        let x = rng.next_u64();
                        match density {
                            0 => x as u8,
                            1 => (x & (x >> 8) & (x >> 16)) as u8,
                            2 => u8::MAX,
                            _ => 0,
                        }
                    };
                    let block: Vec<u8> = (0..bytes * BLOCK_ROWS).map(|_| byte()).collect();
                    let mut tables = vec![0u8; bytes * 2 * TABLE_LEN];
                    for t in tables.chunks_exact_mut(TABLE_LEN) {
                        let levels: [u8; 4] = if density == 2 {
                            [15; 4]
                        } else {
                            std::array::from_fn(|_| rng.below(16) as u8)
                        };
                        for (n, e) in t.iter_mut().enumerate() {
                            *e = (0..4).filter(|b| n >> b & 1 == 1).map(|b| levels[b]).sum();
                        }
                    }
                    let (mut want, mut got) = ([0; BLOCK_ROWS], [7; BLOCK_ROWS]);
                    bit_dots_scalar(&block, &tables, &mut want);
                    let laid = super::BitTables::new(tables.clone());
                    bit_dots(&block, &laid, &mut got);
                    assert_eq!(got, want, "{name} / {}: {bytes} bytes", bit_backend());
                }
            }
            // Too short a block: zeros, never a read past it.
            let mut got = [7; BLOCK_ROWS];
            bit_dots(
                &[u8::MAX; 40],
                &super::BitTables::new(vec![15; 4 * TABLE_LEN]),
                &mut got,
            );
            assert_eq!(got, [0; BLOCK_ROWS], "{name}");
        });
    }

    #[test]
    fn the_plain_loop_sums_each_nibbles_table_entry() {
        let mut block = vec![0u8; 2 * BLOCK_ROWS];
        // Row 0: byte 0 = 0x21 (low nibble 1, high nibble 2), byte 1 = 0xf0.
        block[0] = 0x21;
        block[BLOCK_ROWS] = 0xf0;
        let mut tables = vec![0u8; 4 * TABLE_LEN];
        tables[1] = 3; // byte 0, low nibble 1
        tables[TABLE_LEN + 2] = 5; // byte 0, high nibble 2
        tables[3 * TABLE_LEN + 15] = 60; // byte 1, high nibble 15
        tables[2 * TABLE_LEN] = 9; // byte 1, low nibble 0: every row with a zero there
        let mut out = [0; BLOCK_ROWS];
        bit_dots_scalar(&block, &tables, &mut out);
        assert_eq!(out[0], 3 + 5 + 9 + 60);
        assert_eq!(out[1..], [9; 31]);
    }
}
