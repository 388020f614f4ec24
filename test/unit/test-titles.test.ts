// Tests are titled by the behaviour they pin, not by the issue or review that asked for it: a reader
// looking for "how are keys compared" should not need the project's history to find the test. This
// reads every test source under test/ and fails on a describe/it/test/suite title that carries an
// issue or review reference. The rule is red-checked on titles that break it, as the architecture
// test does with its rules.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';

const root = join(__dirname, '..', '..', '..');
const testDir = join(root, 'test');

function sourcesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return sourcesUnder(path);
    return /\.(ts|mts|cts|mjs|cjs|js)$/.test(entry) ? [path] : [];
  });
}

/** A title given as a string literal (a template's text included), with where it stands. */
interface Title {
  at: string;
  title: string;
}

/**
 * The literal titles in `text` of `describe`, `it`, `test` and `suite` calls (`.only`, `.skip`,
 * `.todo` too), and of the helpers that pass theirs on to `describe` (`describeWithDatabase`,
 * `conformanceSuite`: a name that starts with `describe` or ends with `Suite`).
 */
function titlesIn(file: string, text: string): Title[] {
  const calls = /\b(?:describe\w*|it|test|suite|\w+Suite)(?:\.(?:only|skip|todo))?\(\s*(['"`])((?:\\.|(?!\1)[\s\S])*)\1/g;
  return [...text.matchAll(calls)].map((match) => ({
    at: `${file}:${text.slice(0, match.index).split('\n').length}`,
    title: match[2],
  }));
}

/** What marks a title as named after the history: an issue, an issue's item or part, a review finding. */
const HISTORY = [
  /\bissues?\s*#?\d+/i, // issue 14, issues 13 and 24
  /(?:^|[\s(])#\d+\b/, // #35
  /\(\s*(?:items?|parts?)\s+\d+[^)]*\)/i, // (item 3), (items 1 and 3), (part 2)
  /\breview\b[^)]*\b[A-Z]\d{1,2}\b/, // (SQL Server review M1)
  /\(\s*[BHLMN]\d{1,2}(?:\s*[,;]\s*[BHLMN]\d{1,2})*\s*\)/, // (M3), (N1, M5): a review's finding codes
];

const namesHistory = (title: string) => HISTORY.some((pattern) => pattern.test(title));

describe('test titles', () => {
  it('no describe or it title under test/, nor one a helper passes on, carries an issue or review reference', () => {
    const titles = sourcesUnder(testDir).flatMap((path) =>
      titlesIn(relative(root, path).replaceAll('\\', '/'), readFileSync(path, 'utf8')),
    );
    assert.ok(titles.length > 500, `read ${titles.length} titles: the extraction found too few to mean anything`);
    const offending = titles.filter(({ title }) => namesHistory(title)).map(({ at, title }) => `${at}: ${title}`);
    assert.deepEqual(offending, [], `Title these by the behaviour they pin, not by the issue:\n${offending.join('\n')}`);
  });

  it('red-check: the rule finds each kind of reference, in every way a title is written, and passes behaviour titles', () => {
    // Built by `call`, so that this file's own text holds no such title for the first test to find.
    const call = (fn: string, title: string) => `${fn}(${title}, () => {});`;
    const historic = [
      call('describe', "'SQL Server dialect: keys compared exactly (issue 14, item 1)'"),
      call('it', '"counts what retention holds (issue 26 N7)"'),
      // biome-ignore lint/suspicious/noTemplateCurlyInString: source text holding a template-literal title
      call('it', '`${direction}: refuses first (issues 13 and 24)`'),
      call('it.skip', "'a claim lost its lease (items 1 and 3)'"),
      call('describe', "\n  'several databases, two replicas, one killed (part 2)',\n"),
      call('test', "'a sweep never delays the heartbeat (SQL Server review M1)'"),
      call('it', "'claims keep what they found (N1, M5)'"),
      call('suite', "'the receive path, see #35'"),
      call('conformanceSuite', "'payload text (issue 26)'"),
      call('describeWithDatabase', "'retention on PostgreSQL (issue 38 L5)', { truncate: ['queuebox_outbox'] }"),
    ];
    for (const source of historic) {
      const found = titlesIn('fixture.ts', source);
      assert.equal(found.length, 1, source);
      assert.ok(namesHistory(found[0].title), `not flagged: ${found[0].title}`);
    }
    const behaviour = [
      call('it', "'refuses pool.max below the handlers’ concurrency + one per claim loop + one for renewals'"),
      call('it', "'every claim bounds its row-lock waits (200 ms, 0, 3000 ms) and resets nothing'"),
      call('it', "'the walk visits at most 1000 keys, stops at the limit'"),
      call('describe', "'SQL Server migration 004 on a live database'"),
      call('it', "'a 409 or 429 with Retry-After waits; SHA2_256 names the cursor'"),
    ];
    for (const source of behaviour) {
      const [found] = titlesIn('fixture.ts', source);
      assert.equal(namesHistory(found.title), false, `flagged: ${found.title}`);
    }
  });
});
