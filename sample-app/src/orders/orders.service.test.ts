// A test of the sample's own code with `queuebox/testing`, as an application's test suite would
// write it: the real module, a real PostgreSQL, no background workers, no sleeps.
//   npm run test:sample      (from the repository root; DATABASE_URL, or an embedded PostgreSQL)
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Logger } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { QueueBoxMigrations, QueueBoxModule } from 'queuebox';
import { QueueBoxTesting, RecordingPublisher } from 'queuebox/testing';
import { type Database, openDatabase } from '../database';
import { CreateOrdersTable1764547200000 } from './create-orders-table.migration';
import { Order } from './order.entity';
import type { OrderPlaced } from './order-placed.event';
import { OrdersModule } from './orders.module';
import { OrdersService, PaymentDeclinedError } from './orders.service';

describe('OrdersService with queuebox/testing', () => {
  const publisher = new RecordingPublisher();
  let database: Database;
  let close: () => Promise<void>;
  let orders: OrdersService;
  let qb: QueueBoxTesting;

  /** What billing received about these orders (the database may hold other runs' messages too). */
  const billingGot = (ids: string[]) =>
    publisher
      .for('billing')
      .map((message) => message.payload as OrderPlaced)
      .filter((payload) => ids.includes(payload.orderId));

  before(async () => {
    Logger.overrideLogger(false);
    database = await openDatabase();
    const moduleRef = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          entities: [Order],
          migrations: [...QueueBoxMigrations, CreateOrdersTable1764547200000],
          migrationsRun: true,
          logging: false,
        }),
        QueueBoxModule.forRoot({
          // No background poller: the test publishes with qb.drainOutbox() when it wants to.
          workers: false,
          // Retry a failed publish at once, so one drain shows the retry.
          outbox: { publisher, retry: { backoff: { delay: 0, maxDelay: 0, jitter: false } } },
        }),
        OrdersModule,
      ],
    }).compile();
    const app = await moduleRef.init();
    close = () => app.close();
    orders = app.get(OrdersService);
    qb = QueueBoxTesting.from(app);
    await qb.drainOutbox(); // whatever an earlier run on this database left pending
  });
  after(async () => {
    await close?.();
    await database?.stop();
  });
  beforeEach(() => publisher.clear());

  it('tells billing about each committed order, in order per customer', async () => {
    const first = await orders.placeOrder({ customerId: 'ada', item: 'keyboard', amountCents: 4_900 });
    const second = await orders.placeOrder({ customerId: 'ada', item: 'mouse', amountCents: 2_500 });

    const { published, failed } = await qb.drainOutbox();

    assert.equal(published.length, 2);
    assert.deepEqual(failed, []);
    assert.deepEqual(
      billingGot([first.id, second.id]).map((event) => event.item),
      ['keyboard', 'mouse'],
    );
  });

  it('tells billing nothing about an order whose payment was declined', async () => {
    await assert.rejects(orders.placeOrder({ customerId: 'bob', item: 'piano', amountCents: 900_000 }), PaymentDeclinedError);

    const { published } = await qb.drainOutbox();

    assert.deepEqual(published, []);
    assert.deepEqual(publisher.messages, []);
  });

  it('retries when billing is briefly down', async () => {
    publisher.failNext(1);
    const order = await orders.placeOrder({ customerId: 'cy', item: 'lamp', amountCents: 3_000 });

    const { published, failed } = await qb.drainOutbox();

    assert.deepEqual(
      failed.map((attempt) => attempt.outcome),
      ['retried'],
    );
    assert.equal(published.length, 1);
    assert.deepEqual(
      billingGot([order.id]).map((event) => event.item),
      ['lamp'],
    );
  });
});
