import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { PRODUCT_VERSION } from './constants.js';

/** One release number: what the image runs (package.json), what the charts install, what traces say. */
describe('the product version', () => {
  it('is package.json version and both charts appVersion', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
    expect(pkg.version).toBe(PRODUCT_VERSION);
    for (const chart of ['charts/platform-ai-optimizer', 'charts/platform-ai-optimizer-crds']) {
      const meta = yaml.load(readFileSync(`${chart}/Chart.yaml`, 'utf8')) as { appVersion: string };
      expect(meta.appVersion, chart).toBe(PRODUCT_VERSION);
    }
  });
});
