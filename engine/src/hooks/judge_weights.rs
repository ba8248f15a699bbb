// Written by `cargo run --release -p amberdb-benches --bin train_judge -- DATA_DIR --write`
// (benches/src/bin/train_judge.rs): a logistic regression over the features of
// `judge::FEATURES`, fitted on the tuning splits of MRPC (train), SICK (train) and
// SemEval STS 2014 captions + headlines, pairs within the dedup distance that the
// guard's rules leave to the judge. Do not edit by hand; retrain.
// | set | split | pairs | same words only (default before) P / R / F1 | rules with paraphrases | judge | judge, wrong ≤ 1 % | bare cosine ≥ 0.65 |
// |---|---|---|---|---|---|---|---|
// | MRPC | train | 3576 | 1.000 / 0.003 / **0.007** (0 wrong) | 0.840 / 0.261 / **0.399** (120 wrong) | 1.000 / 0.014 / **0.028** (0 wrong) | 0.914 / 0.160 / **0.272** (36 wrong) | 0.739 / 0.923 / **0.821** (785 wrong) |
// | MRPC | test | 1725 | 1.000 / 0.003 / **0.005** (0 wrong) | 0.796 / 0.235 / **0.362** (69 wrong) | 1.000 / 0.010 / **0.021** (0 wrong) | 0.903 / 0.138 / **0.239** (17 wrong) | 0.731 / 0.919 / **0.814** (388 wrong) |
// | SICK | train | 4500 | 0.989 / 0.103 / **0.187** (1 wrong) | 0.502 / 0.348 / **0.411** (299 wrong) | 0.989 / 0.103 / **0.187** (1 wrong) | 0.889 / 0.167 / **0.281** (18 wrong) | 0.326 / 0.994 / **0.491** (1778 wrong) |
// | SICK | test | 4927 | 0.988 / 0.090 / **0.164** (1 wrong) | 0.488 / 0.365 / **0.417** (359 wrong) | 0.988 / 0.090 / **0.164** (1 wrong) | 0.888 / 0.170 / **0.285** (20 wrong) | 0.321 / 0.990 / **0.484** (1969 wrong) |
// | STS captions+headlines | 2014 (tuning) | 1500 | 1.000 / 0.021 / **0.041** (0 wrong) | 0.560 / 0.533 / **0.546** (159 wrong) | 1.000 / 0.021 / **0.041** (0 wrong) | 0.829 / 0.077 / **0.140** (6 wrong) | 0.397 / 0.982 / **0.566** (564 wrong) |
// | STS captions+headlines | 2015 (held out) | 1500 | 1.000 / 0.029 / **0.057** (0 wrong) | 0.749 / 0.514 / **0.609** (70 wrong) | 1.000 / 0.029 / **0.057** (0 wrong) | 0.865 / 0.079 / **0.144** (5 wrong) | 0.528 / 0.975 / **0.685** (355 wrong) |
// threshold 0.9290; at most 1 % wrong: 0.7860

/// One weight per feature, in `FEATURES` order.
pub(super) const WEIGHTS: [f32; 12] = [
    -4.731105, // bias
    2.688989, // cosine
    1.339368, // content-word jaccard
    -0.792268, // share of the older's words the newer lacks
    -1.117949, // share of the newer's words the older lacks
    -0.128525, // one side's words are all in the other
    0.648867, // a name only one side has
    0.444547, // the same predicate wording
    0.120252, // the subjects differ
    -1.166545, // length ratio (|log|)
    2.794282, // cosine × jaccard
    2.134434, // words that differ (/10, at most 1)
];

/// The probability at or above which the judge merges.
pub(super) const THRESHOLD: f32 = 0.929044;
