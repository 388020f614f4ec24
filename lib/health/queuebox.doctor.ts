import { type BeforeApplicationShutdown, Inject, Injectable, Logger, type OnApplicationBootstrap, Optional } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { describeError } from '../common/errors';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { Dialect } from '../dialects/dialect';
import { WorkNotifications } from '../module/queuebox.notifications';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { doctorMessages as messages } from '../texts/doctor.messages';
import type { QueueBoxIdentity } from '../types/instance';
import {
  DATABASE_WARNING_CODES,
  type DatabaseWarning,
  type DatabaseWarningCode,
  type DoctorReport,
  examineDatabase,
} from './database-doctor';

/**
 * The database warnings of one QueueBox in the app: examined every `doctor.intervalMs` (60 s by
 * default, the first one interval after start-up; 0: only on demand) and on demand (`check()`), the last report kept for the health
 * check, the metrics and the dashboard, each warning logged once when it appears and once when it
 * clears. See docs/doctor.md.
 *
 * @example
 * const { warnings } = await app.get(QueueBoxDoctor).check();
 */
@Injectable()
export class QueueBoxDoctor implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger: Logger;
  private last?: DoctorReport;
  private running?: Promise<DoctorReport>;
  private timer?: NodeJS.Timeout;
  /** The warnings logged as present, by code and subject. */
  private logged = new Set<string>();

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    private readonly notifications: WorkNotifications,
    @Optional() @Inject(QUEUEBOX_IDENTITY) instance?: QueueBoxIdentity,
  ) {
    this.logger = new Logger(logContext('QueueBox:Doctor', instance?.name));
  }

  /** The last report, `undefined` before the first examination. */
  get latest(): DoctorReport | undefined {
    return this.last;
  }

  /** How many warnings of each code the last examination found: every code, 0 when absent (or before the first). */
  warningCounts(): Map<DatabaseWarningCode, number> {
    const counts = new Map(DATABASE_WARNING_CODES.map((code) => [code, 0]));
    for (const warning of this.last?.warnings ?? []) counts.set(warning.code, (counts.get(warning.code) ?? 0) + 1);
    return counts;
  }

  onApplicationBootstrap(): void {
    const { intervalMs } = this.options.doctor;
    if (intervalMs === 0) return;
    const tick = () => {
      // A DataSource initialized later is examined from the first tick after.
      if (this.dataSource.isInitialized) void this.check().catch((error: unknown) => this.logger.warn(describeError(error)));
    };
    // The first examination one interval after start-up: start-up itself stays as it was.
    this.timer = setInterval(tick, intervalMs);
    this.timer.unref();
  }

  beforeApplicationShutdown(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Examines the database now (one examination at a time: a call during one gets its report). */
  check(): Promise<DoctorReport> {
    this.running ??= examineDatabase({
      dialect: this.dialect,
      dataSource: this.dataSource,
      options: this.options,
      notifications: this.notifications.enabled ? (this.notifications.listening ? 'listening' : 'polling') : 'off',
    })
      .then((report) => {
        this.last = report;
        this.logChanges(report.warnings);
        return report;
      })
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private logChanges(warnings: DatabaseWarning[]): void {
    const now = new Map(warnings.map((w) => [`${w.code}\u0000${w.subject ?? ''}`, w]));
    for (const [key, w] of now) {
      if (this.logged.has(key)) continue;
      const line = messages.warningAppeared(w.code, w.message);
      if (w.severity === 'error') this.logger.error(line);
      else if (w.severity === 'warning') this.logger.warn(line);
      else this.logger.log(line);
    }
    for (const key of this.logged) {
      if (now.has(key)) continue;
      const [code, subject] = key.split('\u0000');
      this.logger.log(messages.warningCleared(code, subject || null));
    }
    this.logged = new Set(now.keys());
  }
}
