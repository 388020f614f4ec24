import type { Order } from './order.entity';

/** The message the orders side sends to billing for every committed order. */
export interface OrderPlaced {
  type: 'OrderPlaced';
  orderId: string;
  customerId: string;
  item: string;
  amountCents: number;
}

export function orderPlaced(order: Order): OrderPlaced {
  return { type: 'OrderPlaced', orderId: order.id, customerId: order.customerId, item: order.item, amountCents: order.amountCents };
}
