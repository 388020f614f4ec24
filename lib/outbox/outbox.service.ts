import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { checkTransaction } from '../common/transaction-check';
import type { Dialect } from '../dialects/dialect';
import { DuplicateMessageIdError, QueueBoxValidationError } from '../errors/queuebox.errors';
import type { ResolvedQueueBoxOptions } from '../options/options.resolver';
import { QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import type { EnqueueOptions, EnqueueResult, OutboxMessageInput } from './outbox.types';
import { toOutboxRows } from './outbox-rows';

/**
 * Writes outbox messages in the caller's transaction: they are published only if it commits.
 *
 * @example
 * await dataSource.transaction(async (manager) => {
 *   await manager.save(order);
 *   await outbox.enqueue(manager, { destination: 'billing', key: order.id, payload: { orderId: order.id } });
 * });
 */
@Injectable()
export class OutboxService {
  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
  ) {}

  /**
   * Stores one message in `manager`'s transaction. A manager outside a transaction
   * (`dataSource.manager`) throws `TransactionRequiredError` unless `options.allowAutocommit`.
   */
  async enqueue(manager: EntityManager, message: OutboxMessageInput, options?: EnqueueOptions): Promise<EnqueueResult> {
    const [result] = await this.enqueueMany(manager, [message], options);
    return result;
  }

  /** Stores messages in `manager`'s transaction with one statement; results are in input order. */
  async enqueueMany(
    manager: EntityManager,
    messageList: readonly OutboxMessageInput[],
    options: EnqueueOptions = {},
  ): Promise<EnqueueResult[]> {
    if (!manager || typeof (manager as Partial<EntityManager>).query !== 'function') {
      throw new QueueBoxValidationError('manager', messages.managerRequired());
    }
    checkTransaction(manager, 'enqueue', options?.allowAutocommit === true);
    if (!Array.isArray(messageList)) throw new QueueBoxValidationError('messages', messages.messageNotObject('The message list'));
    if (messageList.length === 0) return [];
    const rows = toOutboxRows(messageList, this.options.maxPayloadBytes);
    try {
      return await this.dialect.outboxInsert({ manager, rows });
    } catch (error) {
      throw asDuplicateMessageId(error) ?? error;
    }
  }
}

/**
 * A `DuplicateMessageIdError` when `error` is the outbox's `message_id` unique violation (the id
 * is taken by a message already stored): enqueue throws it, the relay dead-letters on it at once.
 */
export function asDuplicateMessageId(
  error: unknown,
  describe: (messageId: string | undefined) => string = messages.messageIdTaken,
): DuplicateMessageIdError | undefined {
  const collision = messageIdCollision(error);
  return collision && new DuplicateMessageIdError(collision.messageId ?? '', describe(collision.messageId));
}

/**
 * Whether `error` is the unique violation of the outbox's `message_id` constraint (named
 * `<table>_message_id_key` by both dialects' schemas): PostgreSQL's 23505, SQL Server's 2627
 * (or 2601 for an index). Returns the colliding id when the database names it.
 */
function messageIdCollision(error: unknown): { messageId?: string } | undefined {
  const driver = (error as { driverError?: unknown } | null)?.driverError ?? error;
  const { code, number, constraint, detail, message } = (driver ?? {}) as {
    code?: unknown;
    number?: unknown;
    constraint?: unknown;
    detail?: unknown;
    message?: unknown;
  };
  const postgres = code === '23505' && typeof constraint === 'string' && constraint.endsWith('_message_id_key');
  const sqlServer = (number === 2627 || number === 2601) && typeof message === 'string' && message.includes('_message_id_key');
  if (!postgres && !sqlServer) return undefined;
  const text = `${typeof detail === 'string' ? detail : ''} ${typeof message === 'string' ? message : ''}`;
  return { messageId: /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i.exec(text)?.[0]?.toLowerCase() };
}
