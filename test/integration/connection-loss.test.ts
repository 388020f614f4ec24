import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import type { Dialect } from '../../lib/dialects/dialect';
import { TransactionLostError, TransactionRequiredError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import type { InboxMessage } from '../../lib/inbox/inbox.types';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import { QUEUEBOX_DIALECT } from '../../lib/queuebox.constants';
import { createTestApp, type TestApp } from '../support/app';
import { createTestDatabase, type TestDatabase } from '../support/database';

/** What the handler does after its business write; set per test. */
let afterWrite: (manager: EntityManager) => Promise<void> = async () => undefined;

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { leaseMs: 10_000, maxAttempts: 5, backoff: { initialMs: 1, maxMs: 1, jitter: false } })
  async handle(message: InboxMessage, { manager }: PullContext) {
    await manager.query('INSERT INTO ledger (idempotency_key) VALUES ($1)', [message.idempotencyKey]);
    await afterWrite(manager);
  }
}

describe('statements given an EntityManager join its transaction or fail (issue 13, items 1 and 14)', () => {
  let db: TestDatabase;
  let t: TestApp;
  let dataSource: DataSource;

  before(async () => {
    db = await createTestDatabase();
    await db.query('CREATE TABLE ledger (id serial PRIMARY KEY, idempotency_key text)');
    t = await createTestApp(db.url, { workers: false, pull: { sources: ['payments'] } }, { providers: [LedgerHandler] });
    dataSource = t.app.get<DataSource>(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
    await db?.drop();
  });
  beforeEach(async () => {
    await db.query('TRUNCATE queuebox_outbox, queuebox_inbox, ledger');
    afterWrite = async () => undefined;
  });

  /**
   * Terminates the backend of `manager`'s connection from another session while the transaction
   * sits idle, and waits until the driver has seen its connection end (TypeORM then releases the
   * query runner).
   */
  async function terminateBackendOf(manager: EntityManager): Promise<void> {
    const [{ pid }] = await manager.query('SELECT pg_backend_pid() AS pid');
    const client = (manager.queryRunner as unknown as { databaseConnection: NodeJS.EventEmitter }).databaseConnection;
    const ended = new Promise((resolve) => client.once('end', resolve));
    const [{ terminated }] = await db.query<{ terminated: boolean }>('SELECT pg_terminate_backend($1) AS terminated', [pid]);
    assert.equal(terminated, true);
    await ended;
  }

  /** Runs `work` in a transaction whose connection is terminated first; returns what the transaction threw. */
  async function inDeadTransaction(work: (manager: EntityManager) => Promise<unknown>): Promise<unknown> {
    let workError: unknown;
    const outcome = await dataSource
      .transaction(async (manager) => {
        await terminateBackendOf(manager);
        try {
          await work(manager);
        } catch (error) {
          workError = error;
          throw error;
        }
      })
      .then(
        () => 'committed',
        (error: unknown) => error,
      );
    assert.notEqual(outcome, 'committed');
    return workError;
  }

  it('enqueue(manager) on a transaction whose connection died throws TransactionLostError and stores nothing', async () => {
    const error = await inDeadTransaction((manager) =>
      t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: { n: 1 } }),
    );
    assert.ok(error instanceof TransactionLostError, `got ${String(error)}`);
    assert.equal(error.code, 'QUEUEBOX_TRANSACTION_LOST');
    assert.deepEqual(await db.query('SELECT id FROM queuebox_outbox'), [], 'no outbox row committed on its own');
  });

  it('the dialect never runs a statement meant for a dead transaction on the pool', async () => {
    const dialect = t.app.get<Dialect>(QUEUEBOX_DIALECT);
    const row = {
      messageId: '6f1c0d4e-7d55-4a8c-9d59-0b6f4c1c2a10',
      destination: 'billing',
      key: null,
      payloadJson: '{}',
      headersJson: '{}',
      availableAt: null,
    };
    const error = await inDeadTransaction((manager) => dialect.outboxInsert({ manager, rows: [row] }));
    assert.ok(error instanceof TransactionLostError, `got ${String(error)}`);
    const inbox = { source: 'payments', idempotencyKey: 'k1', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    const inboxError = await inDeadTransaction((manager) => dialect.inboxInsertIfAbsent({ row: inbox, manager }));
    assert.ok(inboxError instanceof TransactionLostError, `got ${String(inboxError)}`);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_outbox'), []);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), []);
  });

  it('receive(message, manager) on a transaction whose connection died throws TransactionLostError and stores nothing', async () => {
    const error = await inDeadTransaction((manager) =>
      t.get(InboxService).receive({ source: 'payments', idempotencyKey: 'p1', payload: { n: 1 } }, manager),
    );
    assert.ok(error instanceof TransactionLostError, `got ${String(error)}`);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), [], 'no inbox row committed on its own');
  });

  it('a pull handler whose connection dies after its business write does not end processed; the retry processes it once', async () => {
    await t.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'l1', payload: {} });
    afterWrite = terminateBackendOf;
    assert.equal(await t.get(PullWorker).runOnce('ledger'), 1);
    assert.deepEqual(await db.query('SELECT idempotency_key FROM ledger'), [], 'the business write died with its connection');
    const [row] = await db.query<{ state: string; last_error: string }>('SELECT state, last_error FROM queuebox_inbox');
    assert.equal(row.state, 'pending', 'not processed: the completion did not commit on a pooled connection');
    assert.match(row.last_error, /TransactionLostError/);
    afterWrite = async () => undefined;
    assert.equal(await t.get(PullWorker).runOnce('ledger'), 1);
    assert.deepEqual(await db.query('SELECT idempotency_key FROM ledger'), [{ idempotency_key: 'l1' }]);
    assert.deepEqual(await db.query('SELECT state, attempts FROM queuebox_inbox'), [{ state: 'processed', attempts: 2 }]);
  });

  it('enqueue(dataSource.manager) outside a transaction throws TransactionRequiredError and stores nothing', async () => {
    const outbox = t.get(OutboxService);
    await assert.rejects(
      outbox.enqueue(dataSource.manager, { destination: 'billing', payload: {} }),
      (error: unknown) => error instanceof TransactionRequiredError && error.code === 'QUEUEBOX_TRANSACTION_REQUIRED',
    );
    const runner = dataSource.createQueryRunner();
    try {
      await assert.rejects(outbox.enqueueMany(runner.manager, [{ destination: 'billing', payload: {} }]), TransactionRequiredError);
    } finally {
      await runner.release();
    }
    assert.deepEqual(await db.query('SELECT id FROM queuebox_outbox'), []);
  });

  it('allowAutocommit: a script may enqueue outside a transaction on purpose', async () => {
    const [result] = await t
      .get(OutboxService)
      .enqueueMany(dataSource.manager, [{ destination: 'billing', payload: { backfill: true } }], { allowAutocommit: true });
    assert.deepEqual(await db.query('SELECT id::text FROM queuebox_outbox'), [{ id: result.id }]);
  });

  it('receive(message, dataSource.manager) throws TransactionRequiredError; receive(message) alone stores it', async () => {
    const inbox = t.get(InboxService);
    await assert.rejects(
      inbox.receive({ source: 'payments', idempotencyKey: 'r1', payload: {} }, dataSource.manager),
      TransactionRequiredError,
    );
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), []);
    assert.equal((await inbox.receive({ source: 'payments', idempotencyKey: 'r1', payload: {} })).duplicate, false);
  });
});
