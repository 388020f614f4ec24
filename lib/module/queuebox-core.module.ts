import { Global, Module } from '@nestjs/common';
import { QUEUEBOX_APPLICATION_REGISTRY } from '../common/queuebox.constants';
import { QueueBoxRegistry } from '../core/queuebox.registry';

/**
 * What every QueueBox of an application shares: the registry of them by name. Imported by each
 * `QueueBoxModule.forRoot()` (Nest keeps one instance of a module without options), global so the
 * Terminus indicator, the Prometheus exporter and the dashboard reach every QueueBox. A tenant's
 * application context (`QueueBoxTenants`) has one too, which is the application's registry: a
 * registry of its own would know only the tenant, and its services could not tell a transaction
 * of another QueueBox's DataSource (I12).
 */
@Global()
@Module({
  providers: [
    {
      provide: QueueBoxRegistry,
      inject: [{ token: QUEUEBOX_APPLICATION_REGISTRY, optional: true }],
      useFactory: (application?: QueueBoxRegistry) => application ?? new QueueBoxRegistry(),
    },
  ],
  exports: [QueueBoxRegistry],
})
export class QueueBoxCoreModule {}
