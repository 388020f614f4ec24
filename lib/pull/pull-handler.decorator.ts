import { SetMetadata } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import type { PullHandlerOptions } from '../queuebox.options';

export const PULL_HANDLER_METADATA = 'QUEUEBOX:PULL_HANDLER';

export interface PullHandlerMetadata {
  source: string;
  options: PullHandlerOptions;
}

/** What a pull handler gets beside the message. */
export interface PullContext {
  /** The transaction the handler runs in; the row is completed in it. Do every business write through it. */
  manager: EntityManager;
  /** Aborts when the claim is lost (a renewal failed) or shutdown stops waiting: stop, the transaction rolls back. */
  signal: AbortSignal;
  /** 1 on the first attempt. */
  attempt: number;
}

/**
 * Marks a provider method as the consumer of an inbox `source`. QueueBox claims each message of
 * the source, opens a TypeORM transaction, calls the method with the message and that
 * transaction's `manager`, completes the row (fenced) in the same transaction and commits: the
 * business change and the completion commit together or not at all. Throwing rolls back and
 * retries with backoff; the row is dead after `maxAttempts`.
 *
 * @example
 * @Injectable()
 * export class PaymentsConsumer {
 *   @PullHandler('payments', { leaseMs: 30_000, concurrency: 4 })
 *   async onPayment(message: InboxMessage, { manager }: PullContext) {
 *     await manager.update(Order, { id: message.aggregateId }, { paid: true });
 *   }
 * }
 */
export function PullHandler(source: string, options: PullHandlerOptions = {}): MethodDecorator {
  return SetMetadata<string, PullHandlerMetadata>(PULL_HANDLER_METADATA, { source, options });
}
