import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { deadLetterFingerprint, SKIPPED_HEAD_CLASS } from '../common/fingerprint';
import { dateTimeOf } from '../common/payload';
import { QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { DeadSelection, Dialect } from '../dialects/dialect';
import type {
  AttemptRow,
  BacklogRow,
  BlockedKeyRow,
  ClaimRow,
  DeadLetterGroupRow,
  DeadLetterRow,
  InstanceRow,
  PauseRow,
  SkipHeadTarget,
  Throughput,
} from '../dialects/dialect-rows';
import type { MessageHistory, MessageRow } from '../dialects/message-rows';
import { QueueBoxAdminError, SentRowsNotKeptError } from '../errors/queuebox.errors';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { QueueTable } from '../types/claims';
import { ClaimPauses } from '../workers/claim-pauses';
import type { DeadLetterFilter, DeadLetterIds, DeadLetterPage, DeadLetterSelection, RetentionResult } from './admin.types';
import { HistoryCounts, MAX_HISTORY } from './history-counts';
import { type MessageFilter, type MessagePage, type MessagePageResult, toMessageSearch } from './message-search';
import { RetentionService } from './retention.service';

const DEFAULT_PAGE = 50;
const MAX_PAGE = 1000;
/** Rows a replay or discard changes per statement; a bigger selection takes several statements. */
const WRITE_BATCH = 1000;
const FILTER_FIELDS = ['name', 'key', 'errorContains', 'deadAfter', 'deadBefore', 'fingerprint'] as const;
/** The longest fingerprint a row can hold (class and pattern, see common/fingerprint.ts; SQL Server's column is NVARCHAR(512)). */
const MAX_FINGERPRINT = 512;
/** The longest window `throughput` counts over: one day of minutes. */
const MAX_THROUGHPUT_MINUTES = 1440;
/** The largest id a `bigint` (PostgreSQL) or `BIGINT` (SQL Server) column holds. */
const MAX_ROW_ID = 9_223_372_036_854_775_807n;

/**
 * Operations on the QueueBox tables: the backlog, dead letters (list, count, replay, discard),
 * keys blocked behind a failing head (list, skip the head) and retention on demand. No HTTP
 * endpoint: call it from your own admin controller, CLI or script.
 *
 * Every write is fenced against workers: replay and discard change `dead` rows only, and
 * `skipHead` changes a pending head, or a processing one whose lease expired by the database
 * clock, never a row a worker holds. Each call is one statement, or batches of 1000 rows.
 *
 * @example
 * const admin = app.get(QueueBoxAdmin);
 * const { rows } = await admin.listDeadLetters({ component: 'outbox', name: 'billing' });
 * await admin.replayDeadLetters({ component: 'outbox', ids: rows.map((r) => r.id) });
 */
@Injectable()
export class QueueBoxAdmin {
  /**
   * Logs pauses and resumes (the audit line with the actor) in an application, where the module
   * gives this admin its `ClaimPauses`; an admin of `createQueueBoxAdmin` (a script, the CLI)
   * logs nothing: its caller prints what it did.
   */
  private readonly logger?: Logger;
  /** The history's counts of past buckets, read once. */
  private readonly historyCounts: HistoryCounts;

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    private readonly retention: RetentionService,
    /** This process's claims' view of the pauses: forgotten after a pause or resume here, so they see it at once. */
    @Optional() private readonly claimPauses?: ClaimPauses,
    // Absent for createQueueBoxAdmin without `outbox.sentRows`: sent rows are taken to be kept.
    @Optional() @Inject(QUEUEBOX_RESOLVED_OPTIONS) options?: { outbox?: Pick<ResolvedQueueBoxOptions['outbox'], 'sentRows'> },
  ) {
    if (claimPauses) this.logger = new Logger('QueueBox:Admin');
    this.historyCounts = new HistoryCounts(dialect, () => dialect.clockNow());
    this.sentRowsKept = options?.outbox?.sentRows !== 'delete';
  }

  /** False with `outbox.sentRows: 'delete'`: the completion deletes sent rows, so no read finds them. */
  private readonly sentRowsKept: boolean;

  /**
   * Pauses an outbox destination (`component: 'outbox'`) or an inbox source (`'inbox'`): every
   * replica's claims skip its rows from their next read of the pauses (at most one poll interval;
   * claims in flight finish). Its rows stay as they are, and keep holding back the later rows of
   * their keys (per-key order holds); a resume lets them be claimed again, in order. Stored in
   * the database with `reason` and `actor` (who; default "unknown"), and logged. Returns false
   * when it was paused already (the first pause, its reason and actor, is kept).
   */
  async pause(p: { component: QueueTable; name: string; reason?: string; actor?: string }): Promise<boolean> {
    const kind = component(p?.component);
    const name = pauseName(p.name);
    const reason = p.reason === undefined || p.reason === '' ? null : text('reason', p.reason);
    const actor = p.actor === undefined || p.actor === '' ? 'unknown' : text('actor', p.actor).slice(0, 200);
    const paused = await this.dialect.pauseInsert({ component: kind, name, reason, pausedBy: actor });
    this.claimPauses?.invalidate();
    this.logger?.log(paused ? messages.pausePaused(kind, name, actor, reason) : messages.pauseAlready(kind, name, actor));
    return paused;
  }

  /** Resumes a paused destination or source (see `pause`), logged with `actor`. Returns false when it was not paused. */
  async resume(p: { component: QueueTable; name: string; actor?: string }): Promise<boolean> {
    const kind = component(p?.component);
    const name = pauseName(p.name);
    const actor = p.actor === undefined || p.actor === '' ? 'unknown' : text('actor', p.actor).slice(0, 200);
    const resumed = await this.dialect.pauseDelete({ component: kind, name });
    this.claimPauses?.invalidate();
    this.logger?.log(resumed ? messages.pauseResumed(kind, name, actor) : messages.pauseNotPaused(kind, name, actor));
    return resumed;
  }

  /** Every paused destination and source, with who paused it, when (database clock) and why. One query of a small table. */
  async pauses(): Promise<PauseRow[]> {
    return this.dialect.pauseList();
  }

  /** Pending, processing and dead rows per destination (outbox) and source (inbox), counted by the database. */
  async backlog(): Promise<BacklogRow[]> {
    return this.dialect.adminBacklog();
  }

  /** One page of dead rows matching `filter` (or picked by `ids`), in id order; pass `nextAfterId` back as `afterId` for the next page. */
  async listDeadLetters(
    filter: DeadLetterFilter | DeadLetterIds,
    page: DeadLetterPage = {},
  ): Promise<{ rows: DeadLetterRow[]; nextAfterId: string | null }> {
    const selection = toSelection(filter, false);
    const limit = pageLimit(page.limit);
    const afterId = page.afterId === undefined ? null : rowId('afterId', page.afterId);
    const rows = await this.dialect.deadLetterList({
      selection,
      afterId,
      limit,
      includePayload: page.includePayload === true,
      descending: page.newestFirst === true,
    });
    return { rows, nextAfterId: rows.length === limit ? rows[rows.length - 1].id : null };
  }

  /** How many dead rows match `filter` (or are among `ids`). */
  async countDeadLetters(filter: DeadLetterFilter | DeadLetterIds): Promise<number> {
    return this.dialect.deadLetterCount({ selection: toSelection(filter, false) });
  }

  /**
   * Dead letters grouped by cause: one row per destination (outbox) or source (inbox) and
   * fingerprint (`<error class>: <message with ids and numbers taken out>`), the biggest groups
   * first (at most `limit`, default 50), with how many and when the first and last died. Replay or
   * discard a group with `{ component, name, fingerprint }`.
   *
   * @example
   * const [top] = await admin.deadLetterGroups({ component: 'outbox' });
   * await admin.replayDeadLetters({ component: 'outbox', name: top.name, fingerprint: top.fingerprint ?? undefined });
   */
  async deadLetterGroups(p: { component: QueueTable; limit?: number }): Promise<DeadLetterGroupRow[]> {
    return this.dialect.deadLetterGroups({ component: component(p?.component), limit: pageLimit(p?.limit) });
  }

  /**
   * Dead rows per destination (outbox) or source (inbox) and error class (`PublishError/503`;
   * `unknown` for rows that died before the attempts migration): what `queuebox_dead_letters` reports.
   */
  async deadLetterClasses(p: { component: QueueTable }): Promise<{ name: string; errorClass: string; count: number }[]> {
    return this.dialect.deadLetterClasses({ component: component(p?.component) });
  }

  /**
   * The failed attempts of one row (any state), newest first: when each failed, how long it ran
   * from its claim, which instance claimed it, its error class and message, and whether it was
   * retried or dead-lettered. The last `attemptHistory` (default 10) are kept; a row that never
   * failed has none.
   */
  async listAttempts(p: { component: QueueTable; id: string }): Promise<AttemptRow[]> {
    return this.dialect.attemptList({ component: component(p?.component), id: rowId('id', p?.id) });
  }

  /**
   * Puts dead rows back to `pending`: attempts 0, due now, `last_error` kept, the replay recorded
   * in the headers `X-QueueBox-Replay-Count` and `X-QueueBox-Replayed-At`. An outbox row keeps its
   * `message_id`, so it is published again with the same `X-Message-Id`. Returns how many changed.
   */
  async replayDeadLetters(selection: DeadLetterSelection): Promise<number> {
    return this.inBatches(toSelection(selection, true), (p) => this.dialect.deadLetterReplay(p));
  }

  /** Deletes dead rows (only dead rows). Returns how many. */
  async discardDeadLetters(selection: DeadLetterSelection): Promise<number> {
    return this.inBatches(toSelection(selection, true), (p) => this.dialect.deadLetterDiscard(p));
  }

  /**
   * Keys (outbox `key`) and aggregates (inbox `(source, aggregate_id)`) whose head row failed at
   * least once and is not finished, or is held with rows behind it: it holds back every later row
   * of its key. Each names its owner only while the head is held (a live lease), with the owner's
   * state, and always its last claimer (`RowOwner`).
   */
  async listBlockedKeys(p: { component: QueueTable; limit?: number }): Promise<BlockedKeyRow[]> {
    return this.dialect.blockedKeyList({ component: component(p?.component), limit: pageLimit(p?.limit) });
  }

  /**
   * Dead-letters the head row of one key or aggregate (`last_error` = "skipped by admin: <reason>"),
   * so the rows behind it flow again. Only a pending head, or a processing one whose lease expired,
   * is skipped; a head a worker holds is left alone. With `headId` (from `listBlockedKeys`), only
   * that row is skipped, and only while it is still the head. Returns the id skipped, or `null`.
   */
  async skipHead(target: SkipHeadTarget): Promise<string | null> {
    const kind = component(target?.component);
    const reason = messages.skipHeadReason(target.reason === undefined ? 'no reason given' : text('reason', target.reason));
    const headId = target.headId === undefined ? undefined : rowId('headId', target.headId);
    const fingerprint = deadLetterFingerprint(SKIPPED_HEAD_CLASS, reason);
    if (kind === 'outbox') {
      const t = target as Extract<SkipHeadTarget, { component: 'outbox' }>;
      return this.dialect.blockedKeySkipHead({ component: 'outbox', key: text('key', t.key), headId, reason, fingerprint });
    }
    const t = target as Extract<SkipHeadTarget, { component: 'inbox' }>;
    return this.dialect.blockedKeySkipHead({
      component: 'inbox',
      source: text('source', t.source),
      aggregateId: text('aggregateId', t.aggregateId),
      headId,
      reason,
      fingerprint,
    });
  }

  /**
   * Rows finished (`sent` / `processed`) and rows that died, per destination and source and per
   * minute, over the last `minutes` minutes (default 60, at most 1440), the current minute last.
   * Read through the `sent_at` / `processed_at` indexes from the window's start: the cost follows
   * the rows finished in the window, not the rows kept.
   */
  async throughput(p: { minutes?: number } = {}): Promise<Throughput> {
    const minutes = p?.minutes ?? 60;
    if (typeof minutes !== 'number' || !Number.isInteger(minutes) || minutes < 1 || minutes > MAX_THROUGHPUT_MINUTES) {
      throw new QueueBoxAdminError(
        'minutes',
        messages.adminArgumentInvalid('minutes', `must be an integer from 1 to ${MAX_THROUGHPUT_MINUTES}`, minutes),
      );
    }
    return { ...(await this.dialect.adminThroughput({ minutes })), sentRowsKept: this.sentRowsKept };
  }

  /**
   * The message browser: rows of any state of one table matching `filter`, newest first, one page
   * (keyset by row id: pass `next` back as `after`). Served by an index for a message id or an
   * unfinished or dead state; otherwise by a scan of at most `page.scanLimit` rows (default
   * 100,000) of the primary key from the cursor, which says where it stopped (`scannedUpTo`).
   * docs/dashboard.md states each filter's cost.
   */
  async findMessages(filter: MessageFilter, page: MessagePage = {}): Promise<MessagePageResult<MessageRow>> {
    const search = toMessageSearch(
      filter,
      page,
      component(filter === null || typeof filter !== 'object' ? undefined : own(filter, 'component')),
    );
    if (!this.sentRowsKept && search.component === 'outbox' && search.state === 'sent') {
      throw new SentRowsNotKeptError('findMessages', messages.sentRowsNotKept("A search for sent outbox rows (state: 'sent')"));
    }
    const found = await this.dialect.messageSearch(search);
    const full = found.rows.length === search.limit;
    const next = full ? found.rows[found.rows.length - 1].id : found.scannedTo;
    return { rows: found.rows, next, plan: found.plan, scannedUpTo: full ? null : found.scannedTo };
  }

  /** One row of either table by its row id, with its payload, whatever its state; `null` when there is none. */
  async findMessage(p: { component: QueueTable; id: string }): Promise<MessageRow | null> {
    const kind = component(p?.component);
    const search = toMessageSearch({ component: kind }, { limit: 1, includePayload: true }, kind, { rowId: p.id });
    const found = await this.dialect.messageSearch(search);
    return found.rows[0] ?? null;
  }

  /**
   * Finished and dead rows per destination / source over the last `buckets` minutes (at most
   * 1440) or hours (at most 168: 7 days), the current bucket last, from `sent_at` /
   * `processed_at` and the dead rows' last attempt. Range scans of the `sent_at` / `processed_at`
   * indexes; a bucket that ended more than an hour ago is counted once and kept in this process
   * (see HistoryCounts), so a read counts the rows of its last hour or two, and the first read of
   * a window all of it. With `by: 'component'` the counts are per component (`name` is ''), an
   * index-only scan that reads no row for its destination: what the dashboard's chart asks. Rows
   * retention deleted before their bucket was counted are not counted.
   */
  async history(p: { bucket?: 'minute' | 'hour'; buckets?: number; by?: 'name' | 'component' } = {}): Promise<MessageHistory> {
    const bucket = p?.bucket ?? 'hour';
    if (bucket !== 'minute' && bucket !== 'hour') {
      throw new QueueBoxAdminError('bucket', messages.adminArgumentInvalid('bucket', 'must be "minute" or "hour"', bucket));
    }
    const buckets = p?.buckets ?? (bucket === 'hour' ? 24 : 60);
    const max = MAX_HISTORY[bucket];
    if (typeof buckets !== 'number' || !Number.isInteger(buckets) || buckets < 1 || buckets > max) {
      throw new QueueBoxAdminError('buckets', messages.adminArgumentInvalid('buckets', `must be an integer from 1 to ${max}`, buckets));
    }
    const by = p?.by ?? 'name';
    if (by !== 'name' && by !== 'component')
      throw new QueueBoxAdminError('by', messages.adminArgumentInvalid('by', 'must be "name" or "component"', by));
    return { ...(await this.historyCounts.read({ bucket, buckets, byName: by === 'name' })), sentRowsKept: this.sentRowsKept };
  }

  /**
   * Rows in flight (`processing`) of one table, oldest claim first (at most `limit`, default 50):
   * who holds them (the claim token, the owner instance and its state while the lease is live),
   * since when and how much lease is left, by the database clock.
   */
  async listClaims(p: { component: QueueTable; limit?: number }): Promise<ClaimRow[]> {
    return this.dialect.adminClaimList({ component: component(p?.component), limit: pageLimit(p?.limit) });
  }

  /**
   * Every registered QueueBox instance (one per process and DataSource), oldest first: host, pid,
   * DataSource, version, its heartbeat's age and its state (`alive`, `silent`, `dead`: see
   * `InstanceState`) by the database clock, and the rows it holds. A dead instance stays listed
   * until a live replica ends its leases.
   */
  async instances(): Promise<InstanceRow[]> {
    return this.dialect.instanceList();
  }

  /** One retention run now (see `RetentionService.runOnce`). */
  async runRetention(): Promise<RetentionResult> {
    return this.retention.runOnce();
  }

  private async inBatches(
    selection: DeadSelection,
    write: (p: { selection: DeadSelection; afterId: string | null; limit: number }) => Promise<string[]>,
  ): Promise<number> {
    let total = 0;
    let afterId: string | null = null;
    for (;;) {
      const ids = await write({ selection, afterId, limit: WRITE_BATCH });
      total += ids.length;
      if (ids.length < WRITE_BATCH) return total;
      afterId = ids.reduce((max, id) => (BigInt(id) > BigInt(max) ? id : max));
    }
  }
}

function component(value: unknown): QueueTable {
  if (value === 'outbox' || value === 'inbox') return value;
  throw new QueueBoxAdminError('component', messages.adminArgumentInvalid('component', 'must be "outbox" or "inbox"', value));
}

/** A destination or source name to pause: at most 255 characters, as the name columns hold. */
function pauseName(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 255) {
    throw new QueueBoxAdminError('name', messages.adminArgumentInvalid('name', messages.pauseNameRule(), value));
  }
  return text('name', value);
}

function pageLimit(value: unknown): number {
  if (value === undefined) return DEFAULT_PAGE;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_PAGE) {
    throw new QueueBoxAdminError('limit', messages.adminArgumentInvalid('limit', `must be an integer from 1 to ${MAX_PAGE}`, value));
  }
  return value;
}

/** A row id: a positive integer as a string, at most the bigint maximum (a larger one would fail in the database). */
export function isRowId(value: unknown): value is string {
  return typeof value === 'string' && /^[1-9][0-9]{0,18}$/.test(value) && BigInt(value) <= MAX_ROW_ID;
}

function rowId(field: string, value: unknown): string {
  if (isRowId(value)) return value;
  throw new QueueBoxAdminError(field, messages.adminArgumentInvalid(field, messages.adminRowIdRule(MAX_ROW_ID), value));
}

function text(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 2000) {
    throw new QueueBoxAdminError(
      field,
      messages.adminArgumentInvalid(field, 'must be a non-empty string of at most 2000 characters', value),
    );
  }
  // PostgreSQL text cannot hold a NUL: the statement would fail in the database instead.
  if (value.includes('\u0000')) throw new QueueBoxAdminError(field, messages.adminArgumentInvalid(field, messages.adminTextNul(), value));
  return value;
}

function fingerprintText(value: unknown): string {
  const given = text('fingerprint', value);
  if (given.length > MAX_FINGERPRINT) {
    throw new QueueBoxAdminError(
      'fingerprint',
      messages.adminArgumentInvalid('fingerprint', `must be at most ${MAX_FINGERPRINT} characters`, value),
    );
  }
  return given;
}

/** `value[key]` when `value` has it as an own property, so nothing inherited (`all` on a prototype) counts. */
function own(value: object, key: string): unknown {
  return Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
}

function date(field: string, value: unknown): Date | null {
  if (value === undefined) return null;
  // The intrinsic getTime: a Date whose own getTime lies, or a fake one, is no time here either.
  const time = dateTimeOf(value);
  if (time !== undefined) return new Date(time);
  throw new QueueBoxAdminError(field, messages.adminArgumentInvalid(field, 'must be a valid Date', value));
}

/**
 * Validates a filter or an id list; a write with no criterion at all needs `all: true`. Only the
 * selection's own properties are read, each once: an `all: true` (or a filter) inherited from a
 * prototype does not count.
 */
function toSelection(given: DeadLetterSelection, forWrite: boolean): DeadSelection {
  if (typeof given !== 'object' || given === null) {
    throw new QueueBoxAdminError('filter', messages.adminArgumentInvalid('filter', 'must be an object', given));
  }
  const kind = component(own(given, 'component'));
  const ids = own(given, 'ids');
  const fields = Object.fromEntries(FILTER_FIELDS.map((f) => [f, own(given, f)])) as Record<(typeof FILTER_FIELDS)[number], unknown>;
  if (ids !== undefined) {
    if (FILTER_FIELDS.some((f) => fields[f] !== undefined)) {
      throw new QueueBoxAdminError('ids', messages.adminSelectionAmbiguous());
    }
    if (!Array.isArray(ids) || ids.length > 100_000) {
      throw new QueueBoxAdminError('ids', messages.adminArgumentInvalid('ids', 'must be an array of at most 100000 row ids', ids));
    }
    return {
      component: kind,
      name: null,
      errorContains: null,
      deadAfter: null,
      deadBefore: null,
      ids: [...ids].map((id) => rowId('ids', id)),
      key: null,
      fingerprint: null,
    };
  }
  const selection: DeadSelection = {
    component: kind,
    name: fields.name === undefined ? null : text('name', fields.name),
    errorContains: fields.errorContains === undefined ? null : text('errorContains', fields.errorContains),
    deadAfter: date('deadAfter', fields.deadAfter),
    deadBefore: date('deadBefore', fields.deadBefore),
    ids: null,
    key: fields.key === undefined ? null : text('key', fields.key),
    fingerprint: fields.fingerprint === undefined ? null : fingerprintText(fields.fingerprint),
  };
  const empty = FILTER_FIELDS.every((f) => selection[f] === null);
  if (forWrite && empty && own(given, 'all') !== true) throw new QueueBoxAdminError('filter', messages.adminSelectionEmpty());
  return selection;
}
