// The options table (lib/options/options.table.ts) against the docs: every option row of the
// configuration tables in README.md and docs/*.md names an option that exists, shows the default
// the table gives, and calls a deprecated option deprecated; every option the table gives a
// documented default to appears in a table.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  DOCTOR_OPTIONS,
  INSTANCES_OPTIONS,
  LOGGING_OPTIONS,
  type OptionSpec,
  OUTBOX_OPTIONS,
  PULL_OPTIONS,
  RELAY_OPTIONS,
  RETENTION_OPTIONS,
  TOP_LEVEL_OPTIONS,
} from '../../lib/options/options.table';

const root = join(__dirname, '..', '..', '..');
const documents = [
  'README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** The option a dotted path names, if any. */
function specOf(path: string): OptionSpec | undefined {
  const groups: [string, Record<string, OptionSpec>][] = [
    ['outbox.', OUTBOX_OPTIONS],
    ['inbox.relay.', RELAY_OPTIONS],
    ['pull.', PULL_OPTIONS],
    ['retention.', RETENTION_OPTIONS],
    ['instances.', INSTANCES_OPTIONS],
    ['logging.', LOGGING_OPTIONS],
    ['doctor.', DOCTOR_OPTIONS],
    ['', TOP_LEVEL_OPTIONS],
  ];
  for (const [prefix, table] of groups) {
    if (!path.startsWith(prefix)) continue;
    const key = path.slice(prefix.length);
    return Object.hasOwn(table, key) ? table[key] : undefined;
  }
  return undefined;
}

/** Every configuration table row: `| \`path\` | default | meaning |`, with where it was found. */
const rows = documents.flatMap((document) =>
  readFileSync(join(root, document), 'utf8')
    .split('\n')
    .map((line) =>
      /^\|\s*`((?:outbox|inbox\.relay|pull|retention|instances|logging|doctor)\.[A-Za-z]+|maxPayloadBytes|attemptHistory|workers)`\s*\|([^|]*)\|(.*)\|\s*$/.exec(
        line,
      ),
    )
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({ document, path: match[1], defaultCell: match[2].trim(), meaning: match[3] })),
);

describe('options: the table and the docs agree', () => {
  it('reads the configuration tables (the checks below are not vacuous)', () => {
    assert.ok(rows.length > 40, `found ${rows.length} option rows`);
    assert.ok(rows.some((row) => row.document === 'README.md'));
  });

  it('every documented option exists', () => {
    assert.deepEqual(
      rows.filter((row) => specOf(row.path) === undefined).map((row) => `${row.document}: ${row.path}`),
      [],
    );
  });

  it('every documented default is the table’s', () => {
    const wrong = rows.flatMap((row) => {
      const documented = specOf(row.path)?.docs;
      if (!documented || !row.defaultCell.startsWith('`')) return [];
      return row.defaultCell.startsWith(documented)
        ? []
        : [`${row.document}: ${row.path} shows ${row.defaultCell}, the table ${documented}`];
    });
    assert.deepEqual(wrong, []);
  });

  it('a deprecated option is called deprecated, and says what replaces it', () => {
    const silent = rows.filter((row) => {
      const spec = specOf(row.path);
      return spec?.deprecatedFor !== undefined && !(/deprecated/i.test(row.meaning) && row.meaning.includes(spec.deprecatedFor));
    });
    assert.deepEqual(
      silent.map((row) => `${row.document}: ${row.path}`),
      [],
    );
  });

  it('every option with a documented default appears in some table', () => {
    const documented = new Set(rows.map((row) => row.path));
    const groups: [string, Record<string, OptionSpec>][] = [
      ['outbox.', OUTBOX_OPTIONS],
      ['inbox.relay.', RELAY_OPTIONS],
      ['pull.', PULL_OPTIONS],
      ['retention.', RETENTION_OPTIONS],
      ['instances.', INSTANCES_OPTIONS],
      ['logging.', LOGGING_OPTIONS],
      ['doctor.', DOCTOR_OPTIONS],
      ['', TOP_LEVEL_OPTIONS],
    ];
    const missing = groups.flatMap(([prefix, table]) =>
      Object.entries(table)
        .filter(([key, spec]) => spec.docs !== undefined && !documented.has(`${prefix}${key}`))
        .map(([key]) => `${prefix}${key}`),
    );
    assert.deepEqual(missing, []);
  });
});
