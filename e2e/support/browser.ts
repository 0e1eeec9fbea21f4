import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

/** Debian's Chromium, the only browser here (nothing is downloaded); .ci/run installs it. */
const CHROMIUM = '/usr/bin/chromium';

/**
 * Headless Chromium for page tests. The background-networking flags matter on this machine:
 * without them Chromium keeps trying to reach Google's hosts through a closed network.
 */
export function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(`Debian's chromium is required at ${CHROMIUM}: apt-get install -y chromium`);
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
