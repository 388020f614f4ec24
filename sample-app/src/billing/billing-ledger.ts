import { Injectable } from '@nestjs/common';
import type { OrderPlaced } from '../orders/order-placed.event';

/** What billing has received, by message id. In-memory: the sample only needs it for one run. */
@Injectable()
export class BillingLedger {
  private readonly byMessageId = new Map<string, OrderPlaced>();
  private readonly listeners = new Set<() => void>();

  /**
   * Records a message; returns false when it was already recorded. The outbox delivers at least
   * once, so a receiver must expect the same X-Message-Id again (after a crash or a lost lease).
   */
  record(messageId: string, event: OrderPlaced): boolean {
    if (this.byMessageId.has(messageId)) return false;
    this.byMessageId.set(messageId, event);
    for (const listener of this.listeners) listener();
    return true;
  }

  get size(): number {
    return this.byMessageId.size;
  }

  hasOrder(orderId: string): boolean {
    return [...this.byMessageId.values()].some((event) => event.orderId === orderId);
  }

  /** Resolves once an OrderPlaced message has arrived for every one of `orderIds`. */
  waitForOrders(orderIds: readonly string[]): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (!orderIds.every((id) => this.hasOrder(id))) return;
        this.listeners.delete(check);
        resolve();
      };
      this.listeners.add(check);
      check();
    });
  }
}
