import { messages } from '../texts/queuebox.messages';

const MAX_ERROR_TEXT = 2000;

/**
 * A one-line description of an error that is safe to log or store in `last_error`: its name and
 * message only. TypeORM's `QueryFailedError` carries the SQL and its parameters (payloads,
 * secrets), so the error object itself is never logged.
 *
 * Total: whatever a publisher, handler or route threw (an object without a prototype, a revoked
 * Proxy, a value whose `message`, `name` or `toString` throws), it returns a string. A throw here
 * would skip the write of the attempt's outcome and leave the row `processing` until its lease
 * expired.
 */
export function describeError(error: unknown): string {
  let text: string;
  try {
    text = describe(error);
  } catch {
    text = messages.errorUndescribable(kindOf(error));
  }
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT - 1)}…` : text;
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    const message = String(error.message);
    return `${String(error.name)}${typeof code === 'string' && !message.includes(code) ? ` [${code}]` : ''}: ${message}`;
  }
  const text = String(error);
  if (typeof text !== 'string') throw new TypeError('not a string');
  return text;
}

/** `typeof` (which never throws), with null named. */
function kindOf(value: unknown): string {
  return value === null ? 'null' : typeof value;
}

/** `value instanceof type`, but false instead of a throw for a value that cannot be inspected (a revoked Proxy). */
export function isInstance<T>(value: unknown, type: abstract new (...args: never[]) => T): value is T {
  try {
    return value instanceof type;
  } catch {
    return false;
  }
}
