import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { PartitionKeeper } from '../admin/partition-keeper.service';
import { QueueBoxAdmin } from '../admin/queuebox.admin';
import { RetentionService } from '../admin/retention.service';
import { QueueBoxEventLog } from '../events/event-log';
import { QueueBoxEvents } from '../events/queuebox.events';
import { QueueBoxDoctor } from '../health/queuebox.doctor';
import { QueueBoxHealth } from '../health/queuebox-health';
import { InboxRelay } from '../inbox/inbox.relay';
import { InboxService } from '../inbox/inbox.service';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import { QueueBoxInstance } from '../instance/queuebox.instance';
import { LeaseService } from '../lease/lease.service';
import { QueueBoxOpenTelemetryMetrics } from '../metrics/opentelemetry.metrics';
import { QueueBoxMetrics } from '../metrics/queuebox.metrics';
import { OutboxPoller } from '../outbox/outbox.poller';
import { OutboxService } from '../outbox/outbox.service';
import { PullClient } from '../pull/pull.client';
import { PullWorker } from '../pull/pull.worker';
import { PullHandlerExplorer } from '../pull/pull-handler.explorer';
import { ClaimPauses } from '../workers/claim-pauses';
import { DatabaseRecovery } from '../workers/database-recovery';
import { InstanceLiveness } from '../workers/instance-liveness';
import { QueueBoxOpenTelemetryGauges } from './opentelemetry-gauges';
import { QueueBoxConfigurableModule } from './queuebox.module-definition';
import { WorkNotifications } from './queuebox.notifications';
import { QueueBoxPoolCheck } from './queuebox.pool-check';
import { QueueBoxRegistration } from './queuebox.registration';
import { QueueBoxCoreModule } from './queuebox-core.module';

/**
 * The QueueBox module: registers `OutboxService`, `OutboxPoller`, `InboxService`, `InboxRelay` and `LeaseService` over the
 * application's TypeORM DataSource. Global, so its services can be injected anywhere.
 *
 * @example
 * @Module({
 *   imports: [
 *     TypeOrmModule.forRoot({ type: 'postgres', url: process.env.DATABASE_URL, migrations: [QueueBoxSchema1764460800000], migrationsRun: true }),
 *     QueueBoxModule.forRoot({ outbox: { publisher: new HttpPublisher({ destinations: { billing: 'http://billing/events' } }) } }),
 *   ],
 * })
 * export class AppModule {}
 *
 * // or, with configuration from elsewhere:
 * QueueBoxModule.forRootAsync({ inject: [ConfigService], useFactory: (config: ConfigService) => ({ ... }) })
 */
@Module({
  imports: [DiscoveryModule, QueueBoxCoreModule],
  providers: [
    DatabaseRecovery,
    InstanceLiveness,
    ClaimPauses,
    QueueBoxEvents,
    QueueBoxEventLog,
    QueueBoxMetrics,
    QueueBoxOpenTelemetryMetrics,
    QueueBoxOpenTelemetryGauges,
    LeaseService,
    OutboxService,
    OutboxPoller,
    InboxSources,
    InboxService,
    InboxRelay,
    PullHandlerExplorer,
    PullClient,
    PullWorker,
    WorkNotifications,
    QueueBoxPoolCheck,
    RetentionService,
    PartitionKeeper,
    QueueBoxAdmin,
    QueueBoxHealth,
    QueueBoxDoctor,
    QueueBoxInstance,
    QueueBoxRegistration,
  ],
})
export class QueueBoxModule extends QueueBoxConfigurableModule {}
