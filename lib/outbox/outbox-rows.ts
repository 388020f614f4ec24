import { randomUUID } from 'node:crypto';
import { checkName, serializeHeaders, serializePayload } from '../common/payload';
import type { OutboxInsertRow } from '../dialects/dialect';
import { DuplicateMessageIdError, QueueBoxValidationError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import { withTraceContext } from '../tracing/trace-context';
import type { OutboxMessageInput } from '../types/outbox';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/**
 * The times both databases can store (SQL Server's datetime2 is the narrower: years 1 to 9999).
 * A time before now just means "available now".
 */
// Date.UTC maps years 0 to 99 to 1900 to 1999; setUTCFullYear does not.
const EARLIEST_AVAILABLE_AT = new Date(0).setUTCFullYear(1, 0, 1);
const LATEST_AVAILABLE_AT = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** Validates messages given to `enqueue` (or returned by a relay route) and serializes them for the insert. */
export function toOutboxRows(messageList: readonly OutboxMessageInput[], maxPayloadBytes: number): OutboxInsertRow[] {
  const seen = new Set<string>();
  return messageList.map((message, index) => {
    const subject = `Outbox message #${index}`;
    if (typeof message !== 'object' || message === null) throw new QueueBoxValidationError('message', messages.messageNotObject(subject));
    const { availableAt } = message;
    if (message.messageId !== undefined && (typeof message.messageId !== 'string' || !UUID.test(message.messageId))) {
      throw new QueueBoxValidationError('messageId', messages.messageFieldInvalid(subject, 'messageId', 'must be a UUID'));
    }
    // The database stores a uuid in lower case: the id returned must be the one stored.
    const messageId = message.messageId?.toLowerCase() ?? randomUUID();
    if (seen.has(messageId)) throw new DuplicateMessageIdError(messageId, messages.messageIdRepeated(subject, messageId));
    seen.add(messageId);
    if (availableAt !== undefined && !(availableAt instanceof Date && !Number.isNaN(availableAt.getTime()))) {
      throw new QueueBoxValidationError('availableAt', messages.messageFieldInvalid(subject, 'availableAt', 'must be a valid Date'));
    }
    if (availableAt !== undefined && (availableAt.getTime() < EARLIEST_AVAILABLE_AT || availableAt.getTime() > LATEST_AVAILABLE_AT)) {
      throw new QueueBoxValidationError(
        'availableAt',
        messages.messageFieldInvalid(subject, 'availableAt', messages.availableAtOutOfRange()),
      );
    }
    return {
      messageId,
      destination: checkName(message.destination, 'destination', subject, true) as string,
      key: checkName(message.key, 'key', subject, false),
      payloadJson: serializePayload(message.payload, maxPayloadBytes, subject),
      headersJson: serializeHeaders(withTraceContext(message.headers), subject, { http: true }),
      availableAt: availableAt ?? null,
    };
  });
}
