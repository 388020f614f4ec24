import { Global, Module } from '@nestjs/common';
import { QueueBoxRegistry } from './queuebox.registry';

/**
 * What every QueueBox of an application shares: the registry of them by name. Imported by each
 * `QueueBoxModule.forRoot()` (Nest keeps one instance of a module without options), global so the
 * Terminus indicator, the Prometheus exporter and the dashboard reach every QueueBox.
 */
@Global()
@Module({ providers: [QueueBoxRegistry], exports: [QueueBoxRegistry] })
export class QueueBoxCoreModule {}
