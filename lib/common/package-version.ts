import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

interface Manifest {
  version: string;
  /** `engines.node`: the Node.js versions QueueBox is tested on. */
  nodeEngines: string | undefined;
}

let cached: Manifest | undefined;

/** The queuebox package.json above this file (dist/common or .build/lib/common), read once. */
function manifest(): Manifest {
  if (cached !== undefined) return cached;
  cached = { version: 'unknown', nodeEngines: undefined };
  for (let dir = __dirname; dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string; engines?: { node?: string } };
    if (pkg.name === 'queuebox') {
      cached = { version: pkg.version ?? 'unknown', nodeEngines: pkg.engines?.node };
      break;
    }
  }
  return cached;
}

/** The queuebox package's version. */
export function packageVersion(): string {
  return manifest().version;
}

/** The queuebox package's `engines.node` range, e.g. `^22.12.0 || >=24.0.0`. */
export function supportedNodeVersions(): string | undefined {
  return manifest().nodeEngines;
}
