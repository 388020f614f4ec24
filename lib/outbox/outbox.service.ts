import { Inject, Injectable, Optional } from '@nestjs/common';
import type { DataSource, EntityManager } from 'typeorm';
import { checkOwnDataSource } from '../common/own-data-source';
import { checkTransaction } from '../common/transaction-check';
import type { Dialect } from '../dialects/dialect';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_INSTANCE, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import { QueueBoxRegistry } from '../queuebox.registry';
import type { QueueBoxInstanceName } from '../types/instance';
import type { EnqueueOptions, EnqueueResult, OutboxMessageInput } from '../types/outbox';
import { OutboxWriter } from './outbox.writer';

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
  private readonly writer: OutboxWriter;

  constructor(
    @Inject(QUEUEBOX_DIALECT) dialect: Dialect,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) options: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_INSTANCE) private readonly instance: QueueBoxInstanceName,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    @Optional() private readonly registry?: QueueBoxRegistry,
  ) {
    this.writer = new OutboxWriter(dialect, options.maxPayloadBytes);
  }

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
    checkOwnDataSource(
      manager,
      'OutboxService.enqueue',
      { name: this.instance.name, dataSourceName: this.instance.dataSource, dataSource: this.dataSource },
      this.registry,
    );
    if (!Array.isArray(messageList)) throw new QueueBoxValidationError('messages', messages.messageNotObject('The message list'));
    if (messageList.length === 0) return [];
    const onDuplicate = options?.onDuplicate ?? 'error';
    if (onDuplicate !== 'error' && onDuplicate !== 'ignore') {
      throw new QueueBoxValidationError('onDuplicate', messages.onDuplicateInvalid(onDuplicate));
    }
    return this.writer.insert(manager, this.writer.rows(messageList), messages.messageIdTaken, onDuplicate === 'ignore');
  }
}
