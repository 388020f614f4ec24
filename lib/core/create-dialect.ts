import { Logger } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { logContext } from '../common/log-context';
import type { Dialect, DialectSettings, QueueBoxTables } from '../dialects/dialect';
import { dialectDriver } from '../dialects/drivers';

/**
 * The dialect for a TypeORM DataSource, chosen by its driver type in the list of dialect drivers. Throws
 * `QueueBoxConfigError` for a database QueueBox does not support. Lives outside lib/dialects
 * because it hands the dialect a Nest `Logger` for its warnings (lib/dialects imports no Nest).
 */
export function createDialect(dataSource: DataSource, tables: QueueBoxTables, settings: DialectSettings = {}, queuebox?: string): Dialect {
  const driver = dialectDriver(dataSource.options.type);
  return driver.create({ dataSource, tables, settings, log: new Logger(logContext(driver.logContext, queuebox)) });
}
