import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';

/**
 * Largest headers object accepted, in bytes of its JSON text: Node.js's default limit for all
 * the headers of one HTTP request (`--max-http-header-size`), so whatever is stored can also be
 * delivered over HTTP. Headers are not counted in `maxPayloadBytes`.
 */
export const MAX_HEADERS_BYTES = 16_384;

/**
 * Deepest nesting of arrays and objects accepted in a payload. PostgreSQL parses jsonb
 * recursively and gives up near 20,000 levels with its default `max_stack_depth` (an error that
 * aborts the caller's transaction); Node.js 20's JSON.stringify overflows earlier, Node.js 26's
 * does not. Real payloads stay far below.
 */
export const MAX_PAYLOAD_DEPTH = 1_000;

/** Whether `json` (JSON.stringify's output) nests arrays and objects deeper than `limit`. */
function nestsDeeperThan(json: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/** A UTF-16 surrogate without its other half: PostgreSQL can store it neither as text nor as jsonb. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/**
 * In JSON.stringify's output, the escape of a NUL character or of a lone surrogate (paired ones
 * are written as characters, never escaped), not preceded by an escaped backslash.
 */
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(0000|d[89a-f][0-9a-f]{2})/;
/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const LINE_BREAK = /[\r\n]/;

/** What in `value` the database cannot store (PostgreSQL rejects NUL and lone surrogates), or undefined. */
function unstorable(value: string): string | undefined {
  if (value.includes('\u0000')) return messages.nulCharacter();
  if (LONE_SURROGATE.test(value)) return messages.loneSurrogate();
  return undefined;
}

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
  // PostgreSQL's jsonb rejects NUL characters and lone surrogates; refuse them here with a clear error.
  const unstorableEscape = json.includes('\\u') ? UNSTORABLE_ESCAPE.exec(json) : null;
  if (unstorableEscape) {
    const what = unstorableEscape[1] === '0000' ? messages.nulCharacter() : messages.loneSurrogate();
    throw new QueueBoxValidationError('payload', messages.payloadUnserializable(subject, `it contains ${what}`));
  }
  // Nesting deeper than the limit needs two brackets a level: shorter text cannot.
  if (json.length > 2 * MAX_PAYLOAD_DEPTH && nestsDeeperThan(json, MAX_PAYLOAD_DEPTH)) {
    throw new QueueBoxValidationError(
      'payload',
      messages.payloadUnserializable(subject, `it nests deeper than ${MAX_PAYLOAD_DEPTH} levels`),
    );
  }
  const bytes = Buffer.byteLength(json);
  if (bytes > limitBytes) throw new QueueBoxValidationError('payload', messages.payloadTooLarge(subject, bytes, limitBytes));
  return json;
}

/**
 * The time of `value` when it is a real Date (a valid one), read through the intrinsic
 * `Date.prototype.getTime`: an object that only inherits from `Date.prototype`, a Proxy or a
 * subclass overriding `getTime` cannot pass for another time. Undefined otherwise.
 */
export function dateTimeOf(value: unknown): number | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  let time: number;
  try {
    time = Date.prototype.getTime.call(value);
  } catch {
    return undefined; // not a Date: it has no time value
  }
  return Number.isNaN(time) ? undefined : time;
}

/**
 * A plain copy of a headers object: each own enumerable string-keyed property read once (a
 * getter cannot answer one value to validation and another to the insert; inherited and symbol
 * keys are not headers). `undefined` stays undefined; anything else that is not an object is
 * returned as it is, for `serializeHeaders` to reject.
 */
export function copyHeaders(headers: unknown): unknown {
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) return headers;
  // No prototype: a header named "__proto__" stays a header.
  const copy: Record<string, unknown> = Object.create(null);
  for (const name of Object.keys(headers)) copy[name] = (headers as Record<string, unknown>)[name];
  return copy;
}

/**
 * Validates an optional headers object (string values only, at most MAX_HEADERS_BYTES of JSON)
 * and returns its JSON text. Give it a `copyHeaders` copy: it reads the values twice. With `http`, every name must be an HTTP header name and no value may
 * hold a line break: outbox headers are sent as HTTP headers, and a header that cannot be sent
 * would fail every attempt.
 */
export function serializeHeaders(headers: unknown, subject: string, rules: { http: boolean }): string {
  if (headers === undefined) return '{}';
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) {
    throw new QueueBoxValidationError('headers', messages.messageFieldInvalid(subject, 'headers', 'must be an object of string values'));
  }
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value !== 'string') {
      throw new QueueBoxValidationError('headers', messages.messageFieldInvalid(subject, 'headers', 'must be an object of string values'));
    }
    const bad = unstorable(name) ?? unstorable(value);
    if (bad) throw new QueueBoxValidationError('headers', messages.headerUnstorable(subject, name, bad));
    if (rules.http && !HEADER_NAME.test(name)) throw new QueueBoxValidationError('headers', messages.headerNameInvalid(subject, name));
    if (rules.http && LINE_BREAK.test(value)) throw new QueueBoxValidationError('headers', messages.headerValueLineBreak(subject, name));
  }
  const json = JSON.stringify(headers);
  const bytes = Buffer.byteLength(json);
  if (bytes > MAX_HEADERS_BYTES) throw new QueueBoxValidationError('headers', messages.headersTooLarge(subject, bytes, MAX_HEADERS_BYTES));
  return json;
}

/**
 * Checks an optional short text field (key, aggregate id, ...): a non-empty string of at most 255
 * characters that the database can store (no NUL character, no lone surrogate).
 */
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
  const bad = unstorable(value);
  if (bad) throw new QueueBoxValidationError(field, messages.messageFieldInvalid(subject, field, messages.fieldUnstorable(bad)));
  return value;
}
