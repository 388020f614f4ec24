import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { dashboardMessages as messages } from './dashboard.messages';

/** A file of the page, held in memory with its gzipped form. */
export interface DashboardAsset {
  body: Buffer;
  gzipped: Buffer;
  type: string;
  etag: string;
}

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/**
 * The built front end, `ui/` beside this file (`npm run build` compiles lib/dashboard/ui into
 * dist/dashboard/ui). Read once at start-up: the set of files served is exactly what the package
 * ships, so a request can never name any other file.
 */
export function loadDashboardAssets(dir: string = join(__dirname, 'ui')): Map<string, DashboardAsset> {
  if (!existsSync(join(dir, 'main.js'))) throw new QueueBoxConfigError('dashboard', messages.assetsMissing(dir));
  const assets = new Map<string, DashboardAsset>();
  for (const file of readdirSync(dir)) {
    const type = TYPES[extname(file)];
    if (type === undefined) continue;
    const body = readFileSync(join(dir, file));
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
    assets.set(file, { body, gzipped: gzipSync(body, { level: 9 }), type, etag });
  }
  return assets;
}

/** The page: a shell that loads the bundle, which asks the API for everything else. */
export function dashboardPage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>QueueBox</title>
<link rel="icon" href="assets/icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="assets/dashboard.css">
<script type="module" src="assets/main.js"></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<div id="app"><p class="loading">Loading QueueBox…</p></div>
<noscript><p>The QueueBox dashboard needs JavaScript. Its JSON API works without it: see docs/dashboard.md.</p></noscript>
</body>
</html>
`;
}

/**
 * What the page may load and talk to: only its own origin, no inline script or style, no frames
 * around it (clickjacking), no forms posting elsewhere.
 */
export const DASHBOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
