import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { RoutingTier } from '../../../crds/routing-policy.js';

/**
 * The learned scorer's bank: prompts of public benchmarks, labelled by source (sources.json says
 * which package, version and licence each comes from, its tier and why), built by build-bank.py.
 * Read once, on first use: the trainer (train.ts), the routing bench, and a policy whose scorer
 * embeds with a model the gateway routes (its classifier is trained on the bank in that space).
 */

export interface BankPrompt {
  source: string;
  tier: RoutingTier;
  prompt: string;
}

export interface BankSource {
  id: string;
  /** The source's tier; the hand-written source is labelled request by request. */
  tier: string;
  puzzle: boolean;
  package: string;
  registry: string;
  version: string;
  licence: string;
  path: string;
  select: string;
  reason: string;
}

const HERE = fileURLToPath(new URL('./', import.meta.url));
let prompts: BankPrompt[] | undefined;
let sources: BankSource[] | undefined;

/** The bank files: the public sources (build-bank.py), then the hand-written one (e2e/bench/routing-set-export.ts). */
export const BANK_FILES = ['bank.jsonl', 'hand-written.jsonl'] as const;

export function bankPrompts(): readonly BankPrompt[] {
  prompts ??= BANK_FILES.flatMap((file) =>
    readFileSync(`${HERE}${file}`, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as BankPrompt),
  );
  return prompts;
}

export function bankSources(): readonly BankSource[] {
  sources ??= (JSON.parse(readFileSync(`${HERE}sources.json`, 'utf8')) as { sources: BankSource[] }).sources;
  return sources;
}

/** At most `perSource` prompts of each source, evenly spread over it (a smaller bank to embed remotely). */
export function sampledBank(perSource: number): BankPrompt[] {
  const bySource = new Map<string, BankPrompt[]>();
  for (const p of bankPrompts()) {
    const list = bySource.get(p.source);
    if (list) list.push(p);
    else bySource.set(p.source, [p]);
  }
  const out: BankPrompt[] = [];
  for (const list of bySource.values()) {
    const step = Math.max(1, list.length / perSource);
    for (let i = 0; i < list.length; i += step) out.push(list[Math.floor(i)] as BankPrompt);
  }
  return out;
}
