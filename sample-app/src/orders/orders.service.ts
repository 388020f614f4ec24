import { randomUUID } from 'node:crypto';
import { Injectable, Logger } from '@nestjs/common';
import { OutboxService } from 'queuebox';
import { DataSource } from 'typeorm';
import { formatAmount, type NewOrder, Order } from './order.entity';
import { orderPlaced } from './order-placed.event';

// A stand-in card limit, so the sample can show a transaction that fails after its message was enqueued.
const CARD_LIMIT_CENTS = 100_000;

export class PaymentDeclinedError extends Error {
  constructor(readonly order: Order) {
    super(`payment of ${formatAmount(order.amountCents)} declined (card limit ${formatAmount(CARD_LIMIT_CENTS)})`);
  }
}

@Injectable()
export class OrdersService {
  private readonly logger = new Logger(OrdersService.name);

  constructor(
    private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
  ) {}

  /**
   * Stores the order and its OrderPlaced message in one transaction: billing hears of the order
   * if and only if the order is committed. Throws PaymentDeclinedError, with nothing stored, when
   * the payment check fails.
   */
  async placeOrder(newOrder: NewOrder): Promise<Order> {
    const order = this.dataSource.manager.create(Order, { id: randomUUID(), ...newOrder });
    await this.dataSource.transaction(async (manager) => {
      await manager.insert(Order, order);
      const { messageId } = await this.outbox.enqueue(manager, {
        destination: 'billing',
        // Billing sees one customer's orders in the order they were placed.
        key: order.customerId,
        payload: orderPlaced(order),
      });
      this.logger.log(`Order ${order.id} (${order.customerId}): row inserted, message ${messageId} enqueued, not committed yet`);
      // Runs after the enqueue on purpose: throwing here rolls back the order row and the message together.
      this.authorizePayment(order);
    });
    this.logger.log(`Order ${order.id} committed: ${order.customerId}, ${order.item}, ${formatAmount(order.amountCents)}`);
    return order;
  }

  async exists(id: string): Promise<boolean> {
    return this.dataSource.manager.existsBy(Order, { id });
  }

  private authorizePayment(order: Order): void {
    if (order.amountCents > CARD_LIMIT_CENTS) throw new PaymentDeclinedError(order);
  }
}
