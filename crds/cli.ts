import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import yaml from 'js-yaml';
import { formatIssues, kindOf, validateResource } from './validation.js';

/**
 * `validate FILE|DIR...`: checks platform resources in YAML files against the CRD schemas
 * (defaults, patterns, CEL rules) without a cluster. Documents of other APIs are skipped.
 * Exits 1 when any document is invalid.
 */
function yamlFiles(path: string): string[] {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => join(path, f));
}

export function validateFiles(paths: string[], out: (line: string) => void): boolean {
  let ok = true;
  for (const file of paths.flatMap(yamlFiles)) {
    let docs: unknown[];
    try {
      docs = yaml.loadAll(readFileSync(file, 'utf8'));
    } catch (err) {
      out(`✗ ${file}: not YAML: ${(err as Error).message.split('\n')[0]}`);
      ok = false;
      continue;
    }
    for (const doc of docs) {
      const kind = kindOf(doc);
      if (!kind) continue;
      const name = (doc as { metadata?: { name?: string } }).metadata?.name ?? '<unnamed>';
      const result = validateResource(doc);
      if (result.ok) out(`✓ ${file}: ${kind}/${name}`);
      else {
        ok = false;
        out(`✗ ${file}: ${kind}/${name}\n${formatIssues(result.issues).replace(/^/gm, '    ')}`);
      }
    }
  }
  return ok;
}

function main(argv: string[]): number {
  const [command, ...args] = argv;
  if (command !== 'validate' || args.length === 0) {
    console.error('usage: validate FILE|DIR...');
    return 2;
  }
  return validateFiles(args, (l) => console.log(l)) ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv.slice(2));
}
