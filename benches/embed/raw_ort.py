"""Raw ONNX Runtime baseline for the MiniLM embedder: Python onnxruntime 1.31.1 on the same
model.onnx and the same texts (target/bench-data/embed-{short,long}.txt, written by
`embedbench`), with the Python tokenizers package and numpy pooling, batches of 1, 8 and 32,
1 and 2 intra-op threads. Prints the table embedbench prints, or with a third argument
`headline` the 2-thread figures `embedbench headline` prints. Run by benches/embed/run.sh.
"""

import os
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

model_dir, data_dir = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
tok.enable_truncation(256)
tok.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")


def session(threads):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(os.path.join(model_dir, "model.onnx"), options,
                                providers=["CPUExecutionProvider"])


def embed(sess, texts):
    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    hidden = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": np.zeros_like(ids)})[0]
    pooled = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def rate(sess, texts, batch):
    embed(sess, texts[:batch])
    best = 0.0
    for _ in range(3):
        start, done, i = time.perf_counter(), 0, 0
        while time.perf_counter() - start < 1.0:
            chunk = texts[i:i + batch] or texts[:batch]
            i = i + batch if i + batch < len(texts) else 0
            embed(sess, chunk)
            done += len(chunk)
        best = max(best, done / (time.perf_counter() - start))
    return best


texts = {name: open(os.path.join(data_dir, f"embed-{name}.txt")).read().split("\n")
         for name in ("short", "long")}
if len(sys.argv) > 3 and sys.argv[3] == "headline":
    s = session(2)
    print(f"raw   short/32 {rate(s, texts['short'], 32):.0f} long/8 {rate(s, texts['long'], 8):.0f} "
          f"short/1 {rate(s, texts['short'], 1):.0f}", flush=True)
    sys.exit(0)
sessions = [session(1), session(2)]
print("| texts | batch | 1 thread (sent/s) | 2 threads (sent/s) |\n|---|---|---|---|")
for name in ("short", "long"):
    for batch in (1, 8, 32):
        r = [rate(s, texts[name], batch) for s in sessions]
        print(f"| {name} | {batch} | {r[0]:.0f} | {r[1]:.0f} |", flush=True)
