import { randomUUID } from 'node:crypto';
import { checkName, serializeHeaders, serializePayload } from '../common/payload';
import type { OutboxInsertRow } from '../dialects/dialect';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import { withTraceContext } from '../tracing/trace-context';
import type { OutboxMessageInput } from './outbox.types';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Validates messages given to `enqueue` (or returned by a relay route) and serializes them for the insert. */
export function toOutboxRows(messageList: readonly OutboxMessageInput[], maxPayloadBytes: number): OutboxInsertRow[] {
  return messageList.map((message, index) => {
    const subject = `Outbox message #${index}`;
    if (typeof message !== 'object' || message === null) throw new QueueBoxValidationError('message', messages.messageNotObject(subject));
    const { messageId, availableAt } = message;
    if (messageId !== undefined && (typeof messageId !== 'string' || !UUID.test(messageId))) {
      throw new QueueBoxValidationError('messageId', messages.messageFieldInvalid(subject, 'messageId', 'must be a UUID'));
    }
    if (availableAt !== undefined && !(availableAt instanceof Date && !Number.isNaN(availableAt.getTime()))) {
      throw new QueueBoxValidationError('availableAt', messages.messageFieldInvalid(subject, 'availableAt', 'must be a valid Date'));
    }
    return {
      messageId: messageId ?? randomUUID(),
      destination: checkName(message.destination, 'destination', subject, true) as string,
      key: checkName(message.key, 'key', subject, false),
      payloadJson: serializePayload(message.payload, maxPayloadBytes, subject),
      headersJson: serializeHeaders(withTraceContext(message.headers), subject),
      availableAt: availableAt ?? null,
    };
  });
}
