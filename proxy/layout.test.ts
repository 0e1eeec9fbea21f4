import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

describe("the README's layout table", () => {
  it('names every subsystem folder of proxy/ (examples hold files, not code)', () => {
    const row = readFileSync('README.md', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('| `proxy/` |'));
    const named = /\(([^)]*)\)/.exec(row ?? '')?.[1]?.split(', ') ?? [];
    const folders = readdirSync('proxy', { withFileTypes: true })
      .filter((d) => d.isDirectory() && d.name !== 'examples')
      .map((d) => d.name)
      .sort();
    expect(named).toEqual(folders);
  });
});

describe('the request path reads one way', () => {
  it('no module of a subsystem imports a stage or the composition: the stages call down, never back up', () => {
    const stages = readdirSync('proxy')
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && f !== 'exchange.ts')
      .map((f) => f.replace(/\.ts$/, '.js'));
    const upward: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, e.name);
        if (e.isDirectory()) walk(path);
        else if (e.name.endsWith('.ts') && !e.name.endsWith('.test.ts')) {
          for (const m of readFileSync(path, 'utf8').matchAll(/from '((?:\.\.\/)+)([a-z-]+\.js)'/g)) {
            // Resolved to proxy/ itself: a file of the stages (exchange.ts, the plain values, aside).
            if (resolve(dirname(path), m[1] ?? '') === resolve('proxy') && stages.includes(m[2] ?? ''))
              upward.push(`${path} -> ${m[2]}`);
          }
        }
      }
    };
    for (const e of readdirSync('proxy', { withFileTypes: true })) if (e.isDirectory()) walk(join('proxy', e.name));
    expect(upward).toEqual([]);
  });
});
