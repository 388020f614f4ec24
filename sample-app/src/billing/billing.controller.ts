import { BadRequestException, Body, Controller, Headers, HttpCode, HttpStatus, Logger, Post } from '@nestjs/common';
import { MESSAGE_ID_HEADER } from 'queuebox';
import type { OrderPlaced } from '../orders/order-placed.event';
import { BillingLedger } from './billing-ledger';

/** The receiving end of the outbox: QueueBox's HttpPublisher POSTs each billing message here. */
@Controller('billing')
export class BillingController {
  private readonly logger = new Logger(BillingController.name);

  constructor(private readonly ledger: BillingLedger) {}

  @Post('events')
  // Any 2xx marks the message sent; a 4xx (other than 408, 425, 429) dead-letters it; anything else is retried.
  @HttpCode(HttpStatus.NO_CONTENT)
  receive(@Headers(MESSAGE_ID_HEADER) messageId: string | undefined, @Body() event: OrderPlaced): void {
    if (!messageId) throw new BadRequestException(`missing ${MESSAGE_ID_HEADER} header`);
    if (!this.ledger.record(messageId, event)) {
      // Still a 2xx: the message did arrive, so the sender must not try again.
      this.logger.log(`Duplicate ${MESSAGE_ID_HEADER} ${messageId} ignored`);
      return;
    }
    this.logger.log(`Received #${this.ledger.size}, ${MESSAGE_ID_HEADER} ${messageId}: ${JSON.stringify(event)}`);
  }
}
