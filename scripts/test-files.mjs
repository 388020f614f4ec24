// The compiled test files a run of scripts/test.mjs takes, and the two lanes:
// - all (`npm test`, what CI runs): every `.build/test/**/*.test.js`;
// - fast (`npm run test:fast`, for development): all but SLOW.
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Where `npm run build:test` puts the compiled tests. */
export const BUILD_DIR = '.build/test';

/**
 * What the fast lane leaves out, as paths under test/ (a folder ends with `/`): the chaos tests
 * (worker processes under kill -9 and pauses past their leases, minutes each), the query-plan tests
 * (tables of up to 1,000,000 rows) and the browser test (Chromium).
 */
export const SLOW = ['chaos/', 'integration/query-plans.test.js', 'e2e/dashboard-browser.test.js'];

/** Every `*.test.js` under `dir`, sorted. */
export function findTests(dir = BUILD_DIR) {
  const walk = (folder) =>
    readdirSync(folder).flatMap((entry) => {
      const path = join(folder, entry);
      if (statSync(path).isDirectory()) return walk(path);
      return entry.endsWith('.test.js') ? [path] : [];
    });
  return walk(dir).sort();
}

/** Whether `file` (a path under `dir`) is one the fast lane leaves out. */
export function isSlow(file, dir = BUILD_DIR) {
  const path = relative(dir, file).replaceAll('\\', '/');
  return SLOW.some((slow) => (slow.endsWith('/') ? path.startsWith(slow) : path === slow));
}

/** The files of a lane: every test file, or (fast) all but the slow ones. */
export function laneFiles({ fast = false, dir = BUILD_DIR } = {}) {
  const files = findTests(dir);
  return fast ? files.filter((file) => !isSlow(file, dir)) : files;
}
