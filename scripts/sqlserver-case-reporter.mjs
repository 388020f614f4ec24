// A node:test reporter (`--test-reporter=<this file>`) that counts, per test file, the SQL Server
// conformance cases that ran: cases inside a suite whose title starts with SQL_SERVER_SUITE
// (test/conformance/suite.ts names each dialect's suites so), passed or failed, never skipped.
// It writes one JSON object, `{ "<absolute file>": <cases> }`, listing every file the runner
// reported, to its destination (`--test-reporter-destination=<file>`). scripts/test-sqlserver.mjs
// reads it to refuse a run in which a file ran no SQL Server case.

/** How test/conformance/suite.ts titles the suites of the SQL Server harness. */
export const SQL_SERVER_SUITE = 'dialect conformance: SQL Server';

/**
 * The SQL Server cases per file in a stream of node:test reporter events. Each file's suites are
 * told apart by `test:start` (which precedes a test's own result, outer suites first), kept per
 * file because files run in parallel.
 */
export async function countSqlServerCases(events) {
  const counts = {};
  const open = new Map();
  for await (const { type, data } of events) {
    if (!data?.file) continue;
    counts[data.file] ??= 0;
    if (type === 'test:start') {
      const titles = open.get(data.file) ?? [];
      titles.length = data.nesting;
      titles.push(data.name);
      open.set(data.file, titles);
    } else if ((type === 'test:pass' || type === 'test:fail') && data.details?.type === 'test' && !data.skip && !data.todo) {
      const outer = (open.get(data.file) ?? []).slice(0, data.nesting);
      if (outer.some((title) => title.startsWith(SQL_SERVER_SUITE))) counts[data.file]++;
    }
  }
  return counts;
}

export default async function* sqlServerCaseReporter(events) {
  yield `${JSON.stringify(await countSqlServerCases(events))}\n`;
}
