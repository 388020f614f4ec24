import type { EntityManager } from 'typeorm';
import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import { DuplicateMessageIdError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { EnqueueResult, OutboxMessageInput } from '../types/outbox';
import { toOutboxRows } from './outbox-rows';

/**
 * The one outbox writer: validates and serializes outbox messages into rows, and inserts rows in
 * a transaction, in one statement. `OutboxService.enqueue` writes through it in the caller's
 * transaction, the inbox relay in its forward's. A message id the outbox already holds is a
 * `DuplicateMessageIdError` (it would collide on every attempt).
 */
export class OutboxWriter {
  constructor(
    private readonly dialect: Dialect,
    private readonly maxPayloadBytes: number,
  ) {}

  /** The rows of `messageList`, validated (`QueueBoxValidationError` naming the field), in order. */
  rows(messageList: readonly OutboxMessageInput[]): OutboxInsertRow[] {
    return toOutboxRows(messageList, this.maxPayloadBytes);
  }

  /**
   * Inserts `rows` in `manager`'s transaction; results in input order. `taken` says why a message
   * id collides (enqueue's and the relay's texts differ); with `ifAbsent` none does: a taken id is
   * skipped and reported as a duplicate.
   */
  async insert(
    manager: EntityManager,
    rows: OutboxInsertRow[],
    taken: (messageId: string | undefined) => string = messages.messageIdTaken,
    ifAbsent = false,
  ): Promise<EnqueueResult[]> {
    if (rows.length === 0) return [];
    try {
      return await this.dialect.outboxInsert({ manager, rows, ifAbsent });
    } catch (error) {
      const collision = this.dialect.outboxMessageIdTaken(error);
      if (collision) throw new DuplicateMessageIdError(collision.messageId ?? '', taken(collision.messageId));
      throw error;
    }
  }
}
