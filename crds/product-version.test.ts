import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { NODE_MAJOR, PRODUCT_VERSION, unsupportedNode } from './constants.js';

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

/** One Node.js line: what npm asks for (engines), what the image ships, what the components accept at start. */
describe('the supported Node.js', () => {
  it('is package.json engines and the image NODE_VERSION', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { engines: { node: string } };
    expect(pkg.engines.node).toBe(`>=${NODE_MAJOR}`);
    const image = /^NODE_VERSION=(\d+)\./m.exec(readFileSync('e2e/image/versions.env', 'utf8'));
    expect(Number(image?.[1])).toBe(NODE_MAJOR);
  });

  it('refuses older lines at start with what to do, and accepts this one and newer', () => {
    expect(unsupportedNode('v20.20.2')).toMatch(
      /^Node\.js 24 or newer is required, this is v20\.20\.2: .*node\.sh env/,
    );
    expect(unsupportedNode('v22.12.0')).toBeDefined();
    expect(unsupportedNode('v24.0.0')).toBeUndefined();
    expect(unsupportedNode('v26.10.0')).toBeUndefined();
    expect(unsupportedNode(process.version)).toBeUndefined();
  });
});
