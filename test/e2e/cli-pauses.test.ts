import assert from 'node:assert/strict';
import { it } from 'node:test';
import { runQueueBoxCli } from '../support/cli';
import { describeWithDatabase } from '../support/database';

// `queuebox pause`, `queuebox resume` and `queuebox pauses` (issue 40), run as users run the CLI:
// the compiled CLI of this build in its own process, its exit code, stdout and stderr.

const queuebox = (args: string[]) => runQueueBoxCli(args);

describeWithDatabase('queuebox pause, resume and pauses', { truncate: ['queuebox_outbox_pauses'] }, (db) => {
  it('pauses a destination and a source with who and why, lists them, and resumes them', async () => {
    const paused = await queuebox(['pause', '--url', db.url, '--destination', 'billing', '--reason', 'partner down', '--actor', 'alice']);
    assert.equal(paused.code, 0, paused.stderr);
    assert.match(paused.stdout, /Paused the destination "billing" of the outbox/);
    const again = await queuebox(['pause', '--url', db.url, '--destination', 'billing', '--json']);
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(JSON.parse(again.stdout), { component: 'outbox', name: 'billing', paused: false });
    const source = await queuebox(['pause', '--url', db.url, '--source', 'orders']);
    assert.equal(source.code, 0, source.stderr);

    const rows = await db.query<{ component: string; name: string; reason: string | null; paused_by: string }>(
      'SELECT component, name, reason, paused_by FROM queuebox_outbox_pauses ORDER BY component, name',
    );
    assert.deepEqual(
      rows.map((r) => [r.component, r.name, r.reason]),
      [
        ['inbox', 'orders', null],
        ['outbox', 'billing', 'partner down'],
      ],
    );
    assert.equal(rows[1].paused_by, 'alice');
    assert.match(rows[0].paused_by, /^cli:.+@.+$/, 'the default actor names the user and host');

    const list = await queuebox(['pauses', '--url', db.url]);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /destination +billing +alice +\d{4}-\d\d-\d\dT[\d:]+Z +partner down/);
    assert.match(list.stdout, /source +orders +cli:/);
    const json = JSON.parse((await queuebox(['pauses', '--url', db.url, '--json'])).stdout) as { name: string }[];
    assert.deepEqual(
      json.map((r) => r.name),
      ['orders', 'billing'],
    );

    const resumed = await queuebox(['resume', '--url', db.url, '--destination', 'billing']);
    assert.equal(resumed.code, 0, resumed.stderr);
    assert.match(resumed.stdout, /Resumed the destination "billing" of the outbox/);
    const notPaused = await queuebox(['resume', '--url', db.url, '--destination', 'billing', '--json']);
    assert.deepEqual(JSON.parse(notPaused.stdout), { component: 'outbox', name: 'billing', resumed: false });
    await queuebox(['resume', '--url', db.url, '--source', 'orders']);
    const none = await queuebox(['pauses', '--url', db.url]);
    assert.match(none.stdout, /Nothing is paused\./);
  });

  it('refuses a pause without a target, or with both, as a usage error (exit 2) that changes nothing', async () => {
    const missing = await queuebox(['pause', '--url', db.url]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /pause needs --destination <name> .* or --source <name>/);
    const both = await queuebox(['resume', '--url', db.url, '--destination', 'a', '--source', 'b']);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /resume takes --destination or --source, not both/);
    const empty = await queuebox(['pause', '--url', db.url, '--source', '']);
    assert.equal(empty.code, 2);
    assert.deepEqual(await db.query('SELECT 1 FROM queuebox_outbox_pauses'), []);
  });
});
