import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { QueueBoxPrometheusModule } from 'queuebox/prometheus';
import { QueueBoxHealthModule } from 'queuebox/terminus';
import { HealthController } from './health.controller';

/** What operations needs: GET /metrics (Prometheus) and GET /health, /health/ready, /health/live (Terminus). */
@Module({
  imports: [
    PrometheusModule.register({ path: '/metrics', defaultMetrics: { enabled: false } }),
    QueueBoxPrometheusModule,
    TerminusModule,
    QueueBoxHealthModule,
  ],
  controllers: [HealthController],
})
export class OpsModule {}
