// The compiled test files a run of scripts/test.mjs takes, and its lanes:
// - all (`npm test`, what CI runs): every `.build/test/**/*.test.js`;
// - fast (`npm run test:fast`, for development): all but SLOW;
// - partitioned (after either, unless files are given): PARTITIONED again, their databases
//   migrated into the partitioned layout of issue 37 (QUEUEBOX_TEST_LAYOUT=partitioned).
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

/**
 * What the partitioned lane runs again in the partitioned layout (docs/partitioning.md), as paths
 * under test/: the suites of writes, claims, completions, leases, ordering and crashes, which run
 * unchanged on either layout. Not in it: the doctor's and the query plans' tests (the layout has
 * its own indexes, statistics and storage settings per partition: step 4's doctor), and retention's
 * (the layout's retention drops partitions: integration/partition-keeper.test.js).
 */
export const PARTITIONED = [
  'conformance/claims.test.js',
  'conformance/inbox.test.js',
  'conformance/order.test.js',
  'conformance/pull.test.js',
  'integration/enqueue-once.test.js',
  'integration/inbox-relay-batch.test.js',
  'integration/inbox-retry.test.js',
  'integration/inbox.test.js',
  'integration/keyed-claims.test.js',
  'integration/lease.test.js',
  'integration/ordering.test.js',
  'integration/outbox-followers.test.js',
  'integration/outbox.test.js',
  'integration/pool-size.test.js',
  'integration/pull.test.js',
  'integration/recovery.test.js',
  'integration/sent-rows.test.js',
  'integration/unkeyed-claims.test.js',
];

/** The partitioned lane's files, under `dir`. */
export function partitionedFiles(dir = BUILD_DIR) {
  return PARTITIONED.map((file) => join(dir, file));
}

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
