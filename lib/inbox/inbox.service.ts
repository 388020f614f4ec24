import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { checkName, serializeHeaders, serializePayload } from '../common/payload';
import type { Dialect } from '../dialects/dialect';
import { QueueBoxValidationError, UnknownSourceError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import type { ResolvedQueueBoxOptions } from '../queuebox.options';
import { withTraceContext } from '../tracing/trace-context';
import type { InboxMessageInput, ReceiveResult } from './inbox.types';
import { InboxSources } from './inbox-sources';

const SUBJECT = 'Inbox message';

/**
 * Stores incoming messages once per `(source, idempotencyKey)`. Concurrent receives of one key
 * store one row; the others report `duplicate: true` (never a unique-violation error).
 *
 * @example
 * const { duplicate } = await inbox.receive({ source: 'payments', idempotencyKey: event.id, aggregateId: event.orderId, payload: event });
 */
@Injectable()
export class InboxService {
  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    private readonly sources: InboxSources,
    private readonly events: QueueBoxEvents,
  ) {}

  /** Stores `message` unless it is a duplicate; joins `manager`'s transaction when given. */
  async receive(message: InboxMessageInput, manager?: EntityManager): Promise<ReceiveResult> {
    if (typeof message !== 'object' || message === null) throw new QueueBoxValidationError('message', messages.messageNotObject(SUBJECT));
    const source = checkName(message.source, 'source', SUBJECT, true) as string;
    if (!this.sources.isConsumed(source)) throw new UnknownSourceError(source, messages.sourceUnknown(source));
    const row = {
      source,
      idempotencyKey: checkName(message.idempotencyKey, 'idempotencyKey', SUBJECT, true) as string,
      aggregateId: checkName(message.aggregateId, 'aggregateId', SUBJECT, false),
      payloadJson: serializePayload(message.payload, this.options.maxPayloadBytes, SUBJECT),
      headersJson: serializeHeaders(withTraceContext(message.headers), SUBJECT),
    };
    const result = await this.dialect.inboxInsertIfAbsent({ row, manager });
    // In a caller's transaction the row is not visible until it commits; the worker's poll finds it then.
    if (!result.duplicate && !manager?.queryRunner?.isTransactionActive) this.sources.notifyReceived(source);
    const event = { id: result.id, source, idempotencyKey: row.idempotencyKey, aggregateId: row.aggregateId };
    this.events.emit(result.duplicate ? 'queuebox:inbox:duplicate' : 'queuebox:inbox:received', event);
    return result;
  }
}
