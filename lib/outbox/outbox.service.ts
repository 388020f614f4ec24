import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import type { ResolvedQueueBoxOptions } from '../queuebox.options';
import type { EnqueueResult, OutboxMessageInput } from './outbox.types';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MAX_NAME_LENGTH = 255;

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

  /** Stores one message in `manager`'s transaction. */
  async enqueue(manager: EntityManager, message: OutboxMessageInput): Promise<EnqueueResult> {
    const [result] = await this.enqueueMany(manager, [message]);
    return result;
  }

  /** Stores messages in `manager`'s transaction with one statement; results are in input order. */
  async enqueueMany(manager: EntityManager, messageList: readonly OutboxMessageInput[]): Promise<EnqueueResult[]> {
    if (!manager || typeof (manager as Partial<EntityManager>).query !== 'function') {
      throw new QueueBoxValidationError('manager', messages.managerRequired());
    }
    if (!Array.isArray(messageList)) throw new QueueBoxValidationError('messages', messages.messageNotObject(0));
    if (messageList.length === 0) return [];
    const rows = messageList.map((message, index) => this.toRow(message, index));
    return this.dialect.outboxInsert({ manager, rows });
  }

  private toRow(message: OutboxMessageInput, index: number): OutboxInsertRow {
    if (typeof message !== 'object' || message === null) throw new QueueBoxValidationError('message', messages.messageNotObject(index));
    const invalid = (field: string, rule: string) => new QueueBoxValidationError(field, messages.messageFieldInvalid(index, field, rule));
    const { destination, key, headers, messageId, availableAt } = message;
    if (typeof destination !== 'string' || destination.length === 0 || destination.length > MAX_NAME_LENGTH) {
      throw invalid('destination', `must be a non-empty string of at most ${MAX_NAME_LENGTH} characters`);
    }
    if (key !== undefined && key !== null && (typeof key !== 'string' || key.length === 0 || key.length > MAX_NAME_LENGTH)) {
      throw invalid('key', `must be a non-empty string of at most ${MAX_NAME_LENGTH} characters, or omitted`);
    }
    if (messageId !== undefined && (typeof messageId !== 'string' || !UUID.test(messageId))) {
      throw invalid('messageId', 'must be a UUID');
    }
    if (availableAt !== undefined && !(availableAt instanceof Date && !Number.isNaN(availableAt.getTime()))) {
      throw invalid('availableAt', 'must be a valid Date');
    }
    if (
      headers !== undefined &&
      (typeof headers !== 'object' ||
        headers === null ||
        Array.isArray(headers) ||
        !Object.values(headers).every((v) => typeof v === 'string'))
    ) {
      throw invalid('headers', 'must be an object of string values');
    }
    return {
      messageId: messageId ?? randomUUID(),
      destination,
      key: key ?? null,
      payloadJson: this.serializePayload(message.payload, index),
      headersJson: JSON.stringify(headers ?? {}),
      availableAt: availableAt ?? null,
    };
  }

  private serializePayload(payload: unknown, index: number): string {
    let json: string | undefined;
    try {
      json = JSON.stringify(payload);
    } catch (error) {
      throw new QueueBoxValidationError('payload', messages.payloadUnserializable(index, (error as Error).message), { cause: error });
    }
    if (json === undefined)
      throw new QueueBoxValidationError('payload', messages.payloadUnserializable(index, 'it is undefined or a function'));
    // PostgreSQL's jsonb rejects the NUL character; refuse it here with a clear error.
    if (json.includes('\\u0000'))
      throw new QueueBoxValidationError('payload', messages.payloadUnserializable(index, 'it contains a NUL character'));
    const bytes = Buffer.byteLength(json);
    if (bytes > this.options.maxPayloadBytes) {
      throw new QueueBoxValidationError('payload', messages.payloadTooLarge(index, bytes, this.options.maxPayloadBytes));
    }
    return json;
  }
}
