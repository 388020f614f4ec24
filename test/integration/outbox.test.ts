import assert from 'node:assert/strict';
import { after, beforeEach, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { DuplicateMessageIdError, PermanentPublishError, QueueBoxValidationError } from '../../lib/errors/queuebox.errors';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { ABORT_GRACE_MS, OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';

describeWithDatabase('OutboxService and OutboxPoller on PostgreSQL', (db) => {
  let publisher: RecordingPublisher;
  let t: TestApp;
  let outbox: OutboxService;
  let poller: OutboxPoller;
  let dataSource: DataSource;

  // Each test gets a fresh app; the poller loop runs only where a test starts it.
  beforeEach(async () => {
    await t?.app.close();
    await db.query('TRUNCATE queuebox_outbox');
    publisher = new RecordingPublisher();
    const maxPayloadBytes = 1000;
    t = await createTestApp(db.url, {
      maxPayloadBytes,
      outbox: {
        publishers: { billing: publisher, audit: publisher },
        pollIntervalMs: 20,
        claimTimeoutMs: 2000,
        // Above the renewal interval (a third of the lease), so the I3 test sees the renewal lose the claim first.
        publishTimeout: 1500,
        maxAttempts: 3,
        backoff: { initialMs: 10, maxMs: 10, jitter: false },
      },
      workers: false,
    });
    outbox = t.get(OutboxService);
    poller = t.get(OutboxPoller);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
  });

  const states = async () =>
    await db.query<{ message_id: string; state: string; attempts: number; last_error: string | null }>(
      'SELECT message_id, state, attempts, last_error FROM queuebox_outbox ORDER BY id',
    );

  it('enqueueMany stores messages in the caller transaction with one statement, in order', async () => {
    let statements = 0;
    const results = await dataSource.transaction(async (manager) => {
      const query = manager.queryRunner!.query.bind(manager.queryRunner);
      manager.queryRunner!.query = ((...args: Parameters<typeof query>) => {
        statements++;
        return query(...args);
      }) as typeof query;
      const results = await outbox.enqueueMany(manager, [
        { destination: 'billing', key: 'a', payload: { n: 1 }, headers: { 'x-tenant': 't1' } },
        { destination: 'billing', payload: [1, 2, 3], messageId: '6f1c1c39-5bd3-4a53-9d7e-2a0a1f1d9a11' },
        { destination: 'audit', key: 'a', payload: 'text', availableAt: new Date(Date.now() + 3600_000) },
      ]);
      manager.queryRunner!.query = query;
      return results;
    });
    assert.equal(statements, 1);
    assert.equal(results.length, 3);
    assert.equal(results[1].messageId, '6f1c1c39-5bd3-4a53-9d7e-2a0a1f1d9a11');
    assert.ok(BigInt(results[0].id) < BigInt(results[1].id));
    const rows = await db.query<{ destination: string; key: string | null; payload: unknown; headers: unknown; state: string }>(
      'SELECT destination, "key", payload, headers, state FROM queuebox_outbox ORDER BY id',
    );
    assert.deepEqual(rows, [
      { destination: 'billing', key: 'a', payload: { n: 1 }, headers: { 'x-tenant': 't1' }, state: 'pending' },
      { destination: 'billing', key: null, payload: [1, 2, 3], headers: {}, state: 'pending' },
      { destination: 'audit', key: 'a', payload: 'text', headers: {}, state: 'pending' },
    ]);
  });

  it('I2: a message enqueued in a transaction that rolls back is never published', async () => {
    await assert.rejects(
      dataSource.transaction(async (manager) => {
        await outbox.enqueue(manager, { destination: 'billing', payload: { order: 'rolled-back' } });
        throw new Error('business rule failed');
      }),
      /business rule failed/,
    );
    await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'billing', payload: { order: 'committed' } }));
    while ((await poller.runOnce()) > 0);
    assert.deepEqual(
      publisher.calls.map((c) => c.message.payload),
      [{ order: 'committed' }],
    );
    assert.equal((await states()).length, 1);
  });

  it('I10: invalid messages fail with a typed error naming the field, and store nothing', async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const cases: [unknown, string, RegExp][] = [
      [{ destination: '', payload: 1 }, 'destination', /non-empty string/],
      [{ destination: 'billing', key: 7, payload: 1 }, 'key', /non-empty string/],
      [{ destination: 'billing', payload: 1, messageId: 'not-a-uuid' }, 'messageId', /UUID/],
      [{ destination: 'billing', payload: 1, headers: { n: 1 } }, 'headers', /string values/],
      [{ destination: 'billing', payload: 1, availableAt: new Date('x') }, 'availableAt', /valid Date/],
      [{ destination: 'billing', payload: { n: 10n } }, 'payload', /cannot be stored as JSON/],
      [{ destination: 'billing', payload: cyclic }, 'payload', /cannot be stored as JSON/],
      [{ destination: 'billing', payload: undefined }, 'payload', /undefined/],
      [{ destination: 'billing', payload: 'a\u0000b' }, 'payload', /NUL/],
      [{ destination: 'billing', payload: 'x'.repeat(2000) }, 'payload', /above the limit of 1000/],
      // Deeper than PostgreSQL's jsonb parser goes with its default stack (and Node 26's JSON.stringify does).
      [
        { destination: 'billing', payload: JSON.parse(`${'['.repeat(1001)}${']'.repeat(1001)}`) },
        'payload',
        /nests deeper than 1000 levels/,
      ],
      // Characters PostgreSQL cannot store, in every text field (issue 13 item 8): refused before any SQL.
      [{ destination: 'bill\u0000ing', payload: 1 }, 'destination', /NUL character/],
      [{ destination: 'billing\ud800', payload: 1 }, 'destination', /lone UTF-16 surrogate/],
      [{ destination: 'billing', key: 'k\u0000', payload: 1 }, 'key', /NUL character/],
      [{ destination: 'billing', key: '\udc00k', payload: 1 }, 'key', /lone UTF-16 surrogate/],
      [{ destination: 'billing', payload: { text: 'half \ud83d' } }, 'payload', /lone UTF-16 surrogate/],
      [{ destination: 'billing', payload: { 'k\udfff': 1 } }, 'payload', /lone UTF-16 surrogate/],
      [{ destination: 'billing', payload: 1, headers: { 'x-a': 'v\u0000' } }, 'headers', /NUL character/],
      [{ destination: 'billing', payload: 1, headers: { 'x-\ud800': 'v' } }, 'headers', /lone UTF-16 surrogate/],
      // Headers that could never be sent (issue 13 item 9).
      [{ destination: 'billing', payload: 1, headers: { 'x-a': 'v\r\nx-injected: 1' } }, 'headers', /line break/],
      [{ destination: 'billing', payload: 1, headers: { 'x a': 'v' } }, 'headers', /not a valid HTTP header name/],
      [{ destination: 'billing', payload: 1, headers: { '': 'v' } }, 'headers', /not a valid HTTP header name/],
      [{ destination: 'billing', payload: 1, headers: { 'x-big': 'x'.repeat(20_000) } }, 'headers', /above the limit of 16384/],
      [{ destination: 'billing', payload: 1, availableAt: new Date('+275760-01-01T00:00:00Z') }, 'availableAt', /years 1 and 9999/],
      [{ destination: 'billing', payload: 1, availableAt: new Date('-000001-01-01T00:00:00Z') }, 'availableAt', /years 1 and 9999/],
    ];
    await dataSource.transaction(async (manager) => {
      await outbox.enqueue(manager, { destination: 'billing', payload: { kept: true } });
      for (const [message, field, text] of cases) {
        const which = `the case of ${field} ${text}`;
        await assert.rejects(
          outbox.enqueue(manager, message as never),
          (error: unknown) => {
            assert.ok(error instanceof QueueBoxValidationError, String(error));
            assert.equal(error.field, field);
            assert.match(error.message, text);
            return true;
          },
          `${which} was accepted`,
        );
      }
      // The transaction is still usable: validation happens before any SQL.
      await outbox.enqueue(manager, { destination: 'billing', payload: { kept: 2 } });
    });
    assert.equal((await states()).length, 2);
    await assert.rejects(outbox.enqueue(undefined as never, { destination: 'b', payload: 1 }), /needs the EntityManager/);
  });

  it('stores what validation lets through: paired surrogates, escaped backslashes, the edges of the time range', async () => {
    const edges = [new Date('0001-01-01T00:00:00Z'), new Date('9999-12-31T23:59:59.999Z')];
    const payload = { emoji: '\ud83d\ude00', text: 'a literal \\u0000 is no NUL' };
    await dataSource.transaction(async (manager) => {
      for (const availableAt of edges) await outbox.enqueue(manager, { destination: 'billing', payload, availableAt });
    });
    const rows = await db.query<{ payload: unknown; available_at: Date }>('SELECT payload, available_at FROM queuebox_outbox ORDER BY id');
    assert.deepEqual(
      rows.map((r) => r.payload),
      [payload, payload],
    );
    assert.deepEqual(
      rows.map((r) => r.available_at.getTime()),
      edges.map((d) => d.getTime()),
    );
  });

  it('a messageId is stored and returned in lower case; a taken one fails with DuplicateMessageIdError', async () => {
    const upper = '9B2F4C1E-AAAA-4000-8000-00000000000A';
    const result = await dataSource.transaction((manager) =>
      outbox.enqueue(manager, { destination: 'billing', payload: 1, messageId: upper }),
    );
    const [row] = await db.query<{ id: string; message_id: string }>('SELECT id::text, message_id::text FROM queuebox_outbox');
    assert.deepEqual(
      result,
      { id: row.id, messageId: upper.toLowerCase(), duplicate: false },
      'the id and message id returned are the ones stored',
    );
    assert.equal(row.message_id, upper.toLowerCase());
    // Twice in one call: refused before any SQL, the transaction goes on.
    const again = '0c8d6e10-0000-4000-8000-000000000001';
    await dataSource.transaction(async (manager) => {
      await assert.rejects(
        outbox.enqueueMany(manager, [
          { destination: 'billing', payload: 1, messageId: again },
          { destination: 'billing', payload: 2, messageId: again.toUpperCase() },
        ]),
        (error: unknown) => error instanceof DuplicateMessageIdError && error.field === 'messageId' && error.messageId === again,
      );
      await outbox.enqueue(manager, { destination: 'billing', payload: 3 });
    });
    // Already stored: the database finds it; a typed error, not a QueryFailedError, and nothing of the call stored.
    await assert.rejects(
      dataSource.transaction((manager) =>
        outbox.enqueueMany(manager, [
          { destination: 'billing', payload: 4 },
          { destination: 'billing', payload: 5, messageId: upper },
        ]),
      ),
      (error: unknown) => {
        assert.ok(error instanceof DuplicateMessageIdError, String(error));
        assert.equal(error.code, 'QUEUEBOX_DUPLICATE_MESSAGE_ID');
        assert.equal(error.messageId, upper.toLowerCase());
        assert.match(error.message, /already exists/);
        return true;
      },
    );
    assert.equal((await states()).length, 2);
  });

  it('a publisher throwing a value that cannot be described still has its attempt recorded, not left processing', async () => {
    const revoked = Proxy.revocable({}, {});
    revoked.revoke();
    const messageGetterThrows = new Error('hidden');
    Object.defineProperty(messageGetterThrows, 'message', {
      get() {
        throw new Error('message getter');
      },
    });
    const nameGetterThrows = new Error('hidden');
    Object.defineProperty(nameGetterThrows, 'name', {
      get() {
        throw new Error('name getter');
      },
    });
    const hostile: Record<string, unknown> = {
      'no prototype': Object.create(null),
      'revoked proxy': revoked.proxy,
      'throwing toString': {
        toString() {
          throw new Error('toString');
        },
      },
      'throwing toPrimitive': {
        [Symbol.toPrimitive]() {
          throw new Error('toPrimitive');
        },
      },
      'throwing message getter': messageGetterThrows,
      'throwing name getter': nameGetterThrows,
    };
    publisher.behaviour = (message) => {
      throw hostile[(message.payload as { kind: string }).kind];
    };
    await dataSource.transaction((manager) =>
      outbox.enqueueMany(
        manager,
        Object.keys(hostile).map((kind) => ({ destination: 'billing', payload: { kind } })),
      ),
    );
    assert.equal(await poller.runOnce(), Object.keys(hostile).length);
    const rows = await db.query<{ kind: string; state: string; attempts: number; last_error: string | null }>(
      "SELECT payload->>'kind' AS kind, state, attempts, last_error FROM queuebox_outbox ORDER BY id",
    );
    for (const row of rows) {
      assert.equal(row.state, 'pending', `${row.kind}: retried, not stuck processing`);
      assert.equal(row.attempts, 1);
      assert.match(row.last_error ?? '', /cannot be described/, row.kind);
    }
  });

  it('a publish that ignores its timed-out signal keeps its concurrency slot until it really ends', async () => {
    const stuck = gate();
    let inFlight = 0;
    let mostInFlight = 0;
    const ignoring = new RecordingPublisher(async () => {
      inFlight++;
      mostInFlight = Math.max(mostInFlight, inFlight);
      try {
        await stuck.promise; // never looks at its signal
      } finally {
        inFlight--;
      }
    });
    const own = await createTestApp(db.url, {
      outbox: {
        publisher: ignoring,
        concurrency: 3,
        pollIntervalMs: 10,
        claimTimeoutMs: 3000,
        publishTimeout: 50,
        retry: { attempts: 100, backoff: { delay: 0, jitter: false } },
      },
      workers: false,
    });
    try {
      await own.app.get<DataSource>(getDataSourceToken()).transaction((manager) =>
        own.get(OutboxService).enqueueMany(
          manager,
          Array.from({ length: 12 }, (_, n) => ({ destination: 'billing', payload: { n } })),
        ),
      );
      const ownPoller = own.get(OutboxPoller);
      ownPoller.start();
      await ignoring.waitForCalls(3);
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE last_error LIKE '%publishTimeout%'")).length === 3,
        'the three timed-out attempts to be recorded as failed',
      );
      assert.equal(ignoring.calls.length, 3, 'no fourth publish started while three still run');
      assert.equal(ownPoller.overrunningCount, 3);
      await eventually(
        async () =>
          own.logger.lines.filter(
            (line) =>
              line.level === 'warn' &&
              line.message.includes(
                'was aborted by its timeout ("outbox.publishTimeout", 50 ms), but the publisher ignores its signal and is still running',
              ),
          ).length === 3,
        'a warning per publish that still runs after its timeout aborted it',
      );
      stuck.open();
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'sent'")).length === 12,
        'every message to be sent once the stuck publishes ended',
      );
      assert.equal(mostInFlight, 3, 'never more publishes running than "concurrency"');
      assert.equal(ownPoller.overrunningCount, 0);
    } finally {
      stuck.open();
      await own.app.close();
    }
  });

  it('a publish that honours its timed-out signal is not said to ignore it: the warning names only one still running after the abort', async () => {
    const honouring = new RecordingPublisher(
      (_message, signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
    );
    const own = await createTestApp(db.url, {
      outbox: { publisher: honouring, pollIntervalMs: 10, claimTimeoutMs: 3000, publishTimeout: 50, retry: { attempts: 1 } },
      workers: false,
    });
    try {
      await own.app.get<DataSource>(getDataSourceToken()).transaction((manager) =>
        own.get(OutboxService).enqueueMany(manager, [
          { destination: 'billing', payload: 1 },
          { destination: 'billing', payload: 2 },
        ]),
      );
      await own.get(OutboxPoller).runOnce();
      const rows = await db.query<{ state: string; last_error: string }>('SELECT state, last_error FROM queuebox_outbox');
      assert.ok(
        rows.length === 2 && rows.every((row) => row.state === 'dead' && row.last_error.includes('"outbox.publishTimeout" (50 ms)')),
        JSON.stringify(rows),
      );
      // Longer than the grace a publish has to end after its abort (ABORT_GRACE_MS).
      await new Promise((resolve) => setTimeout(resolve, ABORT_GRACE_MS + 200));
      const lines = JSON.stringify(own.logger.lines);
      assert.ok(!lines.includes('ignores its signal'), lines);
      assert.equal(own.get(OutboxPoller).overrunningCount, 0);
    } finally {
      await own.app.close();
    }
  });

  it('a publish that answers within ABORT_GRACE_MS of its timeout is taken at its word: published is sent, not retried', async () => {
    // A broker's answer that was on its way when the timeout aborted the publish.
    const answering = new RecordingPublisher(
      (_message, signal) => new Promise((resolve) => signal.addEventListener('abort', () => setTimeout(resolve, 20))),
    );
    const own = await createTestApp(db.url, {
      outbox: { publisher: answering, pollIntervalMs: 10, claimTimeoutMs: 3000, publishTimeout: 50 },
      workers: false,
    });
    try {
      await own.app
        .get<DataSource>(getDataSourceToken())
        .transaction((manager) => own.get(OutboxService).enqueue(manager, { destination: 'billing', payload: 1 }));
      await own.get(OutboxPoller).runOnce();
      const rows = await db.query<{ state: string; attempts: number }>('SELECT state, attempts FROM queuebox_outbox');
      assert.deepEqual(rows, [{ state: 'sent', attempts: 1 }]);
      assert.equal(answering.calls.length, 1, 'published once');
      assert.equal(own.get(OutboxPoller).overrunningCount, 0);
      assert.ok(!JSON.stringify(own.logger.lines).includes('ignores its signal'));
    } finally {
      await own.app.close();
    }
  });

  it('publishes, marks sent, and hands the publisher X-Message-Id and the headers', async () => {
    const { messageId } = await dataSource.transaction((manager) =>
      outbox.enqueue(manager, { destination: 'billing', key: 'k', payload: { total: 42 }, headers: { 'x-tenant': 'acme' } }),
    );
    poller.start();
    await publisher.waitForCalls(1);
    await eventually(async () => (await states())[0].state === 'sent', 'the row to be sent');
    const { message } = publisher.calls[0];
    assert.equal(message.messageId, messageId);
    assert.deepEqual(message.headers, { 'x-tenant': 'acme', 'X-Message-Id': messageId });
    assert.equal(message.attempt, 1);
    assert.equal(t.get(QueueBoxMetrics).value('queuebox_outbox_messages_published_total', { destination: 'billing' }), 1);
  });

  it('retries a failing publish with backoff, then dead-letters it after maxAttempts', async () => {
    publisher.behaviour = () => {
      throw new Error('broker unavailable');
    };
    await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'billing', payload: 1 }));
    poller.start();
    await eventually(async () => (await states())[0].state === 'dead', 'the row to be dead');
    const [row] = await states();
    assert.equal(row.attempts, 3);
    assert.match(row.last_error ?? '', /failed 3 attempt\(s\); last error: Error: broker unavailable/);
    assert.deepEqual(
      publisher.calls.map((c) => c.message.attempt),
      [1, 2, 3],
    );
    assert.ok(t.logger.has('warn', 'Retrying in 10 ms'));
  });

  it('dead-letters at once on PermanentPublishError, and for a route with no publisher', async () => {
    publisher.behaviour = () => {
      throw new PermanentPublishError('422 from billing: invalid invoice');
    };
    await dataSource.transaction((manager) =>
      outbox.enqueueMany(manager, [
        { destination: 'billing', payload: 1 },
        { destination: 'nowhere', payload: 2 },
      ]),
    );
    while ((await poller.runOnce()) > 0);
    const rows = await states();
    assert.deepEqual(
      rows.map((r) => [r.state, r.attempts]),
      [
        ['dead', 1],
        ['dead', 1],
      ],
    );
    assert.match(rows[0].last_error ?? '', /422 from billing/);
    assert.match(rows[1].last_error ?? '', /no publisher named "nowhere"/);
  });

  it('I4: a failing row blocks its key until it is dead, and later rows then go in order', async () => {
    publisher.behaviour = (message) => {
      if (message.payload === 'first') throw new Error('nope');
    };
    await dataSource.transaction((manager) =>
      outbox.enqueueMany(manager, [
        { destination: 'billing', key: 'k', payload: 'first' },
        { destination: 'billing', key: 'k', payload: 'second' },
        { destination: 'billing', key: 'k', payload: 'third' },
        { destination: 'billing', key: 'other', payload: 'independent' },
      ]),
    );
    poller.start();
    await eventually(async () => (await states()).every((r) => r.state === 'sent' || r.state === 'dead'), 'all rows finished');
    const order = publisher.calls.map((c) => c.message.payload).filter((p) => p !== 'independent');
    assert.deepEqual(order, ['first', 'first', 'first', 'second', 'third']);
  });

  it('I3: a publish whose claim is lost is aborted, logged and counted, and the row is left to the new owner', async () => {
    const held = gate();
    publisher.behaviour = (_message, signal) =>
      new Promise<void>((resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason));
        void held.promise.then(resolve);
      });
    const { id } = await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'billing', payload: 1 }));
    poller.start();
    await publisher.waitForCalls(1);
    // Another replica took the row over (as after an expired lease): the next renewal changes nothing.
    await db.query('UPDATE queuebox_outbox SET claim_token = gen_random_uuid() WHERE id = $1', [id]);
    const { signal } = publisher.calls[0];
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
    assert.equal(signal.reason.name, 'ClaimLostError');
    await eventually(async () => t.logger.has('warn', 'while publishing'), 'the lost claim to be logged');
    assert.equal(t.get(QueueBoxMetrics).value('queuebox_claims_lost_total', { component: 'outbox' }), 1);
    const [row] = await states();
    assert.equal(row.state, 'processing', 'the zombie did not retry or dead-letter the row');
    held.open();
  });

  it('logs an error when the mark sent loses the claim after a successful publish', async () => {
    const { id } = await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'billing', payload: 1 }));
    publisher.behaviour = async () => {
      // The lease expires and another owner claims the row while the publish is still running.
      await db.query("UPDATE queuebox_outbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1", [id]);
    };
    await poller.runOnce();
    assert.ok(t.logger.has('error', 'before marking it sent'));
    assert.equal(t.get(QueueBoxMetrics).value('queuebox_claims_lost_total', { component: 'outbox' }), 1);
  });
});
