/**
 * The semantic cache's index, in this replica's memory: per bucket (requests alike in everything
 * but their text: cache-key.ts semanticBucket), the embeddings of the texts answered and the exact
 * keys of their answers. Bounded: at most `perBucket` texts a bucket (oldest out), and
 * `maxFloats` numbers in all (a 1,536-dimension model's vectors weigh six times a 256's; least
 * recently used buckets out). A lookup scans its bucket: a few hundred dot products.
 */
export class SemanticIndex {
  private readonly index = new Map<string, { vector: Float32Array; key: string }[]>();
  private floats = 0;

  constructor(
    private readonly maxFloats = 8 * 1024 * 1024,
    private readonly perBucket = 256,
  ) {}

  add(bucket: string, vector: Float32Array, key: string): void {
    const list = this.index.get(bucket) ?? [];
    this.index.delete(bucket);
    this.index.set(bucket, list);
    const same = list.findIndex((e) => e.key === key);
    if (same !== -1) this.floats -= list.splice(same, 1)[0]?.vector.length ?? 0;
    list.push({ vector, key });
    this.floats += vector.length;
    if (list.length > this.perBucket) this.floats -= list.shift()?.vector.length ?? 0;
    while (this.floats > this.maxFloats) {
      const oldest = this.index.keys().next().value;
      if (oldest === undefined) break;
      for (const e of this.index.get(oldest) ?? []) this.floats -= e.vector.length;
      this.index.delete(oldest);
    }
  }

  /** Numbers held (the bound's measure). */
  get size(): number {
    return this.floats;
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
    if (list && at !== -1) this.floats -= list.splice(at, 1)[0]?.vector.length ?? 0;
  }
}
