import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { aborted, type Checker, type GuardrailCalls, type Outcome, type Verdict } from '../checker.js';
import type { FindingPlace } from '../findings.js';

/**
 * An external service as a guardrail's Checker: asked about each text on its own (so that what
 * it finds is the text's, and a conversation's earlier turns, asked about before, are answered
 * from memory), a few texts at a time, all within the service's time. A text's verdict is kept
 * by the hash of where and what it is, for a while: a verdict holds what the service found (a
 * name, a card number), kept no longer than that and only in this process.
 */

/** One text to the service: what it found there. */
export type AskOne = (
  text: string,
  where: FindingPlace,
  calls: GuardrailCalls,
  signal: AbortSignal,
) => Promise<Verdict>;

export interface ServiceOptions {
  name: string;
  timeoutMs: number;
  onFailure: 'Allow' | 'Block';
  local: boolean;
  leaves: boolean;
}

/** Texts asked about at once, per request and service: a long conversation's first check is not a burst. */
const CONCURRENCY = 4;
const REMEMBERED = 2_000;
const REMEMBERED_MS = 5 * 60_000;
/** The most characters remembered verdicts hold, per service. */
const REMEMBERED_CHARS = 4_000_000;

export function perText(opts: ServiceOptions, ask: AskOne): Checker {
  // Bounded by what verdicts hold too: a found string may be as long as its text.
  const remembered = new LRUCache<string, Verdict>({
    max: REMEMBERED,
    ttl: REMEMBERED_MS,
    maxSize: REMEMBERED_CHARS,
    sizeCalculation: (v) => 1 + v.whole.length + v.found.reduce((n, f) => n + f.text.length + f.category.length, 0),
  });
  const asking = new Map<string, Promise<Verdict>>();
  return {
    name: `service/${opts.name}`,
    onFailure: opts.onFailure,
    local: opts.local,
    leaves: opts.leaves,
    async check(texts, where, calls): Promise<Outcome> {
      const timeout = AbortSignal.timeout(opts.timeoutMs);
      // A failed text fails the check: the texts not asked yet are not asked, those asked are let go.
      const failed = new AbortController();
      const signal = AbortSignal.any([timeout, failed.signal]);
      const asked = [...new Set(texts.filter((t) => t.trim() !== ''))];
      const verdicts: Verdict[] = [];
      let next = 0;
      const worker = async () => {
        while (next < asked.length && !signal.aborted) {
          const text = asked[next++] as string;
          const key = createHash('sha256').update(where).update('\0').update(text).digest('base64url');
          let verdict = remembered.get(key);
          if (!verdict) {
            // A text being asked about for another request (a shared system prompt) is not asked again.
            let pending = asking.get(key);
            if (!pending) {
              pending = ask(text, where, calls, signal).finally(() => asking.delete(key));
              asking.set(key, pending);
            }
            verdict = await pending;
            remembered.set(key, verdict);
          }
          verdicts.push(verdict);
        }
      };
      try {
        // A service whose call does not heed the signal (a token exchange) still ends at the time.
        await Promise.race([
          Promise.all(Array.from({ length: Math.min(CONCURRENCY, asked.length) }, worker)),
          aborted(signal),
        ]);
        // A text left unasked is unchecked, never safe.
        if (verdicts.length < asked.length) throw new Error('not every text was asked about');
      } catch (err) {
        failed.abort();
        return { failed: timeout.aborted ? `no answer within ${opts.timeoutMs / 1000}s` : errorText(err) };
      }
      return {
        whole: [...new Set(verdicts.flatMap((v) => v.whole))],
        found: verdicts.flatMap((v) => v.found),
      };
    },
  };
}

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err)).slice(0, 200);
