import { HttpStatus, Inject, Injectable, Logger, type OnModuleInit, Optional } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { DeadLetterFilter, DeadLetterSelection } from '../admin/admin.types';
import type { MessageFilter, MessagePage, MessagePageResult } from '../admin/message-search';
import { QueueBoxAdmin } from '../admin/queuebox.admin';
import { QueueBoxRegistry } from '../core/queuebox.registry';
import type { AttemptRow, DeadLetterGroupRow, DeadLetterRow, PauseRow, SkipHeadTarget, ThroughputRow } from '../dialects/dialect-rows';
import type { MessageHistory, MessageRow } from '../dialects/message-rows';
import { byComponentAndName } from '../dialects/records';
import { QueueBoxAdminError, QueueBoxConfigError } from '../errors/queuebox.errors';
import { type DashboardActionEvent, QueueBoxEvents } from '../events/queuebox.events';
import type { DoctorReport } from '../health/database-doctor';
import { QueueBoxDoctor } from '../health/queuebox.doctor';
import { getQueueBoxEventsToken } from '../module/queuebox.tokens';
import type { QueueTable } from '../types/claims';
import { TRACEPARENT_HEADER } from '../wire-headers';
import { QUEUEBOX_DASHBOARD_OPTIONS } from './dashboard.constants';
import { collectFlags, type OverviewFlag } from './dashboard.flags';
import { dashboardMessages as messages } from './dashboard.messages';
import type { DashboardAdmin, DashboardRequest, ResolvedDashboardOptions } from './dashboard.options';
import { DashboardHttpError } from './dashboard.security';

/** One row of the overview: the backlog of a destination or source and its last hour, per minute. */
export interface OverviewRow {
  component: QueueTable;
  name: string;
  pending: number;
  processing: number;
  dead: number;
  /** The lag: age of the oldest due pending row, by the database clock. */
  oldestPendingAgeSeconds: number | null;
  /** Sent (outbox) or processed (inbox) per minute, oldest first, the current minute last. */
  finishedPerMinute: number[];
  /** Dead-lettered per minute. */
  deadPerMinute: number[];
  /** Paused (issue 40): claims skip its rows until it is resumed. */
  paused: boolean;
}

/** Dead rows of a page filter, as the API takes them (strings from the query, or JSON). */
export interface DeadLetterQuery {
  name?: string;
  key?: string;
  error?: string;
  from?: string;
  to?: string;
  /** A dead-letter group's fingerprint, exactly. */
  fingerprint?: string;
}

/**
 * Resolves the instances' admins at start-up and runs every read and action for the controller.
 * Actions go through QueueBoxAdmin only (replay and discard change dead rows; skip-head never a
 * live claim), are logged with who did them, and emitted as `queuebox:dashboard:action`.
 */
@Injectable()
export class DashboardService implements OnModuleInit {
  private readonly logger = new Logger('QueueBox:Dashboard');
  private readonly admins = new Map<string, DashboardAdmin>();
  private events: QueueBoxEvents = new QueueBoxEvents();

  constructor(
    @Inject(QUEUEBOX_DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly moduleRef: ModuleRef,
    @Optional() private readonly registry?: QueueBoxRegistry,
  ) {}

  onModuleInit(): void {
    if (this.options.appQueueBoxes && this.options.instances === undefined && this.registry === undefined) {
      throw new QueueBoxConfigError('dashboard.instances', messages.noQueueBox());
    }
    for (const { name, admin } of this.options.instances ?? []) {
      this.admins.set(name, isAdmin(admin) ? admin : this.lookUp(name, admin));
    }
    try {
      // The default QueueBox's, by token: with several QueueBoxes the class alone names none of them.
      this.events = this.moduleRef.get(getQueueBoxEventsToken(), { strict: false });
    } catch {
      // No QueueBoxModule in this app (instances given as createQueueBoxAdmin() objects): the
      // events still reach node:diagnostics_channel through a QueueBoxEvents of our own.
    }
    const { path, readOnly, isPublic } = this.options;
    this.logger.log(messages.started(path, this.instanceNames(), readOnly, isPublic));
  }

  /** Every QueueBox of the app now (tenants come and go) when `appQueueBoxes`, then the configured instances. */
  instanceNames(): string[] {
    const given = [...this.admins.keys()];
    if (!this.options.appQueueBoxes) return given;
    return [...(this.registry?.names() ?? []).filter((name) => !this.admins.has(name)), ...given];
  }

  /** Whether an instance's admin can list instances and heartbeats (QueueBoxAdmin can; a DashboardAdmin of your own may not). */
  hasHeartbeats(instance: string): boolean {
    return typeof this.admin(instance).instances === 'function';
  }

  admin(instance: string): DashboardAdmin {
    const admin = this.admins.get(instance) ?? (this.options.appQueueBoxes ? this.registry?.find(instance)?.get(QueueBoxAdmin) : undefined);
    if (!admin) {
      throw new DashboardHttpError(
        HttpStatus.NOT_FOUND,
        'QUEUEBOX_DASHBOARD_NOT_FOUND',
        messages.instanceUnknown(instance, this.instanceNames()),
      );
    }
    return admin;
  }

  /**
   * The database warnings of an app QueueBox (its `QueueBoxDoctor`): the last examination, or a new
   * one when asked (`refresh`) or when none ran yet. An instance given as an admin made outside the
   * app's QueueBoxes (`createQueueBoxAdmin`) has no doctor here: `available: false` and why
   * (`queuebox doctor` examines its database).
   */
  async warnings(instance: string, refresh: boolean): Promise<{ available: boolean; reason?: string } & Partial<DoctorReport>> {
    const doctor = this.doctorOf(instance);
    if (!doctor) return { available: false, reason: messages.warningsUnavailable(), warnings: [], notChecked: [] };
    const report = refresh || doctor.latest === undefined ? await doctor.check() : doctor.latest;
    return { available: true, ...report };
  }

  /** The doctor of the app QueueBox whose admin this instance uses (by name, or given by its token); none for an admin of its own. */
  private doctorOf(instance: string): QueueBoxDoctor | undefined {
    const admin = this.admin(instance);
    return this.registry
      ?.list()
      .find((entry) => entry.get(QueueBoxAdmin) === admin)
      ?.get(QueueBoxDoctor);
  }

  async overview(
    instance: string,
    minutes: number,
  ): Promise<{
    since: Date;
    minutes: number;
    rows: OverviewRow[];
    flags: OverviewFlag[];
    lagThresholdSeconds: number;
    pauses: PauseRow[] | null;
    sentRowsKept: boolean;
  }> {
    const admin = this.admin(instance);
    const [backlog, throughput, pauses] = await Promise.all([
      admin.backlog(),
      adminCall(() => admin.throughput({ minutes })),
      typeof admin.pauses === 'function' ? admin.pauses() : null,
    ]);
    const rows = new Map<string, OverviewRow>();
    const empty = () => new Array<number>(throughput.minutes).fill(0);
    /** The row of a destination or source, added with nothing counted when the backlog has none. */
    const rowOf = (component: QueueTable, name: string): OverviewRow => {
      const id = `${component}\u0000${name}`;
      let row = rows.get(id);
      if (!row) {
        row = {
          component,
          name,
          pending: 0,
          processing: 0,
          dead: 0,
          oldestPendingAgeSeconds: null,
          finishedPerMinute: empty(),
          deadPerMinute: empty(),
          paused: false,
        };
        rows.set(id, row);
      }
      return row;
    };
    for (const b of backlog)
      rows.set(`${b.component}\u0000${b.name}`, { ...b, finishedPerMinute: empty(), deadPerMinute: empty(), paused: false });
    // Issue 40: a paused destination or source is flagged, and listed even with nothing waiting (to resume it here).
    for (const p of pauses ?? []) rowOf(p.component, p.name).paused = true;
    for (const t of throughput.rows as ThroughputRow[]) {
      const row = rowOf(t.component, t.name);
      row.finishedPerMinute = t.finished;
      row.deadPerMinute = t.dead;
    }
    const sorted = [...rows.values()].sort(byComponentAndName);
    const doctor = this.doctorOf(instance);
    const warnings = doctor && (async () => doctor.latest ?? (await doctor.check()));
    const flags = await collectFlags({ instance, admin, backlog: sorted, options: this.options, warnings, pauses });
    return {
      since: throughput.since,
      minutes: throughput.minutes,
      rows: sorted,
      flags,
      lagThresholdSeconds: this.options.lagThresholdSeconds,
      pauses,
      // False with `outbox.sentRows: 'delete'` (an admin of an older version: kept).
      sentRowsKept: (throughput as { sentRowsKept?: boolean }).sentRowsKept !== false,
    };
  }

  /** The message browser: one page of `QueueBoxAdmin.findMessages` (a bad argument is a 400 naming it). */
  async messages(instance: string, filter: MessageFilter, page: MessagePage): Promise<MessagePageResult<MessageRow>> {
    const admin = this.admin(instance);
    if (typeof admin.findMessages !== 'function') {
      throw new DashboardHttpError(HttpStatus.NOT_FOUND, 'QUEUEBOX_DASHBOARD_NOT_FOUND', messages.messagesUnavailable());
    }
    return adminCall(() => (admin.findMessages as NonNullable<typeof admin.findMessages>)(filter, page));
  }

  /** One row of either table, any state, with its payload and trace id, or 404. */
  async message(instance: string, component: QueueTable, id: string): Promise<MessageRow & { traceId: string | null }> {
    const admin = this.admin(instance);
    if (typeof admin.findMessage !== 'function') {
      throw new DashboardHttpError(HttpStatus.NOT_FOUND, 'QUEUEBOX_DASHBOARD_NOT_FOUND', messages.messagesUnavailable());
    }
    const row = await adminCall(() => (admin.findMessage as NonNullable<typeof admin.findMessage>)({ component, id }));
    if (row === null)
      throw new DashboardHttpError(HttpStatus.NOT_FOUND, 'QUEUEBOX_DASHBOARD_NOT_FOUND', messages.messageNotFound(component, id));
    return { ...row, traceId: traceIdOf(row.headers) };
  }

  /** Counts per minute or hour (`QueueBoxAdmin.history`). */
  async history(instance: string, bucket: 'minute' | 'hour', buckets: number, by: 'name' | 'component'): Promise<MessageHistory> {
    const admin = this.admin(instance);
    if (typeof admin.history !== 'function') {
      throw new DashboardHttpError(HttpStatus.NOT_FOUND, 'QUEUEBOX_DASHBOARD_NOT_FOUND', messages.historyUnavailable());
    }
    return adminCall(() => (admin.history as NonNullable<typeof admin.history>)({ bucket, buckets, by }));
  }

  async deadLetters(
    instance: string,
    component: QueueTable,
    query: DeadLetterQuery,
    page: { afterId?: string; limit: number; newestFirst: boolean },
  ): Promise<{ rows: DeadLetterRow[]; nextAfterId: string | null }> {
    const admin = this.admin(instance);
    return adminCall(() => admin.listDeadLetters(toFilter(component, query), page));
  }

  async countDeadLetters(instance: string, component: QueueTable, query: DeadLetterQuery): Promise<number> {
    const admin = this.admin(instance);
    return adminCall(() => admin.countDeadLetters(toFilter(component, query)));
  }

  /** One dead row with its payload and the trace id of its `traceparent` header, or 404. */
  async deadLetter(instance: string, component: QueueTable, id: string): Promise<DeadLetterRow & { traceId: string | null }> {
    const admin = this.admin(instance);
    const { rows } = await adminCall(() => admin.listDeadLetters({ component, ids: [id] }, { includePayload: true, limit: 1 }));
    if (rows.length === 0) {
      throw new DashboardHttpError(HttpStatus.NOT_FOUND, 'QUEUEBOX_DASHBOARD_NOT_FOUND', messages.deadLetterNotFound(component, id));
    }
    return { ...rows[0], traceId: traceIdOf(rows[0].headers) };
  }

  /** Dead letters grouped by cause; `available: false` (with why) for an admin without `deadLetterGroups`. */
  deadLetterGroups(instance: string, component: QueueTable, limit: number): Promise<OptionalRows<DeadLetterGroupRow>> {
    const admin = this.admin(instance);
    return optionalRows(admin, admin.deadLetterGroups, { component, limit }, messages.groupsUnavailable);
  }

  /** A row's failed attempts, newest first; `available: false` (with why) for an admin without `listAttempts`. */
  attempts(instance: string, component: QueueTable, id: string): Promise<OptionalRows<AttemptRow>> {
    const admin = this.admin(instance);
    return optionalRows(admin, admin.listAttempts, { component, id }, messages.attemptsUnavailable);
  }

  /** Replays or discards dead rows picked by ids or by a filter; returns how many changed. */
  async changeDeadLetters(
    request: DashboardRequest,
    instance: string,
    action: 'replay' | 'discard',
    body: { component: QueueTable; ids?: string[]; filter?: DeadLetterQuery; all?: boolean },
  ): Promise<number> {
    const admin = this.admin(instance);
    let selection: DeadLetterSelection;
    let described: DashboardActionEvent['selection'];
    if (body.ids !== undefined) {
      selection = { component: body.component, ids: body.ids };
      described = { ids: body.ids };
    } else if (body.filter !== undefined) {
      const filter = toFilter(body.component, body.filter);
      selection = { ...filter, all: body.all === true };
      described = { filter: describeFilter(filter), all: body.all === true };
    } else {
      throw new DashboardHttpError(HttpStatus.BAD_REQUEST, 'QUEUEBOX_DASHBOARD_BAD_REQUEST', messages.selectionMissing());
    }
    const changed = await adminCall(() => (action === 'replay' ? admin.replayDeadLetters(selection) : admin.discardDeadLetters(selection)));
    this.record(request, { action, instance, component: body.component, changed, selection: described });
    return changed;
  }

  /** Skips the head of a blocked key or aggregate; returns the id skipped, or null. */
  async skipHead(request: DashboardRequest, instance: string, target: SkipHeadTarget): Promise<string | null> {
    const admin = this.admin(instance);
    const skippedId = await adminCall(() => admin.skipHead(target));
    const selection =
      target.component === 'outbox'
        ? { key: target.key, headId: target.headId, reason: target.reason }
        : { key: target.aggregateId, source: target.source, headId: target.headId, reason: target.reason };
    this.record(request, {
      action: 'skip-head',
      instance,
      component: target.component,
      changed: skippedId === null ? 0 : 1,
      selection,
      skippedId,
    });
    return skippedId;
  }

  /**
   * Pauses or resumes a destination (outbox) or source (inbox) through the admin, which stores the
   * actor with the pause; logged and emitted as every action. Returns whether it changed (false:
   * paused, or resumed, already).
   */
  async changePause(
    request: DashboardRequest,
    instance: string,
    action: 'pause' | 'resume',
    target: { component: QueueTable; name: string; reason?: string },
  ): Promise<boolean> {
    const admin = this.admin(instance);
    if (typeof admin.pause !== 'function' || typeof admin.resume !== 'function') {
      throw new DashboardHttpError(HttpStatus.NOT_IMPLEMENTED, 'QUEUEBOX_DASHBOARD_UNAVAILABLE', messages.pausesUnavailable());
    }
    const actor = this.actorOf(request);
    const { component, name, reason } = target;
    const changed = await adminCall(() =>
      action === 'pause'
        ? (admin.pause as NonNullable<DashboardAdmin['pause']>)({ component, name, reason, actor })
        : (admin.resume as NonNullable<DashboardAdmin['resume']>)({ component, name, actor }),
    );
    this.record(request, {
      action,
      instance,
      component,
      changed: changed ? 1 : 0,
      selection: reason === undefined ? { name } : { name, reason },
    });
    return changed;
  }

  /** Who made the request: the `actor` option, else the authenticated user's id, name, email or username, else the IP. */
  actorOf(request: DashboardRequest): string {
    const chosen = this.options.actor?.(request);
    if (typeof chosen === 'string' && chosen.length > 0) return chosen.slice(0, 200);
    const user = request.user as Record<string, unknown> | undefined;
    for (const field of ['id', 'name', 'email', 'username'] as const) {
      const value = user?.[field];
      if ((typeof value === 'string' && value.length > 0) || typeof value === 'number') return String(value).slice(0, 200);
    }
    return request.ip ?? request.socket?.remoteAddress ?? 'unknown';
  }

  private record(request: DashboardRequest, event: Omit<DashboardActionEvent, 'actor'>): void {
    const actor = this.actorOf(request);
    const full: DashboardActionEvent = { ...event, actor };
    this.logger.log(messages.action(actor, event.action, event.instance, event.component, event.changed, JSON.stringify(event.selection)));
    this.events.emit('queuebox:dashboard:action', full);
  }

  private lookUp(name: string, token: unknown): DashboardAdmin {
    try {
      const found = this.moduleRef.get(token as never, { strict: false });
      if (isAdmin(found)) return found;
    } catch {
      // reported below
    }
    const label = typeof token === 'function' ? token.name : String(token);
    throw new QueueBoxConfigError('dashboard.instances', messages.instanceMissing(name, label));
  }
}

/** The trace id of a `traceparent` header, or null. */
function traceIdOf(headers: Record<string, string>): string | null {
  const traceparent = headers[TRACEPARENT_HEADER];
  return typeof traceparent === 'string' ? (/^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(traceparent)?.[1] ?? null) : null;
}

/** What the dashboard answers for a read that a `DashboardAdmin` of your own may lack: its rows, or `available: false` and why. */
type OptionalRows<R> = { available: boolean; reason?: string; rows: R[] };

/** The rows of `admin`'s optional `read` (QueueBoxAdmin has it), or `available: false` with why (`unavailable`) when it has none. */
async function optionalRows<P, R>(
  admin: DashboardAdmin,
  read: ((this: DashboardAdmin, p: P) => Promise<R[]>) | undefined,
  params: P,
  unavailable: () => string,
): Promise<OptionalRows<R>> {
  if (typeof read !== 'function') return { available: false, reason: unavailable(), rows: [] };
  return { available: true, rows: await adminCall(() => read.call(admin, params)) };
}

function isAdmin(value: unknown): value is DashboardAdmin {
  return typeof value === 'object' && value !== null && typeof (value as DashboardAdmin).backlog === 'function';
}

/** A QueueBoxAdmin argument error is the caller's: 400 with its field. */
async function adminCall<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof QueueBoxAdminError || (error as { code?: string }).code === 'QUEUEBOX_ADMIN_ARGUMENT') {
      const { field, message } = error as QueueBoxAdminError;
      throw new DashboardHttpError(HttpStatus.BAD_REQUEST, 'QUEUEBOX_DASHBOARD_BAD_REQUEST', message, field);
    }
    // A search for sent rows where the app deletes them: the filter asks for what cannot exist.
    if ((error as { code?: string }).code === 'QUEUEBOX_SENT_ROWS_NOT_KEPT') {
      throw new DashboardHttpError(HttpStatus.BAD_REQUEST, 'QUEUEBOX_DASHBOARD_BAD_REQUEST', (error as Error).message, 'state');
    }
    throw error;
  }
}

function toFilter(component: QueueTable, query: DeadLetterQuery): DeadLetterFilter {
  const text = (field: keyof DeadLetterQuery) => {
    const value = query[field];
    if (value === undefined || value === '') return undefined;
    if (typeof value !== 'string') {
      throw new DashboardHttpError(
        HttpStatus.BAD_REQUEST,
        'QUEUEBOX_DASHBOARD_BAD_REQUEST',
        messages.parameterInvalid(field, 'must be a string', value),
        field,
      );
    }
    return value;
  };
  const time = (field: 'from' | 'to') => {
    const value = text(field);
    if (value === undefined) return undefined;
    const date = new Date(value);
    if (Number.isNaN(date.getTime()) || !/^\d{4}-\d{2}-\d{2}/.test(value)) {
      throw new DashboardHttpError(
        HttpStatus.BAD_REQUEST,
        'QUEUEBOX_DASHBOARD_BAD_REQUEST',
        messages.parameterInvalid(field, 'must be an ISO 8601 time such as 2026-11-30T14:00:00Z', value),
        field,
      );
    }
    return date;
  };
  return {
    component,
    name: text('name'),
    key: text('key'),
    errorContains: text('error'),
    deadAfter: time('from'),
    deadBefore: time('to'),
    fingerprint: text('fingerprint'),
  };
}

function describeFilter(filter: DeadLetterFilter): Extract<DashboardActionEvent['selection'], { filter: unknown }>['filter'] {
  const described: Record<string, string> = {};
  if (filter.name !== undefined) described.name = filter.name;
  if (filter.key !== undefined) described.key = filter.key;
  if (filter.errorContains !== undefined) described.errorContains = filter.errorContains;
  if (filter.deadAfter !== undefined) described.deadAfter = filter.deadAfter.toISOString();
  if (filter.deadBefore !== undefined) described.deadBefore = filter.deadBefore.toISOString();
  if (filter.fingerprint !== undefined) described.fingerprint = filter.fingerprint;
  return described;
}
