import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';

// The dashboard's browser tests drive Debian's chromium (or QUEUEBOX_CHROMIUM) through
// playwright-core, launched one way for all of them.

const CHROMIUM = process.env.QUEUEBOX_CHROMIUM ?? '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Why a browser test file cannot run here (no chromium), for `describe`'s `skip`, or false. Says
 * so once on the console, as `<what> skipped: <why>.`; .ci/run installs chromium when it is missing.
 */
export function chromiumMissing(what: string): string | false {
  if (existsSync(CHROMIUM)) return false;
  const why = `${CHROMIUM} is not installed (apt-get install -y chromium; .ci/run installs it), so no browser can run here`;
  console.log(`${what} skipped: ${why}.`);
  return why;
}

/**
 * Where the screenshots go, made if need be: .build/dashboard-screenshots, or
 * QUEUEBOX_DASHBOARD_SCREENSHOTS (the committed ones in docs/images: `npm run screenshots:dashboard`).
 */
export function screenshotsFolder(): string {
  const folder = resolve(__dirname, '..', '..', '..', process.env.QUEUEBOX_DASHBOARD_SCREENSHOTS ?? '.build/dashboard-screenshots');
  mkdirSync(folder, { recursive: true });
  return folder;
}

/** A headless chromium on a profile of its own, 1280×800, light, every request as the operator "ada"; `close` also removes the profile. */
export async function launchChromium(): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), 'queuebox-chromium-'));
  try {
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      args: ARGS,
      headless: true,
      viewport: { width: 1280, height: 800 },
      colorScheme: 'light',
      extraHTTPHeaders: { 'x-operator': 'ada' },
    });
    return {
      context,
      close: async () => {
        await context.close();
        rmSync(profile, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(profile, { recursive: true, force: true });
    throw error;
  }
}
