// A whole app under Vitest, against a real PostgreSQL: the app's own module, QueueBox with its
// background workers switched off and a RecordingPublisher, and `queuebox/testing` to publish.
//   npm run example:vitest    (QUEUEBOX_PG_URL or DATABASE_URL; otherwise an embedded PostgreSQL)
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import {
  OutboxService,
  QueueBoxClaims1795996800000,
  QueueBoxModule,
  QueueBoxOperations1764633600000,
  QueueBoxSchema1764460800000,
} from 'queuebox';
import { QueueBoxTesting, RecordingPublisher } from 'queuebox/testing';
import { Column, DataSource, Entity, type MigrationInterface, PrimaryGeneratedColumn, type QueryRunner } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

@Entity({ name: 'orders' })
class Order {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ name: 'customer_id', type: 'text' })
  customerId!: string;

  @Column({ type: 'integer' })
  total!: number;
}

class CreateOrders1764547200000 implements MigrationInterface {
  readonly name = 'CreateOrders1764547200000';
  async up(queryRunner: QueryRunner) {
    await queryRunner.query(
      'CREATE TABLE orders (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), customer_id text NOT NULL, total integer NOT NULL)',
    );
  }
  async down(queryRunner: QueryRunner) {
    await queryRunner.query('DROP TABLE orders');
  }
}

@Injectable()
class OrdersService {
  // Injected by type: this needs the decorator metadata Vite emits from tsconfig.json.
  constructor(
    private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
  ) {}

  placeOrder(customerId: string, total: number) {
    return this.dataSource.transaction(async (manager) => {
      const order = await manager.save(Order, { customerId, total });
      await this.outbox.enqueue(manager, { destination: 'billing', key: customerId, payload: { orderId: order.id, total } });
      return order;
    });
  }
}

const serverUrl = process.env.QUEUEBOX_PG_URL ?? process.env.DATABASE_URL;

async function onServer(sql: string) {
  const client = new Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

describe('orders, under Vitest, with queuebox/testing', () => {
  const databaseName = `qb_vitest_${randomBytes(6).toString('hex')}`;
  const publisher = new RecordingPublisher();
  let close: () => Promise<void>;
  let orders: OrdersService;
  let qb: QueueBoxTesting;

  beforeAll(async () => {
    if (!serverUrl) throw new Error('Set QUEUEBOX_PG_URL or DATABASE_URL (npm run example:vitest starts an embedded PostgreSQL)');
    await onServer(`CREATE DATABASE ${databaseName}`);
    const url = new URL(serverUrl);
    url.pathname = `/${databaseName}`;

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: url.toString(),
          entities: [Order],
          migrations: [
            QueueBoxSchema1764460800000,
            QueueBoxOperations1764633600000,
            QueueBoxClaims1795996800000,
            CreateOrders1764547200000,
          ],
          migrationsRun: true,
        }),
        QueueBoxModule.forRoot({ workers: false, outbox: { publisher } }),
      ],
      providers: [OrdersService],
    })
    class TestAppModule {}

    const moduleRef = await Test.createTestingModule({ imports: [TestAppModule] }).compile();
    const app = await moduleRef.init();
    close = () => app.close();
    orders = app.get(OrdersService);
    qb = QueueBoxTesting.from(app);
  });

  afterAll(async () => {
    await close?.();
    await onServer(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`);
  });

  it('publishes the orders of one customer in order', async () => {
    const first = await orders.placeOrder('ada', 10);
    const second = await orders.placeOrder('ada', 20);

    const { published, failed } = await qb.drainOutbox();

    expect(failed).toEqual([]);
    expect(published.map((message) => (message.payload as { orderId: string }).orderId)).toEqual([first.id, second.id]);
    expect(publisher.for('billing')).toHaveLength(2);
  });
});
