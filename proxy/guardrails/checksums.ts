/**
 * The check digits of the identifiers the built-in detectors validate, where no well-kept library
 * has them (cards and IBANs go to validator and ibantools: proxy/guardrails/personal-data.ts).
 * Each takes the identifier's characters as written, separators removed.
 */

/** Luhn (ISO/IEC 7812): the payment card's, and the Swedish personnummer's, check digit. */
export function luhn(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return false;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return digits.length > 1 && sum % 10 === 0;
}

/** A US Social Security number by the SSA's rules (it has no check digit): area, group and serial. */
export function ssnValid(area: string, group: string, serial: string): boolean {
  const a = Number(area);
  return a !== 0 && a !== 666 && a < 900 && group !== '00' && serial !== '0000';
}

const DNI_LETTERS = 'TRWAGMYFPDXBNJZSQVHLCKE';

/** A Spanish DNI (8 digits) or NIE (X, Y or Z and 7 digits): its letter is the number mod 23. */
export function spanishIdValid(number: string, letter: string): boolean {
  const n = Number(number.replace(/^X/, '0').replace(/^Y/, '1').replace(/^Z/, '2'));
  return Number.isInteger(n) && DNI_LETTERS[n % 23] === letter;
}

/** A Swedish personnummer (YYMMDD-NNNC): a real month and day (+60: a samordningsnummer), Luhn over the 10 digits. */
export function personnummerValid(yymmdd: string, rest: string): boolean {
  const month = Number(yymmdd.slice(2, 4));
  const day = Number(yymmdd.slice(4, 6));
  const d = day > 60 ? day - 60 : day;
  return month >= 1 && month <= 12 && d >= 1 && d <= 31 && luhn(yymmdd + rest);
}

const HETU_CHECK = '0123456789ABCDEFHJKLMNPRSTUVWXY';

/** A Finnish HETU (DDMMYY, century sign, NNN, check): the 9 digits mod 31, and a real date. */
export function hetuValid(ddmmyy: string, individual: string, check: string): boolean {
  const day = Number(ddmmyy.slice(0, 2));
  const month = Number(ddmmyy.slice(2, 4));
  if (day < 1 || day > 31 || month < 1 || month > 12) return false;
  return HETU_CHECK[Number(ddmmyy + individual) % 31] === check;
}
