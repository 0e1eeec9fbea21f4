import { homedir } from 'node:os';
import { join } from 'node:path';

/** Where the e2e tier keeps what it builds and learns between runs (the README's cache folder). */
export function cacheRoot(): string {
  return join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'platform-ai-optimizer');
}
