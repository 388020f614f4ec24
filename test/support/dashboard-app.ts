import 'reflect-metadata';
import { type CanActivate, type ExecutionContext, type INestApplication, Injectable, Module, type ModuleMetadata } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { QueueBoxDashboardModule } from '../../lib/dashboard';
import type { QueueBoxDashboardOptions } from '../../lib/dashboard/dashboard.options';
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
