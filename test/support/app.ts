import 'reflect-metadata';
import { type INestApplicationContext, type LoggerService, Module, type ModuleMetadata, type Provider } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import type { QueueBoxModuleExtras } from '../../lib/module/queuebox.module-definition';
import type { QueueBoxModuleOptions } from '../../lib/types/options';

/** Keeps log lines so tests can assert on them; prints nothing unless QUEUEBOX_TEST_LOGS is set. */
export class RecordingLogger implements LoggerService {
  /** Each line with its logger context (Nest passes it last: `new Logger('QueueBox:OutboxPoller')`). */
  readonly lines: { level: string; message: string; context?: string }[] = [];
  log(message: unknown, ...rest: unknown[]) {
    this.record('log', message, rest);
  }
  error(message: unknown, ...rest: unknown[]) {
    this.record('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]) {
    this.record('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]) {
    this.record('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]) {
    this.record('verbose', message, rest);
  }
  has(level: string, fragment: string): boolean {
    return this.lines.some((line) => line.level === level && line.message.includes(fragment));
  }
  private record(level: string, message: unknown, rest: unknown[]) {
    const last = rest.at(-1);
    this.lines.push({ level, message: String(message), ...(typeof last === 'string' ? { context: last } : {}) });
    if (process.env.QUEUEBOX_TEST_LOGS) console.log(`[${level}] ${String(message)}`);
  }
}

export interface TestApp {
  app: INestApplicationContext;
  logger: RecordingLogger;
  get<T>(type: abstract new (...args: never[]) => T): T;
}

/** A Nest application context with TypeORM on `url` and QueueBox with `options`. */
export async function createTestApp(
  url: string,
  options: QueueBoxModuleOptions & QueueBoxModuleExtras,
  extra: {
    poolSize?: number;
    typeormName?: string;
    providers?: Provider[];
    imports?: ModuleMetadata['imports'];
    /** The DataSource's `isolationLevel`. */
    isolationLevel?: 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';
  } = {},
): Promise<TestApp> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        name: extra.typeormName,
        type: 'postgres',
        url,
        extra: { max: extra.poolSize ?? 10 },
        logging: false,
        isolationLevel: extra.isolationLevel,
      }),
      QueueBoxModule.forRoot(options),
      ...(extra.imports ?? []),
    ],
    providers: extra.providers ?? [],
  })
  class TestModule {}
  const logger = new RecordingLogger();
  const app = await NestFactory.createApplicationContext(TestModule, { logger, abortOnError: false });
  return { app, logger, get: (type) => app.get(type as never) };
}
