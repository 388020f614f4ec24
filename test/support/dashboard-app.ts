import 'reflect-metadata';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { after, before, beforeEach } from 'node:test';
import { type CanActivate, type ExecutionContext, type INestApplication, Injectable, Module, type ModuleMetadata } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { QueueBoxDashboardModule } from '../../lib/dashboard';
import type { QueueBoxDashboardOptions } from '../../lib/dashboard/dashboard.options';
import type { DashboardActionEvent } from '../../lib/events/queuebox.events';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { RecordingLogger } from './app';
import { RecordingPublisher } from './recording-publisher';

/** The operators' authentication of the tests: `X-Operator: <name>` lets a request in as that user. */
@Injectable()
export class OperatorGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined>; user?: unknown }>();
    const name = request.headers['x-operator'];
    if (!name) return false;
    request.user = { name };
    return true;
  }
}

export interface DashboardTestApp {
  app: INestApplication;
  logger: RecordingLogger;
  /** `http://127.0.0.1:<port>` */
  origin: string;
  /** The dashboard's page URL, with its trailing slash. */
  url: string;
  publisher: RecordingPublisher;
}

/** A real Nest HTTP app (Express) on `databaseUrl` with QueueBox and the dashboard, listening on a free port. */
export async function createDashboardApp(
  databaseUrl: string,
  dashboard: QueueBoxDashboardOptions,
  extra: { queuebox?: QueueBoxModuleOptions; imports?: ModuleMetadata['imports'] } = {},
): Promise<DashboardTestApp> {
  const publisher = new RecordingPublisher();
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url: databaseUrl, logging: false, extra: { max: 5 } }),
      QueueBoxModule.forRoot(extra.queuebox ?? { workers: false, outbox: { publisher } }),
      ...(extra.imports ?? []),
      QueueBoxDashboardModule.forRoot(dashboard),
    ],
  })
  class DashboardTestModule {}
  const logger = new RecordingLogger();
  const app = await NestFactory.create(DashboardTestModule, { logger, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  const origin = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, logger, origin, url: `${origin}/${(dashboard.path ?? 'queuebox').replace(/^\/|\/$/g, '')}/`, publisher };
}

/** The operator the tests' `OperatorGuard` lets in, and the header the page sends its action token in. */
export const OPERATOR = { 'x-operator': 'ada' };
export const TOKEN_HEADER = 'x-queuebox-dashboard-token';

/**
 * Calls of the dashboard's API as its page makes them, on the app and token the test holds at the
 * time of the call: `api` (a read, as the operator) and `action` (a POST with the JSON body, the
 * token, a same-origin fetch and the page's origin; a header given as '' is left out).
 */
export function dashboardClient(current: () => { app: DashboardTestApp; token: string }) {
  const api = (path: string, init: RequestInit & { headers?: Record<string, string> } = {}) =>
    fetch(`${current().app.url}api/${path}`, { ...init, headers: { ...OPERATOR, ...init.headers } });
  const action = (path: string, body: unknown, headers: Record<string, string> = {}) => {
    const { app, token } = current();
    const all = {
      'content-type': 'application/json',
      [TOKEN_HEADER]: token,
      'sec-fetch-site': 'same-origin',
      origin: app.origin,
      ...headers,
    };
    return api(path, {
      method: 'POST',
      body: JSON.stringify(body),
      headers: Object.fromEntries(Object.entries(all).filter(([, v]) => v !== '')),
    });
  };
  return { api, action };
}

/**
 * The app lifecycle a dashboard test block shares, registered as its hooks (call it in the block's
 * body): `start` makes the app before the block's tests and it closes after them; the dashboard's
 * action events (`queuebox:dashboard:action`) are collected in `events`; each test starts with no
 * event and a fresh action token (`token`, which `action` sends).
 */
export function useDashboardApp(start: () => Promise<DashboardTestApp>) {
  let app: DashboardTestApp | undefined;
  let token = '';
  const events: DashboardActionEvent[] = [];
  const onChannel = (event: unknown) => events.push(event as DashboardActionEvent);
  const { api, action } = dashboardClient(() => ({ app: app as DashboardTestApp, token }));
  before(async () => {
    app = await start();
    subscribe('queuebox:dashboard:action', onChannel);
  });
  after(async () => {
    unsubscribe('queuebox:dashboard:action', onChannel);
    await app?.app.close();
  });
  beforeEach(async () => {
    events.length = 0;
    token = String(((await (await api('session')).json()) as { token?: unknown }).token);
  });
  return {
    /** The app of the block (from its `before` hook on). */
    get app(): DashboardTestApp {
      if (!app) throw new Error('the dashboard app starts in the before hook');
      return app;
    },
    /** This test's action token. */
    get token(): string {
      return token;
    },
    events,
    api,
    action,
  };
}
