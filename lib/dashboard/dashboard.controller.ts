import {
  Body,
  Controller,
  Get,
  HttpCode,
  HttpStatus,
  Inject,
  Param,
  Post,
  Query,
  Req,
  Res,
  StreamableFile,
  type Type,
  UseGuards,
} from '@nestjs/common';
import type { MessageFilter, MessagePage } from '../admin/message-search';
import type { SkipHeadTarget } from '../dialects/dialect-rows';
import type { QueueTable } from '../types/claims';
import { DASHBOARD_CSP, type DashboardAsset, dashboardPage } from './dashboard.assets';
import { QUEUEBOX_DASHBOARD_ACTION_CHECK, QUEUEBOX_DASHBOARD_ASSETS, QUEUEBOX_DASHBOARD_OPTIONS } from './dashboard.constants';
import { dashboardMessages as messages } from './dashboard.messages';
import type { DashboardRequest, ResolvedDashboardOptions } from './dashboard.options';
import { DASHBOARD_TOKEN_HEADER, type DashboardActionCheck, DashboardHttpError } from './dashboard.security';
import { DashboardService, type DeadLetterQuery } from './dashboard.service';

/** What the controller sets on a response (Express's `Response` and Fastify's `Reply` both have these). */
interface DashboardResponse {
  status(code: number): unknown;
  header(name: string, value: string): unknown;
}

const PAGE_LIMIT = { default: 50, max: 200 };

const bad = (name: string, rule: string, value: unknown) =>
  new DashboardHttpError(HttpStatus.BAD_REQUEST, 'QUEUEBOX_DASHBOARD_BAD_REQUEST', messages.parameterInvalid(name, rule, value), name);

function component(value: unknown): QueueTable {
  if (value === undefined || value === 'outbox') return 'outbox';
  if (value === 'inbox') return 'inbox';
  throw bad('component', 'must be "outbox" or "inbox"', value);
}

function integer(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined || value === '') return fallback;
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isInteger(n) || n < min || n > max) throw bad(name, `must be an integer from ${min} to ${max}`, value);
  return n;
}

/**
 * Refuses (415) an action whose body is not declared JSON. The app's body parsers also read
 * url-encoded forms (which any page can post cross-site) and plain text: only
 * `Content-Type: application/json`, with or without parameters such as `charset`, is an action.
 */
function requireJson(request: DashboardRequest): void {
  const given = request.headers['content-type'];
  const type = Array.isArray(given) ? given[0] : given;
  if (type?.split(';')[0].trim().toLowerCase() === 'application/json') return;
  throw new DashboardHttpError(HttpStatus.UNSUPPORTED_MEDIA_TYPE, 'QUEUEBOX_DASHBOARD_NOT_JSON', messages.bodyNotJsonType(type));
}

function bodyObject(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new DashboardHttpError(HttpStatus.BAD_REQUEST, 'QUEUEBOX_DASHBOARD_BAD_REQUEST', messages.bodyNotJson());
  }
  return body as Record<string, unknown>;
}

function optionalString(name: string, value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw bad(name, 'must be a string', value);
  return value;
}

function deadLetterQuery(query: Record<string, unknown>): DeadLetterQuery {
  return {
    name: optionalString('name', query.name),
    key: optionalString('key', query.key),
    error: optionalString('error', query.error),
    from: optionalString('from', query.from),
    to: optionalString('to', query.to),
    fingerprint: optionalString('fingerprint', query.fingerprint),
  };
}

/** An instant with an explicit zone (`Z` or `+01:00`): the API never guesses one. */
function instant(name: string, value: unknown): Date | undefined {
  const text = optionalString(name, value);
  if (text === undefined || text === '') return undefined;
  const date = new Date(text);
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/.test(text) || Number.isNaN(date.getTime())) {
    throw bad(name, 'must be an ISO 8601 time with its zone, such as 2026-11-30T14:00:00Z', value);
  }
  return date;
}

/** The message browser's query: every filter of `QueueBoxAdmin.findMessages`, as strings. */
function messageQuery(query: Record<string, unknown>): { filter: MessageFilter; page: MessagePage } {
  const text = (name: string) => optionalString(name, query[name]) || undefined;
  const path = text('path');
  const pathIn = text('pathIn') ?? 'payload';
  if (pathIn !== 'payload' && pathIn !== 'headers') throw bad('pathIn', 'must be "payload" or "headers"', pathIn);
  return {
    filter: {
      component: component(query.component),
      messageId: text('id'),
      key: text('key'),
      name: text('name'),
      state: text('state') as MessageFilter['state'],
      time: text('time') as MessageFilter['time'],
      since: instant('since', query.since),
      until: instant('until', query.until),
      path: path === undefined ? undefined : { in: pathIn, path, equals: optionalString('value', query.value) ?? '' },
    },
    page: {
      after: text('after'),
      limit: integer('limit', query.limit, PAGE_LIMIT.default, 1, PAGE_LIMIT.max),
      scanLimit: integer('scan', query.scan, 100_000, 1, 1_000_000),
    },
  };
}

/** Headers of every answer: nothing cached (API answers hold live data, the page a per-process token path), nothing framed or sniffed. */
function secure(response: DashboardResponse, cache = 'no-store'): void {
  response.header('Cache-Control', cache);
  response.header('X-Content-Type-Options', 'nosniff');
  response.header('Referrer-Policy', 'no-referrer');
  response.header('X-Frame-Options', 'DENY');
}

/**
 * Builds the dashboard's controller for the configured path and guards (decorators take their
 * arguments when the class is declared, so it is declared here, once per module). Routes:
 * the page, its assets, and the JSON API (docs/dashboard.md lists them). Every route, the page
 * and its assets included, runs the guards; every POST passes the action check first.
 */
export function createDashboardController(options: ResolvedDashboardOptions): Type<unknown> {
  @Controller(options.path)
  @UseGuards(...options.guards)
  class QueueBoxDashboardController {
    constructor(
      private readonly dashboard: DashboardService,
      @Inject(QUEUEBOX_DASHBOARD_ACTION_CHECK) private readonly actions: DashboardActionCheck,
      @Inject(QUEUEBOX_DASHBOARD_ASSETS) private readonly assets: Map<string, DashboardAsset>,
      @Inject(QUEUEBOX_DASHBOARD_OPTIONS) private readonly resolved: ResolvedDashboardOptions,
    ) {}

    /** The page. Without its trailing slash it redirects to it, so the page's relative URLs work under any global prefix. */
    @Get()
    page(@Req() request: DashboardRequest, @Res({ passthrough: true }) response: DashboardResponse): string {
      const url = (request.originalUrl ?? request.url ?? '/').split('?')[0];
      secure(response);
      if (!url.endsWith('/')) {
        response.status(HttpStatus.FOUND);
        response.header('Location', `${url.slice(url.lastIndexOf('/') + 1)}/`);
        return '';
      }
      response.header('Content-Type', 'text/html; charset=utf-8');
      response.header('Content-Security-Policy', DASHBOARD_CSP);
      return dashboardPage();
    }

    /** A built file of the page (only those in the package); gzipped when the browser takes it. */
    @Get('assets/:file')
    asset(
      @Param('file') file: string,
      @Req() request: DashboardRequest,
      @Res({ passthrough: true }) response: DashboardResponse,
    ): StreamableFile | string {
      const asset = this.assets.get(file);
      if (!asset)
        throw new DashboardHttpError(
          HttpStatus.NOT_FOUND,
          'QUEUEBOX_DASHBOARD_NOT_FOUND',
          messages.parameterInvalid('file', 'is not a dashboard file', file),
        );
      secure(response, 'no-cache');
      response.header('ETag', asset.etag);
      response.header('Vary', 'Accept-Encoding');
      if (request.headers['if-none-match'] === asset.etag) {
        response.status(HttpStatus.NOT_MODIFIED);
        return '';
      }
      const gzip = /\bgzip\b/.test(String(request.headers['accept-encoding'] ?? ''));
      if (gzip) response.header('Content-Encoding', 'gzip');
      const body = gzip ? asset.gzipped : asset.body;
      return new StreamableFile(body, { type: asset.type, length: body.length });
    }

    /** What the page (or a script) needs first: the action token, read-only or not, who it is, the instances. */
    @Get('api/session')
    session(@Req() request: DashboardRequest, @Res({ passthrough: true }) response: DashboardResponse) {
      secure(response);
      const instances = this.dashboard.instanceNames();
      return {
        token: this.actions.token,
        tokenHeader: DASHBOARD_TOKEN_HEADER,
        readOnly: this.resolved.readOnly,
        actor: this.dashboard.actorOf(request),
        instances: instances.map((name) => ({ name, heartbeats: this.dashboard.hasHeartbeats(name) })),
      };
    }

    @Get('api/:instance/overview')
    overview(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      return this.dashboard.overview(instance, integer('minutes', query.minutes, 60, 1, 1440));
    }

    @Get('api/:instance/dead-letters')
    deadLetters(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      const order = query.order ?? 'newest';
      if (order !== 'newest' && order !== 'oldest') throw bad('order', 'must be "newest" or "oldest"', order);
      return this.dashboard.deadLetters(instance, component(query.component), deadLetterQuery(query), {
        afterId: optionalString('after', query.after) || undefined,
        limit: integer('limit', query.limit, PAGE_LIMIT.default, 1, PAGE_LIMIT.max),
        newestFirst: order === 'newest',
      });
    }

    @Get('api/:instance/dead-letters/count')
    async countDeadLetters(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      return { count: await this.dashboard.countDeadLetters(instance, component(query.component), deadLetterQuery(query)) };
    }

    /** Dead letters grouped by destination (source) and fingerprint, the biggest first. */
    @Get('api/:instance/dead-letters/groups')
    deadLetterGroups(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      const limit = integer('limit', query.limit, PAGE_LIMIT.default, 1, PAGE_LIMIT.max);
      return this.dashboard.deadLetterGroups(instance, component(query.component), limit);
    }

    /** The failed attempts of one row, any state (`QueueBoxAdmin.listAttempts`). */
    @Get('api/:instance/attempts/:component/:id')
    attempts(
      @Param('instance') instance: string,
      @Param('component') kind: string,
      @Param('id') id: string,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      return this.dashboard.attempts(instance, component(kind), id);
    }

    @Get('api/:instance/dead-letters/:component/:id')
    deadLetter(
      @Param('instance') instance: string,
      @Param('component') kind: string,
      @Param('id') id: string,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      return this.dashboard.deadLetter(instance, component(kind), id);
    }

    @Post('api/:instance/dead-letters/replay')
    @HttpCode(HttpStatus.OK)
    replay(@Param('instance') instance: string, @Req() request: DashboardRequest, @Res({ passthrough: true }) response: DashboardResponse) {
      return this.changeDeadLetters('replay', instance, request, response);
    }

    @Post('api/:instance/dead-letters/discard')
    @HttpCode(HttpStatus.OK)
    discard(
      @Param('instance') instance: string,
      @Req() request: DashboardRequest,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      return this.changeDeadLetters('discard', instance, request, response);
    }

    @Get('api/:instance/blocked')
    async blocked(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      const admin = this.dashboard.admin(instance);
      const limit = integer('limit', query.limit, PAGE_LIMIT.default, 1, PAGE_LIMIT.max);
      return { rows: await admin.listBlockedKeys({ component: component(query.component), limit }) };
    }

    @Post('api/:instance/blocked/skip-head')
    @HttpCode(HttpStatus.OK)
    async skipHead(
      @Param('instance') instance: string,
      @Req() request: DashboardRequest,
      @Body() raw: unknown,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      this.actions.check(request);
      this.dashboard.admin(instance); // 404 before reading the body
      requireJson(request);
      const body = bodyObject(raw);
      const kind = component(body.component);
      const headId = optionalString('headId', body.headId);
      const reason = optionalString('reason', body.reason);
      const target: SkipHeadTarget =
        kind === 'outbox'
          ? { component: 'outbox', key: optionalString('key', body.key) ?? '', headId, reason }
          : {
              component: 'inbox',
              source: optionalString('source', body.source) ?? '',
              aggregateId: optionalString('aggregateId', body.aggregateId) ?? '',
              headId,
              reason,
            };
      return { skippedId: await this.dashboard.skipHead(request, instance, target) };
    }

    @Get('api/:instance/claims')
    async claims(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      const admin = this.dashboard.admin(instance);
      const limit = integer('limit', query.limit, PAGE_LIMIT.default, 1, PAGE_LIMIT.max);
      return { rows: await admin.listClaims({ component: component(query.component), limit }) };
    }

    /** The message browser: rows of any state, filtered, newest first, keyset-paged (`after`), with how they were found. */
    @Get('api/:instance/messages')
    messages(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      this.dashboard.admin(instance);
      const { filter, page } = messageQuery(query);
      return this.dashboard.messages(instance, filter, page);
    }

    /** One row of either table, whatever its state, with its payload. */
    @Get('api/:instance/messages/:component/:id')
    message(
      @Param('instance') instance: string,
      @Param('component') kind: string,
      @Param('id') id: string,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      return this.dashboard.message(instance, component(kind), id);
    }

    /** Finished and dead rows per minute (`bucket=minute`, up to 1440) or hour (default, up to 168: 7 days). */
    @Get('api/:instance/history')
    history(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      const bucket = query.bucket ?? 'hour';
      if (bucket !== 'minute' && bucket !== 'hour') throw bad('bucket', 'must be "minute" or "hour"', bucket);
      const buckets = integer('buckets', query.buckets, bucket === 'hour' ? 24 : 60, 1, bucket === 'hour' ? 168 : 1440);
      const by = query.by ?? 'name';
      if (by !== 'name' && by !== 'component') throw bad('by', 'must be "name" or "component"', by);
      return this.dashboard.history(instance, bucket, buckets, by);
    }

    /** The instances and their heartbeats (`QueueBoxAdmin.instances()`); an admin without that method gets `available: false` and why (never made-up rows). */
    @Get('api/:instance/heartbeats')
    async heartbeats(@Param('instance') instance: string, @Res({ passthrough: true }) response: DashboardResponse) {
      secure(response);
      const admin = this.dashboard.admin(instance);
      if (typeof admin.instances !== 'function') return { available: false, reason: messages.heartbeatsUnavailable(), rows: [] };
      return { available: true, rows: await admin.instances() };
    }

    /** The database warnings of the instance's doctor (docs/doctor.md); `?refresh=1` examines the database now. Reads only. */
    @Get('api/:instance/warnings')
    warnings(
      @Param('instance') instance: string,
      @Query() query: Record<string, unknown>,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      secure(response);
      return this.dashboard.warnings(instance, query.refresh === '1');
    }

    /** The paused destinations and sources (issue 40); an admin without `pauses()` gets `available: false` and why. */
    @Get('api/:instance/pauses')
    async pauses(@Param('instance') instance: string, @Res({ passthrough: true }) response: DashboardResponse) {
      secure(response);
      const admin = this.dashboard.admin(instance);
      if (typeof admin.pauses !== 'function') return { available: false, reason: messages.pausesUnavailable(), rows: [] };
      return { available: true, rows: await admin.pauses() };
    }

    /** Pauses a destination (`component: "outbox"`) or source (`"inbox"`): `{ component, name, reason? }` → `{ paused }`. */
    @Post('api/:instance/pauses/pause')
    @HttpCode(HttpStatus.OK)
    async pause(
      @Param('instance') instance: string,
      @Req() request: DashboardRequest,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      return { paused: await this.changePause('pause', instance, request, response) };
    }

    /** Resumes a paused destination or source: `{ component, name }` → `{ resumed }`. */
    @Post('api/:instance/pauses/resume')
    @HttpCode(HttpStatus.OK)
    async resume(
      @Param('instance') instance: string,
      @Req() request: DashboardRequest,
      @Res({ passthrough: true }) response: DashboardResponse,
    ) {
      return { resumed: await this.changePause('resume', instance, request, response) };
    }

    private async changePause(action: 'pause' | 'resume', instance: string, request: DashboardRequest, response: DashboardResponse) {
      secure(response);
      this.actions.check(request);
      this.dashboard.admin(instance); // 404 before reading the body
      requireJson(request);
      const body = bodyObject(request.body);
      const kind = component(body.component);
      const name = optionalString('name', body.name);
      if (name === undefined || name === '') throw bad('name', 'must be a destination (outbox) or source (inbox) name', body.name);
      const reason = action === 'pause' ? optionalString('reason', body.reason) || undefined : undefined;
      return this.dashboard.changePause(request, instance, action, { component: kind, name, reason });
    }

    private async changeDeadLetters(
      action: 'replay' | 'discard',
      instance: string,
      request: DashboardRequest,
      response: DashboardResponse,
    ) {
      secure(response);
      this.actions.check(request);
      this.dashboard.admin(instance);
      requireJson(request);
      const body = bodyObject(request.body);
      const kind = component(body.component);
      if (body.ids !== undefined && (!Array.isArray(body.ids) || !body.ids.every((id) => typeof id === 'string'))) {
        throw bad('ids', 'must be an array of row ids (strings)', body.ids);
      }
      if (body.filter !== undefined && (typeof body.filter !== 'object' || body.filter === null || Array.isArray(body.filter))) {
        throw bad('filter', 'must be an object { name, key, error, from, to, fingerprint }', body.filter);
      }
      if (body.all !== undefined && typeof body.all !== 'boolean') throw bad('all', 'must be true or false', body.all);
      const changed = await this.dashboard.changeDeadLetters(request, instance, action, {
        component: kind,
        ids: body.ids as string[] | undefined,
        filter: body.filter === undefined ? undefined : deadLetterQuery(body.filter as Record<string, unknown>),
        all: body.all as boolean | undefined,
      });
      return { changed };
    }
  }
  return QueueBoxDashboardController;
}
