import type { RE2JS } from 're2js';
import type { BuiltInCategory, GuardrailSpec } from '../../crds/guardrail.js';
import { compilePattern } from '../../crds/guardrail-pattern.js';
import { apiTokens, cloudCredentials, privateKeys } from './credentials.js';
import { emails, ibans, ipAddresses, nationalIds, paymentCards, phones } from './personal-data.js';
import { type Detect, disjoint, type Span } from './spans.js';

/**
 * A guardrail's detectors made one: the built-in categories it names (all when it names none) and
 * its own patterns, their findings made disjoint. Credentials come first in the table, so that of
 * two findings over the same text the credential is counted (a key of digits is not a phone).
 */

const BUILT_IN: Readonly<Record<BuiltInCategory, (spec: BuiltInOptions) => Detect>> = {
  PrivateKey: () => privateKeys,
  CloudCredential: () => cloudCredentials,
  ApiToken: () => apiTokens,
  Email: () => emails,
  PaymentCard: () => paymentCards,
  Iban: () => ibans,
  NationalId: () => nationalIds,
  IpAddress: () => ipAddresses,
  Phone: (o) => phones(o.phoneRegions ?? ['US']),
};

type BuiltInOptions = NonNullable<GuardrailSpec['detectors']['builtIn']>;

/** A pattern that does not compile: skipped, and said so (the operator's status says it too). */
export interface PatternProblem {
  name: string;
  message: string;
}

/** The built-in detectors a spec names, and its patterns (RE2: linear time whatever the text). */
export function compileDetectors(spec: GuardrailSpec['detectors']): { detect: Detect; problems: PatternProblem[] } {
  const detectors: Detect[] = [];
  const { builtIn } = spec;
  if (builtIn) {
    const wanted = new Set<string>(builtIn.categories?.length ? builtIn.categories : Object.keys(BUILT_IN));
    for (const [category, make] of Object.entries(BUILT_IN)) if (wanted.has(category)) detectors.push(make(builtIn));
  }
  const problems: PatternProblem[] = [];
  for (const p of spec.patterns ?? []) {
    const compiled = compilePattern(p.regex);
    if (typeof compiled === 'string') problems.push({ name: p.name, message: compiled });
    else detectors.push(patternDetector(compiled, p.name));
  }
  return { detect: (text) => disjoint(detectors.flatMap((d) => d(text))), problems };
}

function patternDetector(re: RE2JS, category: string): Detect {
  return (text) => {
    const out: Span[] = [];
    const m = re.matcher(text);
    let from = 0;
    while (from <= text.length && m.find(from)) {
      const start = m.start();
      const end = m.end();
      if (end > start) out.push({ start, end, category });
      from = end > start ? end : start + 1;
    }
    return out;
  };
}
