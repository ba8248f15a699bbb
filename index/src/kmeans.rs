//! Spherical k-means: the lists of an IVF segment (`docs/ivf.md`, "Building a segment").
//!
//! Guarantees: deterministic for a seed, whatever the thread count (rows are assigned in
//! parallel, but every sum is taken in row order); `k` unit centroids; with a finite
//! `max_list_ratio`, no list holds more than `ceil(max_list_ratio × n / k)` rows (there is
//! always room elsewhere, since that cap times `k` is at least `n`); invalid input is an error,
//! never a panic.
//!
//! Training runs on a seeded sample of the rows; k-means++ seeding on a sub-sample of it; Lloyd
//! iterations with unit-norm centroids (cosine data); an empty cluster takes over half of the
//! largest (its centroid split in two, as FAISS does). The final assignment covers every row;
//! balancing then moves the rows of an overfull list that are least attached to it (lowest
//! score first) to the best list that still has room.

use crate::error::{IndexError, Result};
use crate::kernels;
use crate::quantize;
use crate::synthetic::{SeededRng, normalize};
use rayon::prelude::*;

/// What to train.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansParams {
    /// Lists, `1..=` the number of rows.
    pub k: usize,
    /// Lloyd iterations on the sample.
    pub iterations: usize,
    /// Rows trained on (a seeded sample when there are more).
    pub sample: usize,
    /// Rows k-means++ seeds from (a prefix of the sample).
    pub seeding_sample: usize,
    /// A list may hold at most this many times the mean list size (>= 1; infinity: no cap).
    pub max_list_ratio: f32,
    /// Seed of every random choice.
    pub seed: u64,
}

impl KMeansParams {
    /// The defaults of `docs/ivf.md`: 10 iterations on up to 64 rows per list, seeding from up
    /// to 4 rows per list, lists at most 4× the mean.
    #[must_use]
    pub fn new(k: usize, seed: u64) -> KMeansParams {
        KMeansParams {
            k,
            iterations: 10,
            sample: 64 * k,
            seeding_sample: 4 * k,
            max_list_ratio: 4.0,
            seed,
        }
    }
}

/// The result: `k` unit centroids (row-major) and each row's list.
#[derive(Debug, Clone, PartialEq)]
pub struct Clustering {
    /// `k × dim` values.
    pub centroids: Vec<f32>,
    /// The list of each input row, in input order.
    pub assignment: Vec<u32>,
}

impl Clustering {
    /// Rows per list.
    #[must_use]
    pub fn list_sizes(&self, k: usize) -> Vec<usize> {
        let mut sizes = vec![0usize; k];
        for &a in &self.assignment {
            if let Some(s) = sizes.get_mut(a as usize) {
                *s += 1;
            }
        }
        sizes
    }
}

/// Rows assigned between two checks of a build's stop flag.
const STOP_CHECK_ROWS: usize = 65_536;

fn invalid(reason: &'static str) -> IndexError {
    IndexError::InvalidParameter(reason)
}

/// Rows assigned together: their centroid scan is blocked so a block of centroids stays in
/// the core's L2 while every row of the group is scored against it.
const ASSIGN_ROWS: usize = 256;
/// Centroids per block (at 384-d, 192 KiB of f32).
const CENTROID_BLOCK: usize = 128;

/// For each row numbered in `ids`, in order, the centroid nearest it (highest dot product)
/// and its score; ties to the lower list. Groups of rows run on the rayon pool; inside one,
/// the multi-query kernel scores four rows at a time against a block of centroids, blocks in
/// order (the centroids are read from memory once per group, not once per row).
fn assign<'a>(
    row: &(impl Fn(usize) -> &'a [f32] + Sync),
    ids: &[usize],
    centroids: &[f32],
) -> Vec<(u32, f32)> {
    ids.par_chunks(ASSIGN_ROWS)
        .flat_map_iter(|group| {
            let rows: Vec<&[f32]> = group.iter().map(|&i| row(i)).collect();
            let dim = rows.first().map_or(0, |r| r.len()).max(1);
            let mut best = vec![(0u32, f32::NEG_INFINITY); rows.len()];
            for (b, block) in centroids.chunks(CENTROID_BLOCK * dim).enumerate() {
                for (g, four) in rows.chunks(4).enumerate() {
                    kernels::each_dot_f32_tile(four, dim, block, |c, j, s| {
                        if let Some(slot) = best.get_mut(g * 4 + j)
                            && s > slot.1
                        {
                            let list = b * CENTROID_BLOCK + c;
                            *slot = (u32::try_from(list).unwrap_or(u32::MAX), s);
                        }
                    });
                }
            }
            best
        })
        .collect()
}

/// The nearest centroid of each row of i8 `codes` (`dim` wide), by the centroids' own i8
/// codes scaled back: `dot_i8 × scale`, ties to the lower list.
fn assign_i8(codes: &[i8], dim: usize, centroids: &[f32]) -> Vec<u32> {
    let mut centroid_codes = vec![0i8; centroids.len()];
    let scales: Vec<f32> = centroids
        .chunks_exact(dim.max(1))
        .zip(centroid_codes.chunks_exact_mut(dim.max(1)))
        .map(|(c, out)| quantize::encode_into(c, out))
        .collect();
    // Four rows per pass over the centroids' codes, in registers (the i8 multi-query kernel,
    // exact, so the same lists as one row at a time).
    let dim = dim.max(1);
    codes
        .par_chunks(ASSIGN_ROWS * dim)
        .flat_map_iter(|group| {
            let rows: Vec<&[i8]> = group.chunks_exact(dim).collect();
            let mut best = vec![(0u32, f32::NEG_INFINITY); rows.len()];
            for (g, four) in rows.chunks(4).enumerate() {
                kernels::each_dot_i8_tile(four, dim, &centroid_codes, |c, j, dot| {
                    #[expect(clippy::cast_precision_loss, reason = "an approximate score")]
                    let score = dot as f32 * scales.get(c).copied().unwrap_or(0.0);
                    if let Some(slot) = best.get_mut(g * 4 + j)
                        && score > slot.1
                    {
                        *slot = (u32::try_from(c).unwrap_or(u32::MAX), score);
                    }
                });
            }
            best.into_iter().map(|b| b.0)
        })
        .collect()
}

/// Trains `params.k` lists over `rows` (`n × dim`, unit vectors expected).
///
/// # Errors
/// `InvalidParameter` for `dim == 0`, rows not a multiple of `dim`, `k` outside `1..=n`, no
/// iterations, a ratio below 1, or a non-finite value.
pub fn train(rows: &[f32], dim: usize, params: &KMeansParams) -> Result<Clustering> {
    train_until(rows, dim, params, &|| false)
}

/// As [`train`], giving up with `Cancelled` once `stop` returns true (asked between
/// iterations and between blocks of the final assignment).
///
/// # Errors
/// As `train`, or `Cancelled`.
pub fn train_until(
    rows: &[f32],
    dim: usize,
    params: &KMeansParams,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Clustering> {
    if dim == 0 || !rows.len().is_multiple_of(dim) {
        return Err(invalid("rows must be a whole number of vectors of dim > 0"));
    }
    let n = rows.len() / dim;
    let k = params.k;
    if k == 0 || k > n {
        return Err(invalid("k must be in 1..=rows"));
    }
    if params.iterations == 0 || params.max_list_ratio.is_nan() || params.max_list_ratio < 1.0 {
        return Err(invalid("iterations >= 1 and max_list_ratio >= 1"));
    }
    if rows.iter().any(|x| !x.is_finite()) {
        return Err(invalid("every value must be finite"));
    }
    let row = |i: usize| rows.get(i * dim..(i + 1) * dim).unwrap_or(&[]);
    let mut rng = SeededRng::new(params.seed);

    // The sample: a seeded partial shuffle of the row numbers.
    let mut order: Vec<usize> = (0..n).collect();
    let sample_len = params.sample.clamp(k, n);
    for i in 0..sample_len {
        #[expect(clippy::cast_possible_truncation, reason = "below n, a usize")]
        let j = i + rng.below((n - i) as u64) as usize;
        order.swap(i, j);
    }
    let sample = order.get(..sample_len).unwrap_or(&[]);

    let mut centroids = seed_plus_plus(&row, sample, dim, k, params.seeding_sample, &mut rng);
    // The iterations assign the sample by i8 codes (VNNI: four times the products per
    // instruction of f32); a row's own scale does not change which centroid is nearest, so
    // only the centroids' scales enter. The final assignment below is exact f32.
    let mut sample_codes = vec![0i8; sample.len() * dim];
    for (codes, &i) in sample_codes.chunks_exact_mut(dim.max(1)).zip(sample) {
        // The row's scale is not needed: it does not change the argmax.
        let _ = quantize::encode_into(row(i), codes);
    }
    for _ in 0..params.iterations {
        if stop() {
            return Err(IndexError::Cancelled);
        }
        let assigned = assign_i8(&sample_codes, dim, &centroids);
        centroids = recompute(&row, sample, &assigned, dim, k, &centroids, &mut rng);
    }

    // Every row, with how close it is to its list (balancing moves the loosest first).
    let mut choices: Vec<(u32, f32)> = Vec::with_capacity(n);
    for block in (0..n).step_by(STOP_CHECK_ROWS) {
        if stop() {
            return Err(IndexError::Cancelled);
        }
        let ids: Vec<usize> = (block..(block + STOP_CHECK_ROWS).min(n)).collect();
        choices.extend(assign(&row, &ids, &centroids));
    }
    let mut assignment: Vec<u32> = choices.iter().map(|c| c.0).collect();
    if params.max_list_ratio.is_finite() {
        let scores: Vec<f32> = choices.iter().map(|c| c.1).collect();
        balance(
            &row,
            &centroids,
            &mut assignment,
            &scores,
            params.max_list_ratio,
        );
    }
    Ok(Clustering {
        centroids,
        assignment,
    })
}

/// k-means++ over the first `limit` rows of `sample`: each next centre drawn with probability
/// proportional to its distance (`1 - dot`) from the nearest centre so far.
fn seed_plus_plus<'a>(
    row: &(impl Fn(usize) -> &'a [f32] + Sync),
    sample: &[usize],
    dim: usize,
    k: usize,
    limit: usize,
    rng: &mut SeededRng,
) -> Vec<f32> {
    let pool = sample.get(..limit.clamp(k, sample.len())).unwrap_or(sample);
    let mut centroids = Vec::with_capacity(k * dim);
    #[expect(clippy::cast_possible_truncation, reason = "below the pool's length")]
    let first = pool
        .get(rng.below(pool.len() as u64) as usize)
        .copied()
        .unwrap_or(0);
    centroids.extend_from_slice(row(first));
    let mut nearest: Vec<f32> = pool
        .iter()
        .map(|&i| (1.0 - kernels::dot(row(i), row(first)).unwrap_or(0.0)).max(0.0))
        .collect();
    while centroids.len() < k * dim {
        let total: f64 = nearest.iter().map(|&d| f64::from(d)).sum();
        #[expect(clippy::cast_precision_loss, reason = "a probability")]
        let pick = if total > 0.0 {
            let mut target = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
            let mut chosen = pool.len() - 1;
            for (j, &d) in nearest.iter().enumerate() {
                target -= f64::from(d);
                if target < 0.0 {
                    chosen = j;
                    break;
                }
            }
            chosen
        } else {
            // Every pooled row sits on a centre already: any row (duplicates stay duplicates).
            #[expect(clippy::cast_possible_truncation, reason = "below the pool's length")]
            let j = rng.below(pool.len() as u64) as usize;
            j
        };
        let c = row(pool.get(pick).copied().unwrap_or(0)).to_vec();
        nearest.par_iter_mut().zip(pool).for_each(|(d, &i)| {
            let dist = (1.0 - kernels::dot(row(i), &c).unwrap_or(0.0)).max(0.0);
            *d = d.min(dist);
        });
        centroids.extend_from_slice(&c);
    }
    centroids
}

/// The unit mean of each list's rows, summed in row order (deterministic). An empty list takes
/// the largest list's centroid, nudged apart, and the largest keeps the mirror nudge: the next
/// assignment splits its rows between the two.
fn recompute<'a>(
    row: &impl Fn(usize) -> &'a [f32],
    sample: &[usize],
    assigned: &[u32],
    dim: usize,
    k: usize,
    old: &[f32],
    rng: &mut SeededRng,
) -> Vec<f32> {
    let mut sums = vec![0.0f32; k * dim];
    let mut counts = vec![0usize; k];
    for (&i, &a) in sample.iter().zip(assigned) {
        let a = a as usize;
        if let (Some(s), Some(c)) = (sums.get_mut(a * dim..(a + 1) * dim), counts.get_mut(a)) {
            s.iter_mut().zip(row(i)).for_each(|(s, x)| *s += x);
            *c += 1;
        }
    }
    for l in 0..k {
        if counts.get(l) == Some(&0) {
            let largest = (0..k)
                .max_by_key(|&j| counts.get(j).copied().unwrap_or(0))
                .unwrap_or(0);
            let base: Vec<f32> = old
                .get(largest * dim..(largest + 1) * dim)
                .unwrap_or(&[])
                .to_vec();
            #[expect(clippy::cast_possible_truncation, reason = "below dim")]
            let axis = rng.below(dim as u64) as usize;
            let nudge = 1e-3;
            for (target, sign) in [(l, 1.0f32), (largest, -1.0)] {
                if let Some(s) = sums.get_mut(target * dim..(target + 1) * dim) {
                    s.copy_from_slice(&base);
                    if let Some(x) = s.get_mut(axis) {
                        *x += sign * nudge;
                    }
                }
            }
            // The split takes half of the largest, so a second empty list splits another.
            let half = counts.get(largest).copied().unwrap_or(0) / 2;
            if let Some(c) = counts.get_mut(largest) {
                *c -= half;
            }
            if let Some(c) = counts.get_mut(l) {
                *c = half.max(1);
            }
        }
    }
    for c in sums.chunks_exact_mut(dim) {
        normalize(c);
    }
    sums
}

/// Brings every list down to the cap: the rows of overfull lists, least attached first
/// (lowest score to their own centroid; ties by row), each go to the highest-scoring list that
/// still has room, while their own list is over the cap. `cap × k >= n`, so room exists while
/// any list is over.
fn balance<'a>(
    row: &impl Fn(usize) -> &'a [f32],
    centroids: &[f32],
    assignment: &mut [u32],
    scores: &[f32],
    ratio: f32,
) {
    let n = assignment.len();
    let dim = row(0).len().max(1);
    let k = centroids.len() / dim;
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a list size"
    )]
    let cap = ((ratio * n as f32 / k as f32).ceil() as usize).max(n.div_ceil(k.max(1)));
    let mut sizes = vec![0usize; k];
    for &a in assignment.iter() {
        if let Some(s) = sizes.get_mut(a as usize) {
            *s += 1;
        }
    }
    let over = |sizes: &[usize], a: u32| sizes.get(a as usize).is_some_and(|&s| s > cap);
    let mut movable: Vec<usize> = (0..n)
        .filter(|&i| assignment.get(i).is_some_and(|&a| over(&sizes, a)))
        .collect();
    let score = |i: usize| scores.get(i).copied().unwrap_or(f32::INFINITY);
    movable.sort_by(|&a, &b| score(a).total_cmp(&score(b)).then(a.cmp(&b)));
    for i in movable {
        let Some(&from) = assignment.get(i) else {
            continue;
        };
        if !over(&sizes, from) {
            continue;
        }
        let to = kernels::dot_rows(row(i), centroids)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .filter(|(l, _)| sizes.get(*l).is_some_and(|&s| s < cap))
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .map(|(l, _)| l);
        let Some(to) = to else { continue };
        if let Some(a) = assignment.get_mut(i) {
            *a = u32::try_from(to).unwrap_or(u32::MAX);
        }
        if let Some(s) = sizes.get_mut(from as usize) {
            *s -= 1;
        }
        if let Some(s) = sizes.get_mut(to) {
            *s += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `per` rows around each of `centres` random unit centres, with their true labels.
    fn labelled(
        centres: usize,
        per: usize,
        dim: usize,
        spread: f32,
        seed: u64,
    ) -> (Vec<f32>, Vec<usize>) {
        let mut rng = SeededRng::new(seed);
        let centre: Vec<Vec<f32>> = (0..centres).map(|_| rng.unit_vector(dim)).collect();
        let mut rows = Vec::new();
        let mut labels = Vec::new();
        for _ in 0..per {
            for (c, m) in centre.iter().enumerate() {
                let mut v: Vec<f32> = m
                    .iter()
                    .map(|x| x + spread * rng.gaussian() / (dim as f32).sqrt())
                    .collect();
                normalize(&mut v);
                rows.extend_from_slice(&v);
                labels.push(c);
            }
        }
        (rows, labels)
    }

    #[test]
    fn the_tiled_i8_assignment_picks_each_rows_first_best_list() {
        // Every row count around the tile's four and a chunk's 256, against the plain
        // argmax of `dot_i8 × scale` (ties to the lower list, so two equal centroids too).
        let dim = 24;
        let mut rng = SeededRng::new(11);
        let mut centroids: Vec<f32> = (0..9).flat_map(|_| rng.unit_vector(dim)).collect();
        let copy = centroids[..dim].to_vec();
        centroids.extend_from_slice(&copy);
        let mut centroid_codes = vec![0i8; centroids.len()];
        let scales: Vec<f32> = centroids
            .chunks_exact(dim)
            .zip(centroid_codes.chunks_exact_mut(dim))
            .map(|(c, out)| quantize::encode_into(c, out))
            .collect();
        for n in [0, 1, 3, 4, 5, 255, 256, 257, 515] {
            let mut codes = vec![0i8; n * dim];
            for row in codes.chunks_exact_mut(dim) {
                let _ = quantize::encode_into(&rng.unit_vector(dim), row);
            }
            let want: Vec<u32> = codes
                .chunks_exact(dim)
                .map(|q| {
                    let mut best = (0u32, f32::NEG_INFINITY);
                    for (c, code) in centroid_codes.chunks_exact(dim).enumerate() {
                        let dot = crate::kernels::dot_i8(q, code).unwrap() as f32;
                        let score = dot * scales[c];
                        if score > best.1 {
                            best = (c as u32, score);
                        }
                    }
                    best.0
                })
                .collect();
            assert_eq!(assign_i8(&codes, dim, &centroids), want, "{n} rows");
        }
    }

    #[test]
    fn separated_clusters_are_found_whole() {
        let seed = crate::synthetic::seed_from_env("kmeans_clusters", 7);
        let (rows, labels) = labelled(8, 200, 32, 0.3, seed);
        let c = train(&rows, 32, &KMeansParams::new(8, seed)).unwrap();
        // Purity: each found list is (almost) one true cluster.
        let mut agree = 0;
        for l in 0..8u32 {
            let mut votes = [0usize; 8];
            for (a, t) in c.assignment.iter().zip(&labels) {
                if *a == l {
                    votes[*t] += 1;
                }
            }
            agree += votes.iter().max().copied().unwrap_or(0);
        }
        assert!(
            agree as f32 >= 0.98 * labels.len() as f32,
            "purity {agree}/{}",
            labels.len()
        );
        assert!(c.list_sizes(8).iter().all(|&s| s > 0));
        for centroid in c.centroids.chunks_exact(32) {
            let norm: f32 = centroid.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_lists_whatever_the_threads() {
        let rows = crate::synthetic::clustered(3000, 24, 20, 0.5, 3);
        let params = KMeansParams::new(16, 11);
        let pool = |t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap()
        };
        let one = pool(1).install(|| train(&rows, 24, &params).unwrap());
        let two = pool(2).install(|| train(&rows, 24, &params).unwrap());
        assert_eq!(one, two);
        let other = train(&rows, 24, &KMeansParams::new(16, 12)).unwrap();
        assert_ne!(one.assignment, other.assignment, "the seed matters");
    }

    #[test]
    fn no_list_is_empty_and_none_passes_the_cap() {
        // One dense cluster of most rows and a few sparse ones: unbalanced on its own.
        let (mut rows, _) = labelled(1, 3000, 16, 0.05, 5);
        let (sparse, _) = labelled(12, 20, 16, 0.2, 6);
        rows.extend_from_slice(&sparse);
        let n = rows.len() / 16;
        let k = 16;
        let mut params = KMeansParams::new(k, 9);
        params.max_list_ratio = 2.0;
        let c = train(&rows, 16, &params).unwrap();
        let sizes = c.list_sizes(k);
        let cap = (2.0 * n as f32 / k as f32).ceil() as usize;
        assert!(sizes.iter().all(|&s| s > 0), "{sizes:?}");
        assert!(sizes.iter().all(|&s| s <= cap), "cap {cap}: {sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), n);
    }

    #[test]
    fn bad_input_is_an_error() {
        let rows = vec![0.6f32, 0.8, 1.0, 0.0];
        let p = |k| KMeansParams::new(k, 1);
        assert!(train(&rows, 0, &p(1)).is_err());
        assert!(train(&rows, 3, &p(1)).is_err());
        assert!(train(&rows, 2, &p(0)).is_err());
        assert!(train(&rows, 2, &p(3)).is_err());
        assert!(train(&[f32::NAN, 0.0], 2, &p(1)).is_err());
        let mut zero_iterations = p(1);
        zero_iterations.iterations = 0;
        assert!(train(&rows, 2, &zero_iterations).is_err());
        let mut ratio = p(1);
        ratio.max_list_ratio = 0.5;
        assert!(train(&rows, 2, &ratio).is_err());
        let both = train(&rows, 2, &p(2)).unwrap();
        assert_eq!(both.list_sizes(2), vec![1, 1]);
    }
}
