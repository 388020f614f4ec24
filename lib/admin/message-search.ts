import { dateTimeOf } from '../common/payload';
import { MESSAGE_STATES, type MessagePathMatch, type MessageSearch, type MessageState } from '../dialects/message-rows';
import { QueueBoxAdminError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { QueueTable } from '../types/claims';

/**
 * What `QueueBoxAdmin.findMessages` looks for: rows of any state of one table. Every criterion is
 * optional; each given one must hold. Strings compare exactly.
 *
 * @example
 * await admin.findMessages({ component: 'outbox', name: 'billing', path: { path: 'order.id', equals: '123' } });
 */
export interface MessageFilter {
  component: QueueTable;
  /** Outbox `message_id` (a UUID, `X-Message-Id`) or inbox `idempotency_key`. */
  messageId?: string;
  /** Destination (outbox) or source (inbox). */
  name?: string;
  /** Outbox `key` or inbox `aggregate_id`. */
  key?: string;
  /** `pending`, `processing`, `dead`, and `sent` (outbox) or `processed` (inbox). */
  state?: MessageState;
  /** What `since` / `until` bound: `created` (enqueue / receive time, the default) or `finished` (`sent_at` / `processed_at`). */
  time?: 'created' | 'finished';
  /** At or after this instant. */
  since?: Date;
  /** Before this instant. */
  until?: Date;
  /**
   * A value in the payload (`in: 'payload'`, the default: `path` is dotted, `order.id`, `items.0.sku`)
   * or a header (`in: 'headers'`: `path` is the header's name) that must equal `equals` (as text:
   * a number or boolean compares as its JSON text). Segments: 1 to 100 letters, digits, `_` or `-`;
   * at most 16 of them. No index serves it: see `MessagePage.scanLimit`.
   */
  path?: { in?: 'payload' | 'headers'; path: string; equals: string };
}

/** Keyset paging of `findMessages`: newest first (descending row id). */
export interface MessagePage {
  /** Rows per page: default 50, at most 1000. */
  limit?: number;
  /** The `next` cursor of the previous page: only rows older (a lower id) than it. */
  after?: string;
  /**
   * The most rows a bounded scan examines per call (default 100,000, at most 1,000,000). A search
   * served by no index (finished rows, a key or a payload path without an indexed state) walks
   * the primary key from the cursor, newest first, and stops there; `scannedUpTo` says how far.
   */
  scanLimit?: number;
  /** Also return each row's payload. Off by default: payloads can be large and sensitive. */
  includePayload?: boolean;
}

/**
 * One page of `findMessages`. `next`: pass it back as `after` for older rows (`null`: nothing older
 * to look at). `plan`: how the database served it (`MessagePlan`). `scannedUpTo`: for a bounded
 * scan that found fewer rows than the page holds, the lowest row id it examined ("scanned up to"):
 * older rows were not looked at, and `next` continues from there; `null` otherwise.
 */
export interface MessagePageResult<R> {
  rows: R[];
  next: string | null;
  plan: 'message-id' | 'state-index' | 'bounded-scan';
  scannedUpTo: string | null;
}

const DEFAULT_PAGE = 50;
const MAX_PAGE = 1000;
export const DEFAULT_SCAN_LIMIT = 100_000;
export const MAX_SCAN_LIMIT = 1_000_000;
const SEGMENT = /^[A-Za-z0-9_-]{1,100}$/;
const MAX_SEGMENTS = 16;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MAX_ROW_ID = 9_223_372_036_854_775_807n;

const fail = (field: string, rule: string, value: unknown) =>
  new QueueBoxAdminError(field, messages.adminArgumentInvalid(field, rule, value));

function own(value: object, key: string): unknown {
  return Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
}

function text(field: string, value: unknown): string | null {
  if (value === undefined) return null;
  if (typeof value !== 'string' || value.length === 0 || value.length > 2000) {
    throw fail(field, 'must be a non-empty string of at most 2000 characters', value);
  }
  if (value.includes('\u0000')) throw fail(field, messages.adminTextNul(), value);
  return value;
}

function instant(field: string, value: unknown): Date | null {
  if (value === undefined) return null;
  const time = dateTimeOf(value);
  if (time !== undefined) return new Date(time);
  throw fail(field, 'must be a valid Date', value);
}

function integer(field: string, value: unknown, fallback: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw fail(field, `must be an integer from 1 to ${max}`, value);
  }
  return value;
}

function rowId(field: string, value: unknown): string | null {
  if (value === undefined) return null;
  if (typeof value === 'string' && /^[1-9][0-9]{0,18}$/.test(value) && BigInt(value) <= MAX_ROW_ID) return value;
  throw fail(field, messages.adminRowIdRule(MAX_ROW_ID), value);
}

/** A path match, validated: segments of letters, digits, `_` and `-` only; a header is one segment. */
export function pathMatch(value: unknown): MessagePathMatch | null {
  if (value === undefined) return null;
  if (typeof value !== 'object' || value === null) throw fail('path', messages.adminPathRule(), value);
  const where = own(value, 'in') ?? 'payload';
  if (where !== 'payload' && where !== 'headers') throw fail('path.in', 'must be "payload" or "headers"', where);
  const path = own(value, 'path');
  const segments = typeof path === 'string' ? path.split('.') : [];
  if (segments.length === 0 || segments.length > (where === 'headers' ? 1 : MAX_SEGMENTS) || !segments.every((s) => SEGMENT.test(s))) {
    throw fail('path.path', messages.adminPathRule(), path);
  }
  const equals = own(value, 'equals');
  if (typeof equals !== 'string' || equals.length > 2000 || equals.includes('\u0000')) {
    throw fail('path.equals', 'must be a string of at most 2000 characters without NUL', equals);
  }
  return { in: where, segments, equals };
}

/** Validates a filter and a page into the dialect's search. Only own properties are read. */
export function toMessageSearch(
  filter: MessageFilter,
  page: MessagePage,
  component: QueueTable,
  extra: { rowId?: string } = {},
): MessageSearch {
  if (typeof filter !== 'object' || filter === null) throw fail('filter', 'must be an object', filter);
  const state = own(filter, 'state');
  if (state !== undefined && !MESSAGE_STATES[component].includes(state as MessageState)) {
    throw fail('state', `must be one of ${MESSAGE_STATES[component].join(', ')} for the ${component}`, state);
  }
  const time = own(filter, 'time') ?? 'created';
  if (time !== 'created' && time !== 'finished') throw fail('time', 'must be "created" or "finished"', time);
  const messageId = text('messageId', own(filter, 'messageId'));
  if (component === 'outbox' && messageId !== null && !UUID.test(messageId)) {
    throw fail('messageId', 'must be a UUID (an outbox message id)', messageId);
  }
  const p = (typeof page === 'object' && page !== null ? page : {}) as MessagePage;
  return {
    component,
    rowId: rowId('id', extra.rowId),
    messageId: component === 'outbox' && messageId !== null ? messageId.toLowerCase() : messageId,
    name: text('name', own(filter, 'name')),
    key: text('key', own(filter, 'key')),
    state: (state as MessageState | undefined) ?? null,
    timeField: time,
    since: instant('since', own(filter, 'since')),
    until: instant('until', own(filter, 'until')),
    path: pathMatch(own(filter, 'path')),
    beforeId: rowId('after', own(p, 'after')),
    limit: integer('limit', own(p, 'limit'), DEFAULT_PAGE, MAX_PAGE),
    scanLimit: integer('scanLimit', own(p, 'scanLimit'), DEFAULT_SCAN_LIMIT, MAX_SCAN_LIMIT),
    includePayload: own(p, 'includePayload') === true,
  };
}
