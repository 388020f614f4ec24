import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { QueueBoxHealthIndicator } from 'queuebox/terminus';

/** Kubernetes-style probes (docs/observability.md explains which check belongs where). */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly queuebox: QueueBoxHealthIndicator,
  ) {}

  /** Readiness: the database answers and the app is not shutting down. */
  @Get('ready')
  @HealthCheck()
  ready() {
    return this.health.check([() => this.queuebox.readiness()]);
  }

  /** Liveness: every worker loop completed a claim cycle within the last minute. */
  @Get('live')
  @HealthCheck()
  live() {
    return this.health.check([() => this.queuebox.liveness()]);
  }

  /** Everything, including the backlog lag (for a status page or alerts, not a probe). */
  @Get()
  @HealthCheck()
  all() {
    return this.health.check([() => this.queuebox.isHealthy('queuebox', { maxLagMs: 60_000 })]);
  }
}
