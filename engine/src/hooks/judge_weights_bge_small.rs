// Written by `cargo run --release -p amberdb-benches --bin train_judge -- DATA_DIR --embedder bge-small --write`
// (benches/src/bin/train_judge.rs): a logistic regression over the features of
// `judge::FEATURES` with BAAI/bge-small-en-v1.5's cosines, fitted on the tuning splits of MRPC
// (train), SICK (train) and SemEval STS 2014 captions + headlines, pairs within the
// model's dedup distance that the guard's rules leave to the judge. Do not edit by
// hand; retrain.
// | set | split | pairs | same words only (default before) P / R / F1 | rules with paraphrases | judge | judge, wrong ≤ 1 % | bare cosine ≥ 0.759 |
// |---|---|---|---|---|---|---|---|
// | MRPC | train | 3576 | 1.000 / 0.003 / **0.007** (0 wrong) | 0.835 / 0.256 / **0.392** (122 wrong) | 1.000 / 0.012 / **0.025** (0 wrong) | 0.911 / 0.165 / **0.279** (39 wrong) | 0.746 / 0.956 / **0.838** (785 wrong) |
// | MRPC | test | 1725 | 1.000 / 0.003 / **0.005** (0 wrong) | 0.791 / 0.224 / **0.349** (68 wrong) | 1.000 / 0.011 / **0.022** (0 wrong) | 0.918 / 0.147 / **0.254** (15 wrong) | 0.739 / 0.944 / **0.829** (382 wrong) |
// | SICK | train | 4500 | 0.989 / 0.103 / **0.187** (1 wrong) | 0.506 / 0.332 / **0.401** (280 wrong) | 0.989 / 0.103 / **0.187** (1 wrong) | 0.924 / 0.169 / **0.286** (12 wrong) | 0.334 / 0.999 / **0.500** (1722 wrong) |
// | SICK | test | 4927 | 0.988 / 0.090 / **0.164** (1 wrong) | 0.491 / 0.350 / **0.408** (340 wrong) | 0.988 / 0.090 / **0.164** (1 wrong) | 0.874 / 0.163 / **0.275** (22 wrong) | 0.325 / 0.993 / **0.490** (1931 wrong) |
// | STS captions+headlines | 2014 (tuning) | 1500 | 1.000 / 0.021 / **0.041** (0 wrong) | 0.547 / 0.520 / **0.533** (163 wrong) | 1.000 / 0.021 / **0.041** (0 wrong) | 0.780 / 0.084 / **0.152** (9 wrong) | 0.410 / 0.989 / **0.580** (539 wrong) |
// | STS captions+headlines | 2015 (held out) | 1500 | 1.000 / 0.029 / **0.057** (0 wrong) | 0.733 / 0.514 / **0.604** (76 wrong) | 1.000 / 0.029 / **0.057** (0 wrong) | 0.889 / 0.079 / **0.144** (4 wrong) | 0.552 / 0.990 / **0.709** (327 wrong) |
// threshold 0.9323; at most 1 % wrong: 0.7767

/// One weight per feature, in `FEATURES` order.
pub(super) const WEIGHTS: [f32; 12] = [
    -6.711784, // bias
    4.154013, // cosine
    1.12201, // content-word jaccard
    -0.664867, // share of the older's words the newer lacks
    -0.917948, // share of the newer's words the older lacks
    -0.162362, // one side's words are all in the other
    0.705623, // a name only one side has
    0.446866, // the same predicate wording
    0.083618, // the subjects differ
    -1.068142, // length ratio (|log|)
    3.559773, // cosine × jaccard
    2.255094, // words that differ (/10, at most 1)
];

/// The probability at or above which the judge merges.
pub(super) const THRESHOLD: f32 = 0.932252;
