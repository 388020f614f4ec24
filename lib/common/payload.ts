import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';

/**
 * Serializes a payload to the JSON text QueueBox stores, or throws `QueueBoxValidationError`.
 * `subject` names the message in errors ("Outbox message #2", "Inbox message").
 */
export function serializePayload(payload: unknown, limitBytes: number, subject: string): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(payload);
  } catch (error) {
    throw new QueueBoxValidationError('payload', messages.payloadUnserializable(subject, (error as Error).message), { cause: error });
  }
  if (json === undefined)
    throw new QueueBoxValidationError('payload', messages.payloadUnserializable(subject, 'it is undefined or a function'));
  // PostgreSQL's jsonb rejects the NUL character; refuse it here with a clear error.
  if (json.includes('\\u0000'))
    throw new QueueBoxValidationError('payload', messages.payloadUnserializable(subject, 'it contains a NUL character'));
  const bytes = Buffer.byteLength(json);
  if (bytes > limitBytes) throw new QueueBoxValidationError('payload', messages.payloadTooLarge(subject, bytes, limitBytes));
  return json;
}

/** Validates an optional headers object (string values only) and returns its JSON text. */
export function serializeHeaders(headers: unknown, subject: string): string {
  if (headers === undefined) return '{}';
  if (
    typeof headers !== 'object' ||
    headers === null ||
    Array.isArray(headers) ||
    !Object.values(headers).every((v) => typeof v === 'string')
  ) {
    throw new QueueBoxValidationError('headers', messages.messageFieldInvalid(subject, 'headers', 'must be an object of string values'));
  }
  return JSON.stringify(headers);
}

/** Checks an optional short text field (key, aggregate id, ...): a non-empty string of at most 255 characters. */
export function checkName(value: unknown, field: string, subject: string, required: boolean): string | null {
  if (value === undefined || value === null) {
    if (required) throw new QueueBoxValidationError(field, messages.messageFieldInvalid(subject, field, 'is required'));
    return null;
  }
  if (typeof value !== 'string' || value.length === 0 || value.length > 255) {
    throw new QueueBoxValidationError(
      field,
      messages.messageFieldInvalid(subject, field, 'must be a non-empty string of at most 255 characters'),
    );
  }
  return value;
}
