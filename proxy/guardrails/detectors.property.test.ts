import fc from 'fast-check';
import { electronicFormatIBAN, isValidIBAN } from 'ibantools';
import { describe, expect, it } from 'vitest';
import { compileDetectors } from './detectors.js';

/**
 * The detectors against random and hostile text: no crash, no finding that fails its own check
 * (checked here by an independent Luhn and mod 97), and time linear in the text's length.
 */

const { detect } = compileDetectors({ builtIn: {}, patterns: [{ name: 'Custom', regex: '(a+)+b' }] });

/** Luhn, written apart from the detector's. */
function luhnHolds(digits: string): boolean {
  const sum = [...digits].reverse().reduce((acc, c, i) => {
    const d = Number(c) * (i % 2 ? 2 : 1);
    return acc + (d > 9 ? d - 9 : d);
  }, 0);
  return sum % 10 === 0;
}

const noisy = fc.string({
  unit: fc.constantFrom(...'0123456789 -.@:+/ABCDEFXYZabcxyz_\n'.split('')),
  maxLength: 600,
});

describe('the detectors, on random text', () => {
  it('never crash, and every card and IBAN found passes its checksum', () => {
    fc.assert(
      fc.property(noisy, (text) => {
        for (const s of detect(text)) {
          const found = text.slice(s.start, s.end);
          expect(s.end).toBeGreaterThan(s.start);
          if (s.category === 'PaymentCard') expect(luhnHolds(found.replace(/[ -]/g, ''))).toBe(true);
          if (s.category === 'Iban') expect(isValidIBAN(electronicFormatIBAN(found) ?? '')).toBe(true);
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('find no card in random 16-digit numbers that fail Luhn', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[1-9][0-9]{15}$/), (digits) => {
        fc.pre(!luhnHolds(digits));
        expect(detect(`number ${digits} here`).filter((s) => s.category === 'PaymentCard')).toEqual([]);
      }),
      { numRuns: 2_000 },
    );
  });

  it('take time linear in the length of hostile text', () => {
    const hostile = [
      'a'.repeat(1),
      '1'.repeat(1),
      '@',
      '1 ',
      '1-',
      ':',
      'ab@',
      'AKIA',
      'sk-',
      '-----BEGIN RSA PRIVATE KEY-----',
      'eyJ',
      'Bearer ',
      '+1 (',
      'DE00 ',
      'a'.repeat(50),
      '-----BEGIN PRIVATE KEY-----!',
      'de12 ',
    ];
    // The same amount of text both ways: 16 texts of 8,000 characters, and one of 128,000. Linear
    // work takes about as long for both, quadratic 16 times as long for the one. Both sides running
    // about as long, a loaded machine stretches them alike: a sub-millisecond side, run unpreempted
    // while the long one shared its core, once read 75-92 against 16 with two CPU-heavy jobs beside.
    const timeOf = (text: string, times: number) => {
      let best = Number.POSITIVE_INFINITY;
      for (let tries = 0; tries < 4; tries++) {
        const t = performance.now();
        for (let i = 0; i < times; i++) detect(text);
        best = Math.min(best, performance.now() - t);
      }
      return best;
    };
    for (const unit of hostile) {
      const small = unit.repeat(Math.ceil(8_000 / unit.length));
      const large = unit.repeat(Math.ceil(128_000 / unit.length));
      // Linear is about 1 (up to 2.2 with two CPU-heavy jobs beside it), quadratic 16 or more.
      const ratio = timeOf(large, 1) / Math.max(timeOf(small, Math.round(large.length / small.length)), 0.05);
      expect(ratio, `${JSON.stringify(unit.slice(0, 20))} x ${large.length}`).toBeLessThan(5);
    }
  }, 60_000);
});
