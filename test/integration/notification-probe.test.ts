import assert from 'node:assert/strict';
import { after, it } from 'node:test';
import { Client } from 'pg';
import { notificationArrives } from '../../lib/dialects/postgres/postgres.listener';
import { describeWithDatabase, testDatabases } from '../support/database';

// The CLI doctor's LISTEN check (listen_unavailable): a notification on a channel of its own,
// sent from a second connection. Through a pooler in transaction mode the LISTEN session is handed
// back after the statement and the notification reaches no one; here the notifier connects to
// another database, where a notification likewise reaches no listener of this one.

describeWithDatabase('the notification probe of the CLI doctor (PostgreSQL)', (db) => {
  const newDatabase = testDatabases();
  const clients: Client[] = [];
  const connect = async (url: string) => {
    const client = new Client({ connectionString: url });
    await client.connect();
    clients.push(client);
    return client;
  };
  after(() => Promise.all(clients.map((client) => client.end())));

  it('arrives when both connections reach the same database, and leaves the listener listening to nothing', async () => {
    const listener = await connect(db.url);
    assert.equal(await notificationArrives(listener, await connect(db.url), 2000), true);
    const { rows } = await listener.query('SELECT count(*)::int AS n FROM pg_listening_channels()');
    assert.deepEqual(rows, [{ n: 0 }], 'UNLISTEN after the probe');
  });

  it('does not arrive when the notification goes to another session of no listener, within the timeout', async () => {
    const elsewhere = await newDatabase();
    const notifier = new Client({ connectionString: elsewhere.url });
    await notifier.connect();
    try {
      const startedAt = performance.now();
      assert.equal(await notificationArrives(await connect(db.url), notifier, 300), false);
      assert.ok(performance.now() - startedAt >= 290, 'waited for the timeout');
    } finally {
      await notifier.end(); // before its database is dropped
    }
  });
});
