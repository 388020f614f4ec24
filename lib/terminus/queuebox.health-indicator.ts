import { Injectable, Module } from '@nestjs/common';
import { type HealthIndicatorResult, HealthIndicatorService, TerminusModule } from '@nestjs/terminus';
import { QueueBoxRegistry } from '../core/queuebox.registry';
import { QueueBoxHealth, type QueueBoxHealthCheckOptions } from '../health/queuebox-health';

/** Which QueueBox a check reads, in an application with several: its name. Default `default`. */
export interface QueueBoxIndicatorTarget {
  queuebox?: string;
}

/**
 * QueueBox for `@nestjs/terminus`: `up` with the lag, workers and notification state in its
 * details, `down` with the reasons in `problems`.
 *
 * Each method reports under its own key by default (`queuebox`, `queuebox_readiness`,
 * `queuebox_liveness`), so one Terminus check can combine them without one result overwriting another.
 * With several QueueBoxes (or tenants), `{ queuebox: name }` picks one; give each its own key.
 *
 * - `isHealthy()` runs every check: database, draining, worker cycles, backlog lag, heartbeats,
 *   the instances table (this instance silent or dead there) and the database warnings (up with
 *   `degraded: true` and the `warnings`; down only for a fatal one). For a status page or alerting.
 * - `readiness()` and `liveness()` fail for a fatal database warning only (a table missing, a
 *   required migration not run), never for the others.
 * - `readiness()`: database reachable, not draining, and this instance's heartbeats working. Use it as the readiness probe: a replica
 *   that drains for shutdown, or cannot reach its database, should get no new requests.
 * - `liveness()`: every running worker loop completed a claim cycle recently. Use it as the
 *   liveness probe: a restart helps a stuck worker, not a slow database or a long backlog.
 *
 * @example
 * @Controller('health')
 * export class HealthController {
 *   constructor(private readonly health: HealthCheckService, private readonly queuebox: QueueBoxHealthIndicator) {}
 *   @Get('ready') @HealthCheck() ready() { return this.health.check([() => this.queuebox.readiness()]); }
 *   @Get('live') @HealthCheck() live() { return this.health.check([() => this.queuebox.liveness()]); }
 * }
 */
@Injectable()
export class QueueBoxHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly registry: QueueBoxRegistry,
  ) {}

  /** Every check, or those `options` select (see `QueueBoxHealthCheckOptions`). */
  isHealthy<const Key extends string = 'queuebox'>(
    key?: Key,
    options: QueueBoxHealthCheckOptions & QueueBoxIndicatorTarget = {},
  ): Promise<HealthIndicatorResult<Key>> {
    return this.run((key ?? 'queuebox') as Key, options);
  }

  /** Database reachable, not draining, heartbeats working. Key `queuebox_readiness` unless given. */
  readiness<const Key extends string = 'queuebox_readiness'>(
    key?: Key,
    options: Pick<QueueBoxHealthCheckOptions, 'timeoutMs'> & QueueBoxIndicatorTarget = {},
  ): Promise<HealthIndicatorResult<Key>> {
    return this.run((key ?? 'queuebox_readiness') as Key, {
      ...options,
      database: true,
      draining: true,
      heartbeat: true,
      instances: false,
      maxCycleAgeMs: false,
      maxLagMs: false,
      warnings: 'fatal',
    });
  }

  /** Worker loops cycling within `maxCycleAgeMs` (default 60000 ms); a loop waiting for the database counts as alive. Key `queuebox_liveness` unless given. */
  liveness<const Key extends string = 'queuebox_liveness'>(
    key?: Key,
    options: Pick<QueueBoxHealthCheckOptions, 'maxCycleAgeMs'> & QueueBoxIndicatorTarget = {},
  ): Promise<HealthIndicatorResult<Key>> {
    return this.run((key ?? 'queuebox_liveness') as Key, {
      queuebox: options.queuebox,
      maxCycleAgeMs: options.maxCycleAgeMs,
      database: false,
      draining: false,
      heartbeat: false,
      instances: false,
      maxLagMs: false,
      warnings: 'fatal',
    });
  }

  private async run<Key extends string>(
    key: Key,
    { queuebox, ...options }: QueueBoxHealthCheckOptions & QueueBoxIndicatorTarget,
  ): Promise<HealthIndicatorResult<Key>> {
    const indicator = this.indicators.check(key);
    const { healthy, ...details } = await this.registry.get(queuebox).get(QueueBoxHealth).check(options);
    return healthy ? indicator.up(details) : indicator.down(details);
  }
}

/**
 * Provides `QueueBoxHealthIndicator`. Import it next to `TerminusModule` in the module of your
 * health controller (QueueBoxModule, or QueueBoxTenantsModule, must be imported by the app).
 */
@Module({
  imports: [TerminusModule],
  providers: [QueueBoxHealthIndicator],
  exports: [QueueBoxHealthIndicator],
})
export class QueueBoxHealthModule {}
