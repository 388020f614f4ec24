import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { resolveDashboardOptions } from '../../lib/dashboard/dashboard.options';
import { QueueBoxConfigError, QueueBoxValidationError, TransactionRequiredError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { resolveReceiverOptions } from '../../lib/inbox/receiver/inbox-receiver.options';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// I10 against objects that answer differently each time they are read: QueueBox reads each field
// once, validates that copy and stores only it, so nothing unvalidated reaches the database and
// aborts the caller's transaction.

const ID = '5d1c7c7e-2f4b-4c55-9d3c-0a8c1b2e3f40';

/** An object whose `field` answers `first` on the first read and `later` on every read after it. */
function changing<T extends object>(base: T, field: string, first: unknown, later: unknown): T & { reads: () => number } {
  let reads = 0;
  Object.defineProperty(base, field, {
    enumerable: true,
    get: () => (++reads === 1 ? first : later),
  });
  // Not enumerable: `reads` is no field of the message (nor a header).
  Object.defineProperty(base, 'reads', { value: () => reads, configurable: true });
  return base as T & { reads: () => number };
}

class LyingDate extends Date {
  override getTime(): number {
    return Date.UTC(2030, 0, 1);
  }
}

describeWithDatabase('hostile message objects and options (I10)', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let dataSource: DataSource;
  let outbox: OutboxService;
  let inbox: InboxService;

  before(async () => {
    t = await createTestApp(db.url, {
      workers: false,
      outbox: { publisher: new RecordingPublisher() },
      inbox: { relay: { routes: { orders: () => [] } } },
    });
    dataSource = t.app.get(getDataSourceToken());
    outbox = t.get(OutboxService);
    inbox = t.get(InboxService);
  });
  after(async () => {
    await t?.app.close();
  });

  /** Runs `work` in a transaction, then a statement of its own there: it fails if PostgreSQL aborted the transaction. */
  const inOneTransaction = (work: (manager: EntityManager) => Promise<void>) =>
    dataSource.transaction(async (manager) => {
      await work(manager);
      assert.deepEqual(await manager.query('SELECT 1 AS still_usable'), [{ still_usable: 1 }]);
    });

  const invalid = (field: string, text: RegExp) => (error: unknown) => {
    assert.ok(error instanceof QueueBoxValidationError, `expected QueueBoxValidationError, got ${String(error)}`);
    assert.equal(error.field, field);
    assert.match(error.message, text);
    return true;
  };

  it('a messageId getter is read once: the id validated is the id stored', async () => {
    const message = changing({ destination: 'billing', payload: 1 }, 'messageId', ID, 'not-a-uuid');
    await inOneTransaction(async (manager) => {
      const result = await outbox.enqueue(manager, message as never);
      assert.equal(result.messageId, ID);
    });
    assert.equal(message.reads(), 1);
    assert.deepEqual(await db.query('SELECT message_id::text FROM queuebox_outbox'), [{ message_id: ID }]);
  });

  it('every other field is read once too: destination, key, payload, headers and their values', async () => {
    const message = changing({ payload: 1 }, 'destination', 'billing', '');
    const keyed = changing(message, 'key', 'order-1', 'k\u0000');
    const headers = changing({}, 'x-a', 'ok', 'bad\r\nx-injected: 1');
    const withHeaders = changing(keyed, 'headers', headers, { 'x-a': '\u0000' });
    await inOneTransaction(async (manager) => {
      await outbox.enqueue(manager, withHeaders as never);
    });
    assert.equal(headers.reads(), 1);
    const [row] = await db.query<{ destination: string; key: string; headers: Record<string, string> }>(
      'SELECT destination, "key", headers FROM queuebox_outbox',
    );
    assert.equal(row.destination, 'billing');
    assert.equal(row.key, 'order-1');
    assert.deepEqual(row.headers, { 'x-a': 'ok' });
  });

  it('availableAt must be a real Date, checked through the intrinsic getTime: a lying or fake Date is a typed error', async () => {
    const cases: [unknown, RegExp][] = [
      [new LyingDate(Number.NaN), /must be a valid Date/],
      [new LyingDate(Date.UTC(20_000, 0, 1)), /years 1 and 9999/],
      [Object.create(Date.prototype), /must be a valid Date/],
      [new Proxy(new Date(), {}), /must be a valid Date/],
      [{ getTime: () => Date.now() }, /must be a valid Date/],
    ];
    await inOneTransaction(async (manager) => {
      for (const [availableAt, text] of cases) {
        await assert.rejects(
          outbox.enqueue(manager, { destination: 'billing', payload: 1, availableAt } as never),
          invalid('availableAt', text),
        );
      }
      // A subclass that tells the truth is a Date like any other; what is stored is a plain copy.
      const honest = new (class extends Date {})(Date.UTC(2031, 5, 1));
      await outbox.enqueue(manager, { destination: 'billing', payload: 1, availableAt: honest });
    });
    const rows = await db.query<{ available_at: Date }>('SELECT available_at FROM queuebox_outbox');
    assert.deepEqual(
      rows.map((r) => r.available_at.toISOString()),
      ['2031-06-01T00:00:00.000Z'],
    );
  });

  it('receive reads each field and header once, and stores what it validated', async () => {
    const headers = changing({}, 'x-trace', 't1', 'x\u0000');
    const message = changing({ source: 'orders', payload: { n: 1 }, headers }, 'idempotencyKey', 'evt-1', '\u0000');
    await inOneTransaction(async (manager) => {
      assert.equal((await inbox.receive(message as never, manager)).duplicate, false);
    });
    assert.equal(message.reads(), 1);
    assert.equal(headers.reads(), 1);
    const rows = await db.query<{ idempotency_key: string; headers: Record<string, string> }>(
      'SELECT idempotency_key, headers FROM queuebox_inbox',
    );
    assert.deepEqual(rows, [{ idempotency_key: 'evt-1', headers: { 'x-trace': 't1' } }]);
  });

  it('receive(msg, null) and other non-managers get the TransactionRequiredError receive(msg, {}) gets, and store nothing', async () => {
    const message = { source: 'orders', idempotencyKey: 'evt-2', payload: 1 };
    for (const manager of [{}, null, 5, 'manager', true]) {
      await assert.rejects(inbox.receive(message, manager as never), TransactionRequiredError, `receive(msg, ${String(manager)})`);
    }
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), []);
  });

  it('enqueueMany(manager, messages, null) is no TypeError: it needs the transaction like any options object without allowAutocommit', async () => {
    await assert.rejects(
      outbox.enqueueMany(dataSource.manager, [{ destination: 'billing', payload: 1 }], null as never),
      TransactionRequiredError,
    );
    await inOneTransaction(async (manager) => {
      assert.equal((await outbox.enqueueMany(manager, [{ destination: 'billing', payload: 1 }], null as never)).length, 1);
    });
  });

  it('an own __proto__ key in forRoot options (as JSON.parse makes) is reported as an unknown option, not dropped', async () => {
    /** The QueueBoxConfigError start-up fails with (an app that starts is closed, then reported). */
    const startUpError = async (options: object) => {
      try {
        const app = await createTestApp(db.url, options as never);
        await app.app.close();
      } catch (error) {
        return error;
      }
      assert.fail('the app started');
    };
    const options = JSON.parse('{"__proto__": {"workers": false}, "workers": {"outbox": false}}');
    assert.ok(Object.hasOwn(options, '__proto__'));
    const error = await startUpError({ ...options, inbox: { relay: { routes: { orders: () => [] } } } });
    assert.ok(error instanceof QueueBoxConfigError, String(error));
    assert.equal(error.option, '__proto__');
    assert.match(error.message, /^Unknown QueueBox option "__proto__"/);
    const nested = await startUpError(JSON.parse('{"workers": false, "retention": {"__proto__": {"enabled": true}}}'));
    assert.ok(nested instanceof QueueBoxConfigError && nested.option === 'retention.__proto__', String(nested));
    // The other options objects QueueBox reads keys of check their own keys the same way.
    const secret = 'a-secret-of-at-least-16';
    assert.throws(
      () => resolveReceiverOptions(JSON.parse(`{"__proto__": {"guards": []}, "secret": "${secret}"}`)),
      (e: unknown) => e instanceof QueueBoxConfigError && e.option === 'receiver.__proto__',
    );
    assert.throws(
      () => resolveDashboardOptions(JSON.parse('{"__proto__": {"public": true}, "public": true}')),
      (e: unknown) => e instanceof QueueBoxConfigError && e.option === 'dashboard.__proto__',
    );
  });
});
