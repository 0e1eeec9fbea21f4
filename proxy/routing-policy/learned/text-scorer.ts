import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type ClassifierWeights, probabilities, scoreOf } from './classifier.js';
import { builtInEmbedding, type TextEmbedding } from './static-embedding.js';
import { TEXT_FEATURES, textFeatures } from './text-features.js';

/**
 * How hard a prompt's text says the request is, 0..1: the learned classifier over the prompt's
 * embedding and its measured features when an embedding is at hand, else the classifier over the
 * measured features alone (both trained on the same bank by train.ts). What the request's shape
 * says (context length, tools, images, turns, reasoning asked) is added by scorer.ts.
 */

export type TextScoreKind = 'learned' | 'features';

export interface TextScorer {
  /** The embedding space the learned classifier reads; undefined: features only. */
  readonly embedding?: string;
  score(prompt: string, vector?: Float32Array): { score: number; by: TextScoreKind };
}

/** The trained weights as train.ts writes them (weights.json). */
export interface ScorerWeights {
  /** The embedding the learned classifier was trained in. */
  embedding: string;
  /** sha256 of the bank it was trained on (bank.jsonl), and the examples added to it. */
  trainedOn: { bank: string; prompts: number; examples: number };
  learned: ClassifierWeights;
  features: ClassifierWeights;
}

/**
 * Identifiers: paths of two segments and more, and runs of ten word characters and more that mix
 * letters and digits (UUIDs, hashes, ids such as toolu_bdrk_730p1ixznz). They say nothing about
 * how hard a task is, and in an agent's payload (a hook's input: session id, transcript path,
 * tool call id) their fragments of tokens read like the digit grids of a puzzle.
 */
const IDENTIFIER = /(?:\/[\w.-]+){2,}\/?|\b(?=[\w-]*\d)(?=[\w-]*[a-z])[\w-]{10,}\b/gi;

/**
 * Characters of a text that are embedded: about 1,000 tokens. A mean of token vectors over more
 * says no more about the task (a long document's head is the document), and the cost of scoring
 * stays bounded whatever the request's size; the measured features read the whole prompt.
 */
const EMBEDDED_CHARS = 4000;

/** What of a text is embedded, whichever the embedding: its head without its identifiers. */
export const embeddingInput = (text: string): string => text.slice(0, EMBEDDED_CHARS).replace(IDENTIFIER, '');

/** The classifier's input: the embedding, then the measured features. */
export function inputOf(vector: Float32Array | undefined, prompt: string): Float32Array {
  const measured = textFeatures(prompt);
  const out = new Float32Array((vector?.length ?? 0) + measured.length);
  if (vector) out.set(vector);
  out.set(measured, vector?.length ?? 0);
  return out;
}

export class ClassifierScorer implements TextScorer {
  constructor(
    private readonly weights: Pick<ScorerWeights, 'learned' | 'features'> & { embedding?: string },
    private readonly embedder?: TextEmbedding,
  ) {}

  get embedding(): string | undefined {
    return this.weights.embedding;
  }

  /** `vector`: the embedding of embeddingInput(prompt) when it comes from elsewhere (a routed model); else the embedder's. */
  score(prompt: string, vector?: Float32Array): { score: number; by: TextScoreKind } {
    const v = vector ?? this.embedder?.embed(embeddingInput(prompt));
    if (v && v.length + TEXT_FEATURES.length === this.weights.learned.inputs)
      return { score: scoreOf(probabilities(this.weights.learned, inputOf(v, prompt))), by: 'learned' };
    return { score: scoreOf(probabilities(this.weights.features, inputOf(undefined, prompt))), by: 'features' };
  }
}

const HERE = fileURLToPath(new URL('./', import.meta.url));
let shipped: ScorerWeights | undefined;

/** The weights trained on the bank with the built-in embedding, shipped beside this module. */
export function shippedWeights(): ScorerWeights {
  shipped ??= JSON.parse(readFileSync(`${HERE}weights.json`, 'utf8')) as ScorerWeights;
  return shipped;
}

let builtIn: TextScorer | undefined;
let featuresOnly: TextScorer | undefined;

/**
 * The shipped classifier over the measured features alone: what scores when the gateway runs
 * without its built-in embedding (Helm value routing.builtInEmbedding: false) and no embedding
 * model embeds, or when the embedding's files cannot be read.
 */
export function featuresOnlyScorer(): TextScorer {
  const weights = shippedWeights();
  featuresOnly ??= new ClassifierScorer({ learned: weights.learned, features: weights.features });
  return featuresOnly;
}

/**
 * The default scorer: the shipped classifier over the built-in embedding; the features-only
 * classifier when the embedding's files cannot be read (the reason is returned for the log).
 */
export function builtInScorer(onError: (err: unknown) => void = () => {}): TextScorer {
  if (builtIn) return builtIn;
  try {
    builtIn = new ClassifierScorer(shippedWeights(), builtInEmbedding());
  } catch (err) {
    onError(err);
    builtIn = featuresOnlyScorer();
  }
  return builtIn;
}
