// `queuebox messages`, run as users run it: its own process, exit code, stdout and stderr, against
// a real PostgreSQL.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runQueueBoxCli } from '../support/cli';
import { testDatabases } from '../support/database';

const queuebox = (args: string[]) => runQueueBoxCli(args);

describe('queuebox messages', () => {
  const newDatabase = testDatabases();

  const seeded = async () => {
    const db = await newDatabase();
    const out = await db.query<{ id: string; message_id: string }>(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, headers, state, attempts, created_at, sent_at, last_error)
       VALUES (gen_random_uuid(), 'billing', 'order-123', '{"order":{"id":123}}', '{"x-tenant":"acme"}', 'sent', 1,
               '2026-12-01 10:00Z', '2026-12-01 10:00:01Z', NULL),
              (gen_random_uuid(), 'billing', 'order-124', '{"order":{"id":124}}', '{}', 'dead', 5, '2026-12-01 11:00Z', NULL, 'HTTP 503'),
              (gen_random_uuid(), 'crm', 'order-123', '{"order":{"id":123}}', '{}', 'pending', 0, '2026-12-01 12:00Z', NULL, NULL)
       RETURNING id::text, message_id::text`,
    );
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, state, attempts, received_at, processed_at)
      VALUES ('payments', 'evt-1', 'acct-1', '{"amount":5}', 'processed', 1, '2026-12-01 09:00Z', '2026-12-01 09:00:02Z')`);
    return { url: db.url, out };
  };

  it('finds rows of any state by id, key, destination, state, time and payload path; JSON and text; pages with --after', async () => {
    const { url, out } = await seeded();
    const [sent, dead, pending] = out;
    const json = async (...args: string[]) => {
      const run = await queuebox(['messages', '--url', url, '--json', ...args]);
      assert.equal(run.code, 0, run.stderr);
      const page = JSON.parse(run.stdout) as {
        rows: { id: string; payload?: unknown }[];
        next: string | null;
        plan: string;
        scannedUpTo: string | null;
      };
      return { ids: page.rows.map((r) => r.id), page };
    };
    assert.deepEqual((await json()).ids, [pending.id, dead.id, sent.id], 'every state, newest first');
    assert.deepEqual((await json('--id', sent.message_id)).ids, [sent.id]);
    assert.equal((await json('--id', sent.message_id)).page.plan, 'message-id');
    assert.deepEqual((await json('--key', 'order-123')).ids, [pending.id, sent.id]);
    assert.deepEqual((await json('--destination', 'billing')).ids, [dead.id, sent.id]);
    assert.deepEqual((await json('--state', 'dead')).ids, [dead.id]);
    assert.deepEqual((await json('--since', '2026-12-01T10:30:00Z', '--until', '2026-12-01T11:30:00Z')).ids, [dead.id]);
    assert.deepEqual((await json('--time', 'finished', '--since', '2026-12-01T10:00:00Z')).ids, [sent.id]);
    assert.deepEqual((await json('--path', 'order.id=123')).ids, [pending.id, sent.id]);
    assert.deepEqual((await json('--header', 'x-tenant=acme')).ids, [sent.id]);
    const withPayload = await json('--id', sent.message_id, '--payload');
    assert.deepEqual(withPayload.page.rows[0].payload, { order: { id: 123 } });
    const first = await json('--limit', '2');
    assert.deepEqual([first.ids, first.page.next], [[pending.id, dead.id], dead.id]);
    assert.deepEqual((await json('--limit', '2', '--after', dead.id)).ids, [sent.id]);
    assert.deepEqual((await json('--component', 'inbox', '--source', 'payments', '--id', 'evt-1')).page.plan, 'message-id');
    assert.equal((await json('--component', 'inbox', '--state', 'processed')).ids.length, 1);

    const text = await queuebox(['messages', '--url', url, '--destination', 'billing']);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /id\s+message id\s+destination\s+key\s+state\s+attempts\s+created \(UTC\)\s+sent \(UTC\)\s+last error/);
    assert.match(
      text.stdout,
      new RegExp(`${dead.id}\\s+${dead.message_id}\\s+billing\\s+order-124\\s+dead\\s+5\\s+2026-12-01T11:00:00Z\\s+-\\s+HTTP 503`),
    );
    // The CLI does not know the app's outbox.sentRows: an empty search a deleted sent row would explain says so.
    const noneSent = await queuebox(['messages', '--url', url, '--state', 'sent', '--key', 'nope']);
    assert.equal(noneSent.code, 0, noneSent.stderr);
    assert.match(noneSent.stdout, /No outbox messages match\.\nAn application with outbox\.sentRows: 'delete' keeps no sent rows/);
    const unknownId = await queuebox(['messages', '--url', url, '--id', '00000000-0000-4000-8000-000000000000']);
    assert.match(unknownId.stdout, /keeps no sent rows/);
    const noneDead = await queuebox(['messages', '--url', url, '--state', 'dead', '--key', 'nope']);
    assert.doesNotMatch(noneDead.stdout, /sentRows/, 'no hint where a deleted sent row cannot be the reason');
    const scanned = await queuebox(['messages', '--url', url, '--key', 'nope', '--scan', '2']);
    assert.equal(scanned.code, 0, scanned.stderr);
    assert.match(
      scanned.stdout,
      /No outbox messages match\.\nScanned up to row \d+ \(the bounded scan stopped there; older rows were not looked at\): continue with --after \d+\./,
    );
  });

  it('answers bad arguments with exit 2 before touching the database', async () => {
    const url = 'postgres://nobody@127.0.0.1:1/none';
    for (const [args, message] of [
      [['--path', 'order..id=1'], /"path\.path" must be \{ path, equals, in\? \}/],
      [['--path', 'noequals'], /--path "noequals" must be <path>=<value>/],
      [['--path', "a');DROP TABLE x;--=1"], /"path\.path"/],
      [['--state', 'processed'], /"state" must be one of pending, processing, sent, dead for the outbox/],
      [['--id', 'not-a-uuid'], /"messageId" must be a UUID/],
      [['--component', 'inbox', '--destination', 'x'], /--destination applies to the outbox: use --source/],
      [['--scan', '0'], /--scan "0" must be an integer from 1 to 1000000/],
      [['--after', 'abc'], /--after "abc" must be a row id/],
      [['--since', 'yesterday'], /--since "yesterday" is not a time/],
    ] as const) {
      const run = await queuebox(['messages', '--url', url, ...args]);
      assert.equal(run.code, 2, `${args.join(' ')}: ${run.stdout}${run.stderr}`);
      assert.match(run.stderr, message);
    }
  });
});
