import { Inject, Injectable, Optional } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import type { DataSource, EntityManager } from 'typeorm';
import { AmbientTransactions } from '../common/ambient-transaction';
import { checkOwnDataSource } from '../common/own-data-source';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { checkTransaction } from '../common/transaction-check';
import { QueueBoxRegistry } from '../core/queuebox.registry';
import type { Dialect } from '../dialects/dialect';
import { QueueBoxValidationError, TransactionRequiredError } from '../errors/queuebox.errors';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxIdentity } from '../types/instance';
import type { EnqueueOptions, EnqueueResult, OutboxMessageInput } from '../types/outbox';
import { OutboxWriter } from './outbox.writer';

/**
 * Writes outbox messages in the caller's transaction: they are published only if it commits. The
 * transaction is the `EntityManager` given, or, without one, the active `@nestjs-cls/transactional`
 * transaction of this QueueBox's DataSource (`@Transactional()`).
 *
 * @example
 * await dataSource.transaction(async (manager) => {
 *   await manager.save(order);
 *   await outbox.enqueue(manager, { destination: 'billing', key: order.id, payload: { orderId: order.id } });
 * });
 * // or, in a @Transactional() method:
 * await outbox.enqueue({ destination: 'billing', key: order.id, payload: { orderId: order.id } });
 */
@Injectable()
export class OutboxService {
  private readonly writer: OutboxWriter;
  private readonly ambient: AmbientTransactions;

  constructor(
    @Inject(QUEUEBOX_DIALECT) dialect: Dialect,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) options: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_IDENTITY) private readonly instance: QueueBoxIdentity,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    @Optional() private readonly registry?: QueueBoxRegistry,
    @Optional() discovery?: DiscoveryService,
  ) {
    this.writer = new OutboxWriter(dialect, options.maxPayloadBytes);
    this.ambient = new AmbientTransactions(dataSource, () => (discovery?.getProviders() ?? []).map((wrapper) => wrapper.instance));
  }

  /**
   * Stores one message in `manager`'s transaction, or (no manager) in the active
   * `@nestjs-cls/transactional` transaction of this QueueBox's DataSource. A manager outside a
   * transaction (`dataSource.manager`), or no manager and no such transaction, throws
   * `TransactionRequiredError` unless `options.allowAutocommit`.
   */
  enqueue(message: OutboxMessageInput, options?: EnqueueOptions): Promise<EnqueueResult>;
  enqueue(manager: EntityManager, message: OutboxMessageInput, options?: EnqueueOptions): Promise<EnqueueResult>;
  async enqueue(
    first: EntityManager | OutboxMessageInput,
    second?: OutboxMessageInput | EnqueueOptions,
    third?: EnqueueOptions,
  ): Promise<EnqueueResult> {
    const ambient = isMessage(first);
    const [result] = ambient
      ? await this.enqueueMany([first], second as EnqueueOptions | undefined)
      : await this.enqueueMany(first as EntityManager, [second as OutboxMessageInput], third);
    return result;
  }

  /** Stores messages in `manager`'s transaction (or the ambient one) with one statement; results are in input order. */
  enqueueMany(messageList: readonly OutboxMessageInput[], options?: EnqueueOptions): Promise<EnqueueResult[]>;
  enqueueMany(manager: EntityManager, messageList: readonly OutboxMessageInput[], options?: EnqueueOptions): Promise<EnqueueResult[]>;
  async enqueueMany(
    first: EntityManager | readonly OutboxMessageInput[],
    second?: readonly OutboxMessageInput[] | EnqueueOptions,
    third?: EnqueueOptions,
  ): Promise<EnqueueResult[]> {
    const ambient = Array.isArray(first);
    const messageList = (ambient ? first : second) as readonly OutboxMessageInput[];
    const options = ((ambient ? second : third) ?? {}) as EnqueueOptions;
    const manager = ambient ? this.ambientManager(options?.allowAutocommit === true) : (first as EntityManager);
    if (!manager || typeof (manager as Partial<EntityManager>).query !== 'function') {
      throw new QueueBoxValidationError('manager', messages.managerRequired());
    }
    checkTransaction(manager, 'enqueue', options?.allowAutocommit === true);
    checkOwnDataSource(manager, 'OutboxService.enqueue', this.own(), this.registry);
    if (!Array.isArray(messageList)) throw new QueueBoxValidationError('messages', messages.messageNotObject('The message list'));
    if (messageList.length === 0) return [];
    const onDuplicate = options?.onDuplicate ?? 'error';
    if (onDuplicate !== 'error' && onDuplicate !== 'ignore') {
      throw new QueueBoxValidationError('onDuplicate', messages.onDuplicateInvalid(onDuplicate));
    }
    return this.writer.insert(manager, this.writer.rows(messageList), messages.messageIdTaken, onDuplicate === 'ignore');
  }

  private own() {
    return { name: this.instance.name, dataSourceName: this.instance.dataSource, dataSource: this.dataSource };
  }

  /**
   * The active `@nestjs-cls/transactional` transaction of this DataSource. Refused (never an
   * autocommit, unless asked): without the package, without such a transaction (I12: one of
   * another QueueBox's DataSource is a `QueueBoxValidationError` naming both).
   */
  private ambientManager(allowAutocommit: boolean): EntityManager {
    const call = 'OutboxService.enqueue';
    if (!this.ambient.installed) {
      if (allowAutocommit) return this.dataSource.manager;
      throw new TransactionRequiredError(messages.ambientPackageMissing(call));
    }
    const { own, others } = this.ambient.active();
    if (own) return own;
    for (const other of others) checkOwnDataSource(other, call, this.own(), this.registry);
    if (allowAutocommit) return this.dataSource.manager;
    throw new TransactionRequiredError(messages.ambientTransactionNone(call, this.instance.dataSource, this.ambient.served));
  }
}

/** The ambient form's first argument: a message (it has no `query`, as a manager has). */
function isMessage(value: unknown): value is OutboxMessageInput {
  return (
    typeof value === 'object' && value !== null && typeof (value as Partial<EntityManager>).query !== 'function' && 'destination' in value
  );
}
