import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

let cached: string | undefined;

/** The queuebox package's version, from the package.json above this file (dist/common or .build/lib/common). */
export function packageVersion(): string {
  if (cached !== undefined) return cached;
  cached = 'unknown';
  for (let dir = __dirname; dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
    if (pkg.name === 'queuebox') {
      cached = pkg.version ?? 'unknown';
      break;
    }
  }
  return cached;
}
