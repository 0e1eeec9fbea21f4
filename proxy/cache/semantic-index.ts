/**
 * The semantic cache's index, in this replica's memory: per bucket (requests alike in everything
 * but their text: cache-key.ts semanticBucket), the embeddings of the texts answered and the exact
 * keys of their answers. Bounded: at most `perBucket` texts a bucket (oldest out) and `buckets`
 * buckets (least recently used out). A lookup scans its bucket: a few hundred dot products.
 */
export class SemanticIndex {
  private readonly index = new Map<string, { vector: Float32Array; key: string }[]>();

  constructor(
    private readonly buckets = 4096,
    private readonly perBucket = 256,
  ) {}

  add(bucket: string, vector: Float32Array, key: string): void {
    const list = this.index.get(bucket) ?? [];
    this.index.delete(bucket);
    this.index.set(bucket, list);
    const same = list.findIndex((e) => e.key === key);
    if (same !== -1) list.splice(same, 1);
    list.push({ vector, key });
    if (list.length > this.perBucket) list.shift();
    while (this.index.size > this.buckets) {
      const oldest = this.index.keys().next().value;
      if (oldest === undefined) break;
      this.index.delete(oldest);
    }
  }

  /** The nearest text's key at or above `least` cosine similarity (vectors are unit length), with its similarity. */
  nearest(bucket: string, vector: Float32Array, least: number): { key: string; similarity: number } | undefined {
    const list = this.index.get(bucket);
    if (!list) return undefined;
    let best: { key: string; similarity: number } | undefined;
    for (const e of list) {
      if (e.vector.length !== vector.length) continue;
      let dot = 0;
      for (let i = 0; i < vector.length; i++) dot += (vector[i] as number) * (e.vector[i] as number);
      if (dot >= least && (!best || dot > best.similarity)) best = { key: e.key, similarity: dot };
    }
    return best;
  }

  forget(bucket: string, key: string): void {
    const list = this.index.get(bucket);
    const at = list?.findIndex((e) => e.key === key) ?? -1;
    if (list && at !== -1) list.splice(at, 1);
  }
}
