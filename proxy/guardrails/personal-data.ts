import { parsePhoneNumber } from 'awesome-phonenumber';
import { electronicFormatIBAN, getCountrySpecifications, isValidIBAN } from 'ibantools';
import validator from 'validator';
import { hetuValid, luhn, personnummerValid, spanishIdValid, ssnValid } from './checksums.js';
import { matches, type Span } from './spans.js';

/**
 * The built-in detectors of personal data. Each finds candidates with a pattern that runs in
 * linear time, then validates them: with validator (emails, IP addresses, card issuers),
 * ibantools (an IBAN's country length and mod 97), libphonenumber's rules (awesome-phonenumber),
 * or the identifier's own check (proxy/guardrails/checksums.ts). A number that fails its check
 * is not a finding.
 */

const LOCAL = /[A-Za-z0-9._%+-]/;
const DOMAIN = /[A-Za-z0-9.-]/;

/**
 * Emails: from each '@', the address's characters on either side (at most RFC 5321's 64 and 253,
 * so a run of letters is read a bounded number of times), validated by validator's isEmail.
 */
export function emails(text: string): Span[] {
  const out: Span[] = [];
  for (let at = text.indexOf('@'); at !== -1; at = text.indexOf('@', at + 1)) {
    let start = at;
    while (start > 0 && at - start < 64 && LOCAL.test(text[start - 1] ?? '')) start--;
    let end = at + 1;
    while (end < text.length && end - at <= 253 && DOMAIN.test(text[end] ?? '')) end++;
    while (start < at && text[start] === '.') start++;
    while (end > at + 1 && (text[end - 1] === '.' || text[end - 1] === '-')) end--;
    if (start === at || end === at + 1) continue;
    if (validator.isEmail(text.slice(start, end), { allow_ip_domain: false })) {
      out.push({ start, end, category: 'Email' });
      at = end - 1;
    }
  }
  return out;
}

// 13 to 19 digits, one or two spaces or hyphens between them, not inside a longer number.
const CARD = /(?<![\d-])\d(?:[ -]{0,2}\d){12,18}(?![\d])/g;

/** Payment cards: 13-19 digits that pass Luhn and belong to a known issuer (validator's isCreditCard). */
export const paymentCards = (text: string): Span[] =>
  matches(text, CARD, 'PaymentCard', (m) => {
    const digits = m[0].replace(/[ -]/g, '');
    return luhn(digits) && validator.isCreditCard(digits);
  });

const IBAN_START = /(?<![A-Za-z0-9])([A-Za-z]{2})\d{2}/g;
const COUNTRY_SPECS = getCountrySpecifications();

/**
 * IBANs: a country code and two check digits, then as many letters and digits as the country's
 * IBAN has (single spaces between groups allowed), valid by ibantools (length, format, mod 97).
 */
export function ibans(text: string): Span[] {
  const out: Span[] = [];
  IBAN_START.lastIndex = 0;
  for (let m = IBAN_START.exec(text); m !== null; m = IBAN_START.exec(text)) {
    const length = COUNTRY_SPECS[(m[1] ?? '').toUpperCase()]?.chars;
    if (!length) continue;
    let end = m.index;
    let chars = 0;
    while (end < text.length && chars < length) {
      const c = text[end] ?? '';
      if (/[A-Za-z0-9]/.test(c)) chars++;
      else if (c !== ' ' || !/[A-Za-z0-9]/.test(text[end + 1] ?? '')) break;
      end++;
    }
    if (chars !== length || /[A-Za-z0-9]/.test(text[end] ?? '')) continue;
    const candidate = text.slice(m.index, end);
    if (isValidIBAN(electronicFormatIBAN(candidate.toUpperCase()) ?? '')) {
      out.push({ start: m.index, end, category: 'Iban' });
      IBAN_START.lastIndex = end;
    }
  }
  return out;
}

const NATIONAL_IDS: readonly { re: RegExp; valid: (m: RegExpExecArray) => boolean }[] = [
  // US SSN, written with its hyphens (9 bare digits are too many other things).
  { re: /(?<![\d-])(\d{3})-(\d{2})-(\d{4})(?![\d-])/g, valid: (m) => ssnValid(m[1] ?? '', m[2] ?? '', m[3] ?? '') },
  // Spanish DNI and NIE.
  {
    re: /(?<![A-Za-z0-9])([XYZ]?\d{7,8})-?([A-Z])(?![A-Za-z0-9])/g,
    valid: (m) => {
      const n = m[1] ?? '';
      return (n.length === 8 || /^[XYZ]/.test(n)) && spanishIdValid(n, m[2] ?? '');
    },
  },
  // Swedish personnummer (with its separator: bare 10 digits are too many other things).
  {
    re: /(?<![\d-])(?:\d{2})?(\d{6})[-+](\d{4})(?![\d-])/g,
    valid: (m) => personnummerValid(m[1] ?? '', m[2] ?? ''),
  },
  // Finnish HETU.
  {
    re: /(?<![A-Za-z0-9])(\d{6})[-+A-FU-Y](\d{3})([0-9A-Y])(?![A-Za-z0-9])/g,
    valid: (m) => hetuValid(m[1] ?? '', m[2] ?? '', m[3] ?? ''),
  },
];

/** National ids: US SSNs by the SSA's rules; Spanish DNI/NIE, Swedish personnummer and Finnish HETU by their checks. */
export const nationalIds = (text: string): Span[] =>
  NATIONAL_IDS.flatMap(({ re, valid }) => matches(text, re, 'NationalId', valid));

/** What precedes a version number, not an address: `version 1.2.3.4`, `v1.2.3.4`, `pkg==1.2.3.4`, `pkg@1.2.3.4`. */
const VERSIONED = /(version|ver|v|==|>=|<=|~=|@)\s*$/i;
const IPV4 = /(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?!\.?\d)/g;
const IPV6 = /(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Fa-f:])/g;

/** IP addresses: IPv4, and IPv6 with at least 3 groups of hex digits (so C++'s std:: is not one), by validator's isIP. */
export const ipAddresses = (text: string): Span[] => [
  ...matches(
    text,
    IPV4,
    'IpAddress',
    (m) => validator.isIP(m[0], 4) && !VERSIONED.test(text.slice(Math.max(0, m.index - 12), m.index)),
  ),
  ...matches(
    text,
    IPV6,
    'IpAddress',
    (m) => (m[0].match(/[0-9A-Fa-f]+/g)?.length ?? 0) >= 3 && validator.isIP(m[0], 6),
  ),
];

const DATE_LIKE = /^\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b|^\d{1,2}[-/.]\d{1,2}[-/.]\d{4}\b/;

// A + and country code, or a national number; 7 to 15 digits with single separators between them.
const PHONE = /(?<![\w+.-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{1,4}){1,5}(?![\w])/g;

/**
 * Phone numbers valid by libphonenumber's rules for their region: written with +, any region;
 * without, one of `regions`. 7 to 15 digits.
 */
export function phones(regions: readonly string[]): (text: string) => Span[] {
  return (text) =>
    matches(text, PHONE, 'Phone', (m) => {
      const digits = m[0].replace(/\D/g, '').length;
      if (digits < 7 || digits > 15) return false;
      // A date, or a date and an hour (2025-06-03 14:22): not a number to call.
      if (DATE_LIKE.test(m[0]) || text[m.index + m[0].length] === ':') return false;
      if (m[0].startsWith('+')) return parsePhoneNumber(m[0]).valid;
      return regions.some((regionCode) => parsePhoneNumber(m[0], { regionCode }).valid);
    });
}
