import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { QueueBoxDashboardModule } from 'queuebox/dashboard';
import { QueueBoxPrometheusModule } from 'queuebox/prometheus';
import { QueueBoxHealthModule } from 'queuebox/terminus';
import { HealthController } from './health.controller';
import { LocalhostGuard } from './localhost.guard';

/**
 * What operations needs: GET /metrics (Prometheus), GET /health, /health/ready, /health/live
 * (Terminus), and the QueueBox dashboard at /queuebox/ (docs/dashboard.md).
 */
@Module({
  imports: [
    PrometheusModule.register({ path: '/metrics', defaultMetrics: { enabled: false } }),
    QueueBoxPrometheusModule,
    TerminusModule,
    QueueBoxHealthModule,
    QueueBoxDashboardModule.forRoot({ path: 'queuebox', guard: LocalhostGuard }),
  ],
  controllers: [HealthController],
})
export class OpsModule {}
