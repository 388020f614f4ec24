import { Injectable, Logger } from '@nestjs/common';
import type { NewOrder, Order } from './order.entity';
import { OrdersService, PaymentDeclinedError } from './orders.service';

// The third order is above the card limit: its transaction rolls back after enqueueing its message.
const SAMPLE_ORDERS: NewOrder[] = [
  { customerId: 'alice', item: 'Coffee beans, 1 kg', amountCents: 2_400 },
  { customerId: 'bob', item: 'Pour-over kettle', amountCents: 6_900 },
  { customerId: 'carol', item: 'Espresso machine', amountCents: 250_000 },
  { customerId: 'alice', item: 'Paper filters', amountCents: 500 },
  { customerId: 'dave', item: 'Burr grinder', amountCents: 18_900 },
  { customerId: 'bob', item: 'Mugs, set of 4', amountCents: 3_200 },
];

export interface SampleOrdersResult {
  committed: Order[];
  declined: Order[];
}

/** The sample's main job: places a handful of orders, one of which is declined. */
@Injectable()
export class SampleOrdersJob {
  private readonly logger = new Logger(SampleOrdersJob.name);

  constructor(private readonly orders: OrdersService) {}

  async run(): Promise<SampleOrdersResult> {
    const result: SampleOrdersResult = { committed: [], declined: [] };
    for (const newOrder of SAMPLE_ORDERS) {
      try {
        result.committed.push(await this.orders.placeOrder(newOrder));
      } catch (error) {
        if (!(error instanceof PaymentDeclinedError)) throw error;
        this.logger.warn(`Order ${error.order.id} (${error.order.customerId}) rolled back: ${error.message}; its message is gone with it`);
        result.declined.push(error.order);
      }
    }
    this.logger.log(`Placed ${SAMPLE_ORDERS.length} orders: ${result.committed.length} committed, ${result.declined.length} rolled back`);
    return result;
  }
}
