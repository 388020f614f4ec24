import type { CanActivate, InjectionToken, ModuleMetadata, Type } from '@nestjs/common';
import type { QueueBoxAdmin } from '../admin/queuebox.admin';
import type { AttemptRow, DeadLetterGroupRow, InstanceRow, PauseRow } from '../dialects/dialect-rows';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import type { QueueTable } from '../types/claims';
import { dashboardMessages as messages } from './dashboard.messages';

/**
 * What the dashboard reads and changes through: `QueueBoxAdmin`'s methods (its fenced
 * statements). An object with these methods (a `QueueBoxAdmin` from
 * `createQueueBoxAdmin(dataSource)`) serves; `instances()` may be left out (the Instances view then says so).
 */
export type DashboardAdmin = Pick<
  QueueBoxAdmin,
  | 'backlog'
  | 'throughput'
  | 'listDeadLetters'
  | 'countDeadLetters'
  | 'replayDeadLetters'
  | 'discardDeadLetters'
  | 'listBlockedKeys'
  | 'skipHead'
  | 'listClaims'
> & {
  /** The processes running QueueBox with their last heartbeat (`QueueBoxAdmin.instances()`); the dashboard shows them when present. */
  instances?(): Promise<InstanceRow[]>;
  /** The message browser (`QueueBoxAdmin.findMessages` / `findMessage`); the Messages view needs them. */
  findMessages?: QueueBoxAdmin['findMessages'];
  findMessage?: QueueBoxAdmin['findMessage'];
  /** Counts per minute or hour (`QueueBoxAdmin.history`); the overview's history needs it. */
  history?: QueueBoxAdmin['history'];
  /** The paused destinations and sources (`QueueBoxAdmin.pauses()`); with `pause` and `resume`, the dashboard shows and changes them. */
  pauses?(): Promise<PauseRow[]>;
  pause?(p: { component: QueueTable; name: string; reason?: string; actor?: string }): Promise<boolean>;
  resume?(p: { component: QueueTable; name: string; actor?: string }): Promise<boolean>;
  /** Dead letters grouped by cause (`QueueBoxAdmin.deadLetterGroups()`); the dashboard shows the groups view when present. */
  deadLetterGroups?(p: { component: QueueTable; limit?: number }): Promise<DeadLetterGroupRow[]>;
  /** A row's failed attempts (`QueueBoxAdmin.listAttempts()`); the detail view shows them when present. */
  listAttempts?(p: { component: QueueTable; id: string }): Promise<AttemptRow[]>;
};

/** One QueueBox the dashboard switches between: its name (in URLs and the switch) and its admin, or the admin's injection token. */
export interface DashboardInstance {
  name: string;
  admin: DashboardAdmin | InjectionToken;
}

/** The request as the dashboard reads it (Express and Fastify both give these). */
export interface DashboardRequest {
  headers: Record<string, string | string[] | undefined>;
  method?: string;
  originalUrl?: string;
  url?: string;
  ip?: string;
  socket?: { remoteAddress?: string };
  body?: unknown;
  /** What an authentication guard (Passport, your own) set. */
  user?: unknown;
}

export type DashboardGuard = Type<CanActivate> | CanActivate;

/**
 * Options of `QueueBoxDashboardModule.forRoot()`. Static (they shape routes and guards): no async form.
 *
 * @example
 * QueueBoxDashboardModule.forRoot({ path: 'ops/queuebox', guard: AdminGuard, readOnly: process.env.NODE_ENV === 'production' })
 */
export interface QueueBoxDashboardOptions {
  /** Route of the dashboard (the page at `<path>/`, the JSON API under `<path>/api`). Default `queuebox`. */
  path?: string;
  /** Nest guard(s) run before every route, page and API alike: your operators' authentication. Required unless `public: true`. */
  guard?: DashboardGuard | DashboardGuard[];
  /** Serve without a guard (something in front of the app restricts access). Default false. */
  public?: boolean;
  /** Hide and refuse replay, discard and skip-head (403). Default false. */
  readOnly?: boolean;
  /**
   * The QueueBoxes to switch between. Default: every QueueBox of the app by its name
   * (`QueueBoxModule.forRoot({ name })`, `default` unless named), tenants attached at run time included.
   */
  instances?: DashboardInstance[];
  /**
   * Also switch between every QueueBox of the app (named ones and tenants attached at run time,
   * looked up at each request) beside `instances`, which then add to them instead of replacing
   * them. A name in `instances` takes precedence over an app QueueBox of the same name. Default:
   * true without `instances`, false with them.
   *
   * @example
   * QueueBoxDashboardModule.forRoot({ guard: OpsGuard, appQueueBoxes: true, instances: [{ name: 'archive', admin: archiveAdmin }] })
   */
  appQueueBoxes?: boolean;
  /** Who did an action, for the log line and the event. Default: `user.id`, `user.name`, `user.email` or `user.username` of the request, else its IP. */
  actor?: (request: DashboardRequest) => string | undefined;
  /** Origins (besides the request's own host) whose pages may send actions, e.g. the public origin behind a Host-rewriting proxy. */
  allowedOrigins?: string[];
  /** Derives the action token from this secret instead of a random one per process, so replicas behind one URL accept each other's page. */
  tokenSecret?: string;
  /**
   * The overview flags a destination or source whose oldest due pending message has waited longer
   * than this (a warning; critical past 5 times it). Seconds, default 60.
   */
  lagThresholdSeconds?: number;
  /** Modules whose providers the guards or instance tokens need. */
  imports?: ModuleMetadata['imports'];
}

export interface ResolvedDashboardOptions {
  path: string;
  guards: DashboardGuard[];
  isPublic: boolean;
  readOnly: boolean;
  /** Undefined: every QueueBox of the app's registry, looked up at each request (tenants come and go). */
  instances: DashboardInstance[] | undefined;
  /** Whether the app's QueueBoxes (its registry, read at each request) are listed, before `instances`. */
  appQueueBoxes: boolean;
  actor: ((request: DashboardRequest) => string | undefined) | undefined;
  allowedOrigins: string[];
  tokenSecret: string | undefined;
  lagThresholdSeconds: number;
  imports: NonNullable<ModuleMetadata['imports']>;
}

const KEYS = [
  'path',
  'guard',
  'public',
  'readOnly',
  'instances',
  'appQueueBoxes',
  'actor',
  'allowedOrigins',
  'tokenSecret',
  'lagThresholdSeconds',
  'imports',
] as const;
const PATH = /^\/?[A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*\/?$/;
const INSTANCE_NAME = /^[A-Za-z0-9._-]{1,64}$/;

const isGuard = (value: unknown): value is DashboardGuard =>
  typeof value === 'function' ||
  (typeof value === 'object' && value !== null && typeof (value as { canActivate?: unknown }).canActivate === 'function');

/**
 * Validates the options; a dashboard with neither a guard nor `public: true` never starts. Only
 * the object's own properties count, as for `QueueBoxModule` (Nest copies its options key by
 * key): a `public: true` inherited from a prototype must not mount the dashboard without a guard.
 */
export function resolveDashboardOptions(given: QueueBoxDashboardOptions): ResolvedDashboardOptions {
  const fail = (option: string, message: string) => new QueueBoxConfigError(`dashboard${option ? `.${option}` : ''}`, message);
  if (typeof given !== 'object' || given === null) throw fail('', messages.optionsNotObject(given));
  // Each own property read once (a getter cannot answer one value to a check and another to the use).
  const options: QueueBoxDashboardOptions = Object.fromEntries(Object.entries(given));
  for (const key of Object.keys(options)) {
    if (!(KEYS as readonly string[]).includes(key)) throw fail(key, messages.optionUnknown(key, KEYS));
  }
  const path = options.path ?? 'queuebox';
  if (typeof path !== 'string' || !PATH.test(path) || path.split('/').some((part) => part === '.' || part === '..')) {
    throw fail('path', messages.pathInvalid(path));
  }

  const isPublic = options.public ?? false;
  if (typeof isPublic !== 'boolean') throw fail('public', messages.booleanInvalid('public', isPublic));
  const guards = options.guard === undefined ? [] : Array.isArray(options.guard) ? options.guard : [options.guard];
  if (!guards.every(isGuard)) throw fail('guard', messages.guardInvalid(options.guard));
  if (guards.length === 0 && !isPublic) throw fail('guard', messages.guardMissing());
  if (guards.length > 0 && isPublic) throw fail('public', messages.guardAndPublic());

  const readOnly = options.readOnly ?? false;
  if (typeof readOnly !== 'boolean') throw fail('readOnly', messages.booleanInvalid('readOnly', readOnly));

  const instances = options.instances ?? [];
  if (!Array.isArray(instances) || (options.instances !== undefined && instances.length === 0)) {
    throw fail('instances', messages.instancesInvalid(instances));
  }
  const names = new Set<string>();
  for (const instance of instances) {
    if (typeof instance !== 'object' || instance === null || instance.admin === undefined || instance.admin === null) {
      throw fail('instances', messages.instancesInvalid(instance));
    }
    if (typeof instance.name !== 'string' || !INSTANCE_NAME.test(instance.name)) {
      throw fail('instances', messages.instanceNameInvalid(instance.name));
    }
    if (names.has(instance.name)) throw fail('instances', messages.instanceNameRepeated(instance.name));
    names.add(instance.name);
  }

  const appQueueBoxes = options.appQueueBoxes ?? options.instances === undefined;
  if (typeof appQueueBoxes !== 'boolean') throw fail('appQueueBoxes', messages.booleanInvalid('appQueueBoxes', appQueueBoxes));
  if (!appQueueBoxes && options.instances === undefined) throw fail('appQueueBoxes', messages.noInstancesShown());

  if (options.actor !== undefined && typeof options.actor !== 'function')
    throw fail('actor', messages.functionInvalid('actor', options.actor));

  const allowedOrigins = options.allowedOrigins ?? [];
  if (!Array.isArray(allowedOrigins) || !allowedOrigins.every(isOrigin)) {
    throw fail('allowedOrigins', messages.allowedOriginsInvalid(allowedOrigins));
  }
  if (options.tokenSecret !== undefined && (typeof options.tokenSecret !== 'string' || options.tokenSecret.length < 32)) {
    throw fail('tokenSecret', messages.tokenSecretInvalid());
  }
  const lagThresholdSeconds = options.lagThresholdSeconds ?? 60;
  if (
    typeof lagThresholdSeconds !== 'number' ||
    !Number.isFinite(lagThresholdSeconds) ||
    lagThresholdSeconds < 1 ||
    lagThresholdSeconds > 86_400
  ) {
    throw fail('lagThresholdSeconds', messages.lagThresholdInvalid(lagThresholdSeconds));
  }
  return {
    path: path.replace(/^\/+|\/+$/g, ''),
    guards,
    isPublic,
    readOnly,
    instances: options.instances === undefined ? undefined : instances.map((i) => ({ name: i.name, admin: i.admin })),
    appQueueBoxes,
    actor: options.actor,
    allowedOrigins: allowedOrigins.map((o) => new URL(o).origin),
    tokenSecret: options.tokenSecret,
    lagThresholdSeconds,
    imports: options.imports ?? [],
  };
}

function isOrigin(value: unknown): boolean {
  if (typeof value !== 'string') return false;
  try {
    const url = new URL(value);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.origin === value.replace(/\/$/, '');
  } catch {
    return false;
  }
}
