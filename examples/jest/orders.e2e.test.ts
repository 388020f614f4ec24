// A whole app under Jest, against a real PostgreSQL: the app's own module, QueueBox with its
// background workers switched off and a RecordingPublisher, and `queuebox/testing` to publish.
//   npm run example:jest      (QUEUEBOX_PG_URL or DATABASE_URL; otherwise an embedded PostgreSQL)
// Jest 30 runs the tsc output (ts-jest does not accept TypeScript 7) and needs Node 24.9+ to
// `require` the ESM-only NestJS 12 packages.
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type OrdersTestApp, startOrdersTestApp } from '../orders-app';

describe('orders, under Jest, with queuebox/testing', () => {
  let app: OrdersTestApp;

  beforeAll(async () => {
    app = await startOrdersTestApp();
  });

  afterAll(async () => {
    await app?.close();
  });

  it('publishes the orders of one customer in order', async () => {
    const first = await app.orders.placeOrder('ada', 10);
    const second = await app.orders.placeOrder('ada', 20);

    const { published, failed } = await app.qb.drainOutbox();

    expect(failed).toEqual([]);
    expect(published.map((message) => (message.payload as { orderId: string }).orderId)).toEqual([first.id, second.id]);
    expect(app.publisher.for('billing')).toHaveLength(2);
  });
});
