// Ambient transactions (issue 41, item 1): with @nestjs-cls/transactional and its TypeORM adapter,
// enqueue(message) and receive(message) without a manager join the active transaction of their
// QueueBox's DataSource, in every propagation mode the library offers; with none active enqueue
// refuses (TransactionRequiredError), receive stores on its own (as documented before); a
// transaction of another QueueBox's DataSource is refused (I12); a pull handler's transaction is
// the ambient one for the services it calls. A real Nest application on two PostgreSQL databases.
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsPluginTransactional, InjectTransactionHost, Propagation, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule } from 'nestjs-cls';
import { QueueBoxValidationError, TransactionRequiredError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { InjectOutbox } from '../../lib/module/queuebox.tokens';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { RecordingLogger } from '../support/app';
import { createTestDatabase, eventually, type TestDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

type Tx = TransactionHost<TransactionalAdapterTypeOrm>;

/** The application's own service: business rows through TransactionHost.tx, messages without a manager. */
@Injectable()
class Orders {
  constructor(
    @InjectTransactionHost() readonly tx: Tx,
    @InjectTransactionHost('ledgerTx') readonly ledgerTx: Tx,
    readonly outbox: OutboxService,
    @InjectOutbox('ledger') readonly ledgerOutbox: OutboxService,
    readonly inbox: InboxService,
  ) {}

  /** One order: its row and its message commit together, or neither does. */
  @Transactional()
  async place(id: string, fail = false): Promise<void> {
    await this.tx.tx.query('INSERT INTO orders (id) VALUES ($1)', [id]);
    await this.outbox.enqueue({ destination: 'shipping', key: id, payload: { id } });
    if (fail) throw new Error(`order ${id} failed`);
  }

  /** The ledger's own DataSource and QueueBox, through the host registered with connectionName 'ledgerTx'. */
  @Transactional('ledgerTx')
  async book(id: string): Promise<void> {
    await this.ledgerTx.tx.query('INSERT INTO entries (id) VALUES ($1)', [id]);
    await this.ledgerOutbox.enqueueMany([{ destination: 'accounting', payload: { id } }]);
  }

  /** The orders transaction is active, the ledger's is not: the ledger QueueBox must refuse it (I12). */
  @Transactional()
  async bookInOrdersTransaction(id: string): Promise<void> {
    await this.ledgerOutbox.enqueue({ destination: 'accounting', payload: { id } });
  }

  @Transactional()
  async receive(key: string, fail = false): Promise<void> {
    await this.inbox.receive({ source: 'payments', idempotencyKey: key, payload: { key } });
    if (fail) throw new Error('receive rolled back');
  }

  @Transactional('ledgerTx')
  async receiveInLedgerTransaction(key: string): Promise<void> {
    await this.inbox.receive({ source: 'payments', idempotencyKey: key, payload: { key } });
  }
}

/** A pull handler whose work goes through the application's @Transactional service, not through ctx.manager. */
@Injectable()
class Payments {
  failNext = false;
  constructor(private readonly orders: Orders) {}

  @PullHandler('payments')
  async handle(message: InboxMessage, _ctx: PullContext): Promise<void> {
    await this.orders.place(`paid-${message.idempotencyKey}`);
    if (this.failNext) {
      this.failNext = false;
      throw new Error('handler failed after the service wrote');
    }
  }
}

describe('ambient transactions with @nestjs-cls/transactional (PostgreSQL)', () => {
  let ordersDb: TestDatabase;
  let ledgerDb: TestDatabase;
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>>;
  let orders: Orders;

  before(async () => {
    ordersDb = await createTestDatabase();
    ledgerDb = await createTestDatabase();
    await ordersDb.query('CREATE TABLE orders (id text PRIMARY KEY)');
    await ledgerDb.query('CREATE TABLE entries (id text PRIMARY KEY)');
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: ordersDb.url, logging: false }),
        TypeOrmModule.forRoot({ name: 'ledger', type: 'postgres', url: ledgerDb.url, logging: false }),
        ClsModule.forRoot({
          global: true,
          plugins: [
            new ClsPluginTransactional({
              imports: [TypeOrmModule],
              adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
            }),
            // Named unlike the DataSource on purpose: QueueBox finds a host by the DataSource it serves.
            new ClsPluginTransactional({
              connectionName: 'ledgerTx',
              imports: [TypeOrmModule],
              adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken('ledger') }),
            }),
          ],
        }),
        QueueBoxModule.forRoot({
          outbox: { publisher: new RecordingPublisher() },
          pull: { pollIntervalMs: 20 },
          workers: { outbox: false, relay: false, pull: true },
        }),
        QueueBoxModule.forRoot({ name: 'ledger', dataSource: 'ledger', outbox: { publisher: new RecordingPublisher() }, workers: false }),
      ],
      providers: [Orders, Payments],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: new RecordingLogger(), abortOnError: false });
    orders = app.get(Orders);
  });
  beforeEach(async () => {
    await ordersDb.query('TRUNCATE orders, queuebox_outbox, queuebox_inbox');
    await ledgerDb.query('TRUNCATE entries, queuebox_outbox');
  });
  after(async () => {
    await app?.close();
    await ordersDb?.drop();
    await ledgerDb?.drop();
  });

  const outboxPayloads = async (db: TestDatabase) =>
    (await db.query<{ payload: { id: string } }>('SELECT payload FROM queuebox_outbox ORDER BY id')).map((r) => r.payload.id);
  const orderIds = async () => (await ordersDb.query<{ id: string }>('SELECT id FROM orders ORDER BY id')).map((r) => r.id);

  it('@Transactional() (REQUIRED): enqueue(message) commits with the business row, and rolls back with it', async () => {
    await orders.place('o1');
    await assert.rejects(orders.place('o2', true), /order o2 failed/);
    assert.deepEqual(await orderIds(), ['o1']);
    assert.deepEqual(await outboxPayloads(ordersDb), ['o1']);
  });

  it('without an active transaction enqueue(message) refuses, naming the DataSource (never an autocommit)', async () => {
    await assert.rejects(
      orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'loose' } }),
      (error: unknown) =>
        error instanceof TransactionRequiredError &&
        /no @nestjs-cls\/transactional transaction of DataSource "default" is active/.test(error.message),
    );
    // SUPPORTS, NOT_SUPPORTED and NEVER run without a transaction: refused the same way.
    for (const propagation of [Propagation.Supports, Propagation.NotSupported, Propagation.Never]) {
      await assert.rejects(
        orders.tx.withTransaction(propagation, () => orders.outbox.enqueue({ destination: 'shipping', payload: { id: propagation } })),
        TransactionRequiredError,
        propagation,
      );
    }
    // NOT_SUPPORTED inside a transaction suspends it: refused too, and the outer one goes on.
    await orders.tx.withTransaction(async () => {
      await orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'outer' } });
      await assert.rejects(
        orders.tx.withTransaction(Propagation.NotSupported, () =>
          orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'suspended' } }),
        ),
        TransactionRequiredError,
      );
    });
    // A script that means it: allowAutocommit.
    await orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'script' } }, { allowAutocommit: true });
    assert.deepEqual(await outboxPayloads(ordersDb), ['outer', 'script']);
  });

  it('REQUIRES_NEW commits on its own; NESTED rolls back to its savepoint; MANDATORY joins', async () => {
    await assert.rejects(
      orders.tx.withTransaction(async () => {
        await orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'outer-rolled-back' } });
        await orders.tx.withTransaction(Propagation.RequiresNew, () =>
          orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'new' } }),
        );
        throw new Error('outer fails');
      }),
      /outer fails/,
    );
    await orders.tx.withTransaction(async () => {
      await orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'outer-kept' } });
      await assert.rejects(
        orders.tx.withTransaction(Propagation.Nested, async () => {
          await orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'nested-rolled-back' } });
          throw new Error('nested fails');
        }),
      );
      await orders.tx.withTransaction(Propagation.Mandatory, () =>
        orders.outbox.enqueue({ destination: 'shipping', payload: { id: 'mandatory' } }),
      );
    });
    assert.deepEqual(await outboxPayloads(ordersDb), ['new', 'outer-kept', 'mandatory']);
  });

  it("several QueueBoxes: each finds its own DataSource's transaction; another QueueBox's is refused naming both (I12)", async () => {
    await orders.book('e1');
    assert.deepEqual(await outboxPayloads(ledgerDb), ['e1']);
    assert.deepEqual(await outboxPayloads(ordersDb), []);
    await assert.rejects(orders.bookInOrdersTransaction('e2'), (error: unknown) => {
      assert.ok(error instanceof QueueBoxValidationError, String(error));
      assert.match(error.message, /DataSource "default", which belongs to QueueBox "default"/);
      assert.match(error.message, /belongs to QueueBox "ledger" \(DataSource "ledger"\)/);
      return true;
    });
    assert.deepEqual(await outboxPayloads(ledgerDb), ['e1']);
    assert.deepEqual(await outboxPayloads(ordersDb), []);
  });

  it('receive(message) joins the active transaction (rolled back with it); with none it stores on its own, as before', async () => {
    await assert.rejects(orders.receive('p1', true), /receive rolled back/);
    await orders.receive('p2');
    await orders.inbox.receive({ source: 'payments', idempotencyKey: 'p3', payload: {} });
    const keys = await ordersDb.query<{ idempotency_key: string }>('SELECT idempotency_key FROM queuebox_inbox ORDER BY id');
    assert.deepEqual(
      keys.map((r) => r.idempotency_key),
      ['p2', 'p3'],
    );
    await assert.rejects(
      orders.receiveInLedgerTransaction('p4'),
      QueueBoxValidationError,
      'a transaction of the ledger QueueBox is refused (I12)',
    );
  });

  it("a pull handler's transaction is the ambient one: a @Transactional service it calls writes in it, and rolls back with it", async () => {
    const payments = app.get(Payments);
    payments.failNext = true;
    await orders.inbox.receive({ source: 'payments', idempotencyKey: 'k1', payload: {} });
    await eventually(
      async () => (await ordersDb.query(`SELECT 1 FROM queuebox_inbox WHERE state = 'processed'`)).length === 1,
      'the payment to be processed on its second attempt',
    );
    const [row] = await ordersDb.query<{ attempts: number; last_error: string }>('SELECT attempts, last_error FROM queuebox_inbox');
    assert.equal(row.attempts, 2);
    assert.match(row.last_error, /handler failed after the service wrote/);
    // The first attempt's order row and message rolled back with the handler; the second's committed with the completion.
    assert.deepEqual(await orderIds(), ['paid-k1']);
    assert.deepEqual(await outboxPayloads(ordersDb), ['paid-k1']);
    assert.ok(app.get(PullWorker));
  });
});

describe('ambient transactions without @nestjs-cls/transactional installed', () => {
  it('enqueue(message) throws TransactionRequiredError naming the package', () => {
    const lib = join(__dirname, '..', '..', 'lib');
    const script = `
const Module = require('node:module');
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === '@nestjs-cls/transactional') throw Object.assign(new Error('not found'), { code: 'MODULE_NOT_FOUND' });
  return resolve.call(this, request, ...rest);
};
const { OutboxService } = require(${JSON.stringify(join(lib, 'outbox', 'outbox.service.js'))});
const outbox = new OutboxService({}, { maxPayloadBytes: 1000 }, { name: 'default', dataSource: 'default' }, {});
outbox.enqueue({ destination: 'x', payload: 1 }).then(
  () => console.log('stored'),
  (error) => console.log(error.name + ': ' + error.message),
);`;
    const out = execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' });
    assert.match(
      out,
      /^TransactionRequiredError: OutboxService\.enqueue was called without an EntityManager, which joins the active transaction of @nestjs-cls\/transactional/,
    );
    assert.match(out, /npm install @nestjs-cls\/transactional @nestjs-cls\/transactional-adapter-typeorm nestjs-cls/);
  });
});
