import { checkName, copyHeaders, dateTimeOf, serializeHeaders, serializePayload } from '../common/payload';
import { uuidV7 } from '../common/uuid';
import type { OutboxInsertRow } from '../dialects/dialect';
import { DuplicateMessageIdError, QueueBoxValidationError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
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

/**
 * Validates messages given to `enqueue` (or returned by a relay route) and serializes them for the
 * insert. Each field is read once, into a plain value, and only that value is validated and
 * stored: a getter that answers differently on a second read, or a Date whose `getTime` lies,
 * cannot slip past validation into the statement.
 */
export function toOutboxRows(messageList: readonly OutboxMessageInput[], maxPayloadBytes: number): OutboxInsertRow[] {
  const seen = new Set<string>();
  return messageList.map((message, index) => {
    const subject = `Outbox message #${index}`;
    if (typeof message !== 'object' || message === null) throw new QueueBoxValidationError('message', messages.messageNotObject(subject));
    const { destination, key, payload, headers, messageId: givenId, availableAt: givenAt } = message;
    if (givenId !== undefined && (typeof givenId !== 'string' || !UUID.test(givenId))) {
      throw new QueueBoxValidationError('messageId', messages.messageFieldInvalid(subject, 'messageId', 'must be a UUID'));
    }
    // The database stores a uuid in lower case: the id returned must be the one stored.
    // Time-ordered when QueueBox makes it (uuidV7): cheaper for the message_id index than a random one.
    const messageId = givenId?.toLowerCase() ?? uuidV7();
    if (seen.has(messageId)) throw new DuplicateMessageIdError(messageId, messages.messageIdRepeated(subject, messageId));
    seen.add(messageId);
    return {
      messageId,
      destination: checkName(destination, 'destination', subject, true) as string,
      key: checkName(key, 'key', subject, false),
      payloadJson: serializePayload(payload, maxPayloadBytes, subject),
      headersJson: serializeHeaders(withTraceContext(copyHeaders(headers)), subject, { http: true }),
      availableAt: availableAtOf(givenAt, subject),
    };
  });
}

/** A copy of `availableAt` (a real, valid Date within the years both databases store), or null. */
function availableAtOf(value: unknown, subject: string): Date | null {
  if (value === undefined) return null;
  const time = dateTimeOf(value);
  if (time === undefined) {
    throw new QueueBoxValidationError('availableAt', messages.messageFieldInvalid(subject, 'availableAt', 'must be a valid Date'));
  }
  if (time < EARLIEST_AVAILABLE_AT || time > LATEST_AVAILABLE_AT) {
    throw new QueueBoxValidationError(
      'availableAt',
      messages.messageFieldInvalid(subject, 'availableAt', messages.availableAtOutOfRange()),
    );
  }
  return new Date(time);
}
