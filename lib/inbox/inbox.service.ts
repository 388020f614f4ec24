import { Inject, Injectable, type OnModuleDestroy, Optional } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import type { DataSource, EntityManager } from 'typeorm';
import { AfterCommit } from '../common/after-commit';
import { AmbientTransactions } from '../common/ambient-transaction';
import { checkOwnDataSource } from '../common/own-data-source';
import { checkName, copyHeaders, serializeHeaders, serializePayload } from '../common/payload';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { checkTransaction } from '../common/transaction-check';
import { QueueBoxRegistry } from '../core/queuebox.registry';
import type { Dialect } from '../dialects/dialect';
import { QueueBoxValidationError, UnknownSourceError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import { withTraceContext } from '../tracing/trace-context';
import type { InboxMessageInput, ReceiveResult } from '../types/inbox';
import type { QueueBoxIdentity } from '../types/instance';

const SUBJECT = 'Inbox message';

/**
 * Stores incoming messages once per `(source, idempotencyKey)`. Concurrent receives of one key
 * store one row; the others report `duplicate: true` (never a unique-violation error).
 *
 * @example
 * const { duplicate } = await inbox.receive({ source: 'payments', idempotencyKey: event.id, aggregateId: event.orderId, payload: event });
 */
@Injectable()
export class InboxService implements OnModuleDestroy {
  private readonly afterCommit: AfterCommit;
  private readonly ambient: AmbientTransactions;

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    private readonly sources: InboxSources,
    private readonly events: QueueBoxEvents,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(QUEUEBOX_IDENTITY) private readonly instance: QueueBoxIdentity,
    @Optional() private readonly registry?: QueueBoxRegistry,
    @Optional() discovery?: DiscoveryService,
  ) {
    this.afterCommit = new AfterCommit(dataSource);
    this.ambient = new AmbientTransactions(dataSource, () => (discovery?.getProviders() ?? []).map((wrapper) => wrapper.instance));
  }

  onModuleDestroy(): void {
    this.afterCommit.detach();
  }

  /**
   * Stores `message` unless it is a duplicate; joins `manager`'s transaction when given. Without a
   * manager it joins the active `@nestjs-cls/transactional` transaction of this QueueBox's
   * DataSource when there is one (`@Transactional()`), and otherwise stores the message on its own
   * (as it always did). A manager outside a transaction (`dataSource.manager`) throws
   * `TransactionRequiredError`.
   */
  async receive(message: InboxMessageInput, given?: EntityManager): Promise<ReceiveResult> {
    if (typeof message !== 'object' || message === null) throw new QueueBoxValidationError('message', messages.messageNotObject(SUBJECT));
    const own = { name: this.instance.name, dataSourceName: this.instance.dataSource, dataSource: this.dataSource };
    let manager = given;
    // `null` or any other non-object is no transaction's manager either: TransactionRequiredError, as for `{}`.
    if (given !== undefined) {
      checkTransaction(given, 'receive', false);
      checkOwnDataSource(given, 'InboxService.receive', own, this.registry);
    } else if (this.ambient.installed) {
      const active = this.ambient.active();
      // A transaction of another QueueBox's DataSource is refused (I12), not silently left.
      if (!active.own) for (const other of active.others) checkOwnDataSource(other, 'InboxService.receive', own, this.registry);
      manager = active.own;
      if (manager) checkTransaction(manager, 'receive', false);
    }
    // Each field read once; only these copies are validated and stored.
    const { source: givenSource, idempotencyKey, aggregateId, payload, headers } = message;
    const source = checkName(givenSource, 'source', SUBJECT, true) as string;
    if (!this.sources.isConsumed(source)) throw new UnknownSourceError(source, messages.sourceUnknown(source));
    const row = {
      source,
      idempotencyKey: checkName(idempotencyKey, 'idempotencyKey', SUBJECT, true) as string,
      aggregateId: checkName(aggregateId, 'aggregateId', SUBJECT, false),
      payloadJson: serializePayload(payload, this.options.maxPayloadBytes, SUBJECT),
      headersJson: serializeHeaders(withTraceContext(copyHeaders(headers)), SUBJECT, { http: false }),
    };
    const result = await this.dialect.inboxInsertIfAbsent({ row, manager });
    // In a caller's transaction the row exists for others only once it commits: wake the workers
    // and report the receive then, and not at all if it rolls back.
    this.afterCommit.schedule(manager, () => {
      if (!result.duplicate) this.sources.notifyReceived(source);
      const event = { id: result.id, source, idempotencyKey: row.idempotencyKey, aggregateId: row.aggregateId };
      this.events.emit(result.duplicate ? 'queuebox:inbox:duplicate' : 'queuebox:inbox:received', event);
    });
    return result;
  }
}
