import { matches, type Span } from './spans.js';

/**
 * The built-in detectors of credentials: cloud keys, private keys and API tokens of known formats.
 * A format is its validation (a prefix, an alphabet, a length); the one credential without a
 * format of its own, AWS's secret access key, counts only beside what names it (an access key
 * id, or the words aws or secret, within 256 characters before it).
 */

const AWS_KEY_ID = /(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}(?![A-Za-z0-9])/g;
// After `=` too: AWS_SECRET_ACCESS_KEY=... is how .env files and credentials files write it.
const AWS_SECRET = /(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])/g;
const AWS_CONTEXT = /AKIA|ASIA|\baws|\bsecret/i;
const GOOGLE_API_KEY = /(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])/g;
const AZURE_STORAGE_KEY = /AccountKey=([A-Za-z0-9+/]{86}==)/g;

/** A 40-character run that mixes cases and digits or symbols, as AWS's secret keys do (a git SHA does not). */
const mixed = (s: string) => /[a-z]/.test(s) && /[A-Z]/.test(s) && /[0-9/+]/.test(s);

export const cloudCredentials = (text: string): Span[] => [
  ...matches(text, AWS_KEY_ID, 'CloudCredential'),
  ...matches(
    text,
    AWS_SECRET,
    'CloudCredential',
    (m) => mixed(m[0]) && AWS_CONTEXT.test(text.slice(Math.max(0, m.index - 256), m.index)),
  ),
  ...matches(text, GOOGLE_API_KEY, 'CloudCredential'),
  ...matches(text, AZURE_STORAGE_KEY, 'CloudCredential', () => true, 1),
];

const PEM_BEGIN = /-----BEGIN (?:[A-Z0-9]{1,16} ){0,3}PRIVATE KEY(?: BLOCK)?-----/g;
/** The longest private key block looked for (an RSA 8192-bit key in PEM is under 7 KiB). */
const MAX_PEM_CHARS = 16 * 1024;

/**
 * PEM private keys: from the BEGIN line to the END line's last dash; with no END line within
 * MAX_PEM_CHARS (a key cut short, or split across messages), to the end of the base64 after it.
 */
export function privateKeys(text: string): Span[] {
  const out: Span[] = [];
  PEM_BEGIN.lastIndex = 0;
  // The next END line after the last BEGIN, found once and reused while it lies ahead: text of
  // many BEGIN lines and no END is read once, not once per BEGIN.
  let nextEnd = -2;
  for (let m = PEM_BEGIN.exec(text); m !== null; m = PEM_BEGIN.exec(text)) {
    const body = m.index + m[0].length;
    if (nextEnd !== -1 && nextEnd < body) nextEnd = text.indexOf('-----END ', body);
    const endLine = nextEnd;
    let end: number;
    if (endLine !== -1 && endLine - m.index <= MAX_PEM_CHARS) {
      const close = text.indexOf('-----', endLine + 9);
      end = close === -1 ? text.length : close + 5;
    } else {
      end = body;
      while (end < text.length && end - m.index < MAX_PEM_CHARS && /[A-Za-z0-9+/=\s:-]/.test(text[end] ?? '')) end++;
    }
    out.push({ start: m.index, end, category: 'PrivateKey' });
    PEM_BEGIN.lastIndex = end;
  }
  return out;
}

const TOKENS: readonly RegExp[] = [
  // GitHub: personal, OAuth, user-to-server, server-to-server, refresh; fine-grained.
  /(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{82})(?![A-Za-z0-9_])/g,
  // GitLab personal access tokens.
  /(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,64}(?![A-Za-z0-9_-])/g,
  // Slack bot, user, app and config tokens.
  /(?<![A-Za-z0-9-])xox[abposre]-[A-Za-z0-9-]{10,250}(?![A-Za-z0-9-])/g,
  // OpenAI (project, service account, admin and legacy keys) and Anthropic (sk-ant-...).
  /(?<![A-Za-z0-9_-])sk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,250}(?![A-Za-z0-9_-])/g,
  // Stripe secret and restricted keys.
  /(?<![A-Za-z0-9_])(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{20,250}(?![A-Za-z0-9_])/g,
  // Hugging Face and npm.
  /(?<![A-Za-z0-9_])hf_[A-Za-z]{34}(?![A-Za-z0-9_])/g,
  /(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9_])/g,
];

const JWT =
  /(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{8,4096}(?![A-Za-z0-9_-])/g;
const BEARER = /\bBearer[ \t]+([A-Za-z0-9._~+/-]{20,4096}=*)/g;

/** A JWT's header decodes to JSON naming its algorithm. */
function jwtHeader(m: RegExpExecArray): boolean {
  try {
    const header: unknown = JSON.parse(Buffer.from(m[0].slice(0, m[0].indexOf('.')), 'base64url').toString('utf8'));
    return typeof header === 'object' && header !== null && 'alg' in header;
  } catch {
    return false;
  }
}

export const apiTokens = (text: string): Span[] => [
  ...TOKENS.flatMap((re) => matches(text, re, 'ApiToken')),
  ...matches(text, JWT, 'ApiToken', jwtHeader),
  ...matches(text, BEARER, 'ApiToken', () => true, 1),
];
