import { SetMetadata } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import type { InboxMessage } from '../types/messages';
import type { PullHandlerOptions } from '../types/options';

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

/** What a batch pull handler (`batch` option) gets beside its messages. */
export interface PullBatchContext {
  /** The one transaction of the call; every message's row is completed in it. Do every business write through it. */
  manager: EntityManager;
  /** Aborts when any claim of the batch is lost, at the handler timeout, or when shutdown stops waiting: stop, the transaction rolls back. */
  signal: AbortSignal;
}

/** The `@PullHandler` options of the batch form: `batch` set. */
export type PullBatchHandlerOptions = PullHandlerOptions & { batch: number };

/** The method a batch `@PullHandler` decorates: `(messages, context)`. */
export type PullBatchHandlerMethod = (messages: InboxMessage[], context: PullBatchContext) => unknown;

/**
 * Marks a provider method as the consumer of an inbox `source`. QueueBox claims each message of
 * the source, opens a TypeORM transaction, calls the method with the message and that
 * transaction's `manager`, completes the row (fenced) in the same transaction and commits: the
 * business change and the completion commit together or not at all. Throwing rolls back and
 * retries with backoff; the row is dead after its attempts (`retry`).
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
export function PullHandler(source: string, options?: PullHandlerOptions & { batch?: undefined }): MethodDecorator;
/**
 * The batch form (`batch: n`): the method receives up to `n` messages of `source` (claimed heads,
 * and the messages right after them in their aggregates, each aggregate in order) and one
 * `PullBatchContext`. Its writes and all the messages' completions commit in one transaction. If
 * it throws (or times out), all of it rolls back and no message is charged: each claimed message
 * runs alone, and only one that fails alone counts the attempt (retried, or dead-lettered after
 * its attempts). If any claim of the batch is lost before the commit, nothing of the batch
 * commits; the claims still held go back to `pending` with their attempt not counted.
 *
 * @example
 * @PullHandler('payments', { batch: 100 })
 * async onPayments(messages: InboxMessage[], { manager }: PullBatchContext) {
 *   await manager.insert(Payment, messages.map((m) => ({ id: m.idempotencyKey, ...m.payload })));
 * }
 */
export function PullHandler(
  source: string,
  options: PullBatchHandlerOptions,
): <M extends PullBatchHandlerMethod>(target: object, key: string | symbol, descriptor: TypedPropertyDescriptor<M>) => void;
export function PullHandler(source: string, options: PullHandlerOptions = {}): MethodDecorator {
  return SetMetadata<string, PullHandlerMetadata>(PULL_HANDLER_METADATA, { source, options });
}
