import {
  type BeforeApplicationShutdown,
  type DynamicModule,
  Global,
  type INestApplicationContext,
  Injectable,
  Logger,
  Module,
} from '@nestjs/common';
import { DiscoveryModule, DiscoveryService, NestFactory } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { QUEUEBOX_APPLICATION_REGISTRY, QUEUEBOX_TENANT_HANDLERS } from '../common/queuebox.constants';
import { type QueueBoxEntry, QueueBoxRegistry } from '../core/queuebox.registry';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxModuleOptions } from '../types/options';
import { QueueBoxModule } from './queuebox.module';
import { QueueBoxRegistration } from './queuebox.registration';
import { QueueBoxCoreModule } from './queuebox-core.module';

/** A tenant's QueueBox: its DataSource (created by the application, which also destroys it after `detach`) and its options. */
export interface QueueBoxTenantOptions extends QueueBoxModuleOptions {
  dataSource: DataSource;
}

/**
 * QueueBoxes attached and detached while the application runs, one per tenant database (a tenant
 * signs up, a tenant leaves), each with its own workers, instance row, health and metrics: the
 * same QueueBox as `QueueBoxModule.forRoot()` gives, in an application context of its own. Its
 * pull workers run the application's `@PullHandler(source, { tenants: true })` methods with the
 * tenant's transaction. Attached tenants are in the `QueueBoxRegistry` under their names, so the
 * Terminus indicator (`{ queuebox: name }`), the Prometheus exporter (`queuebox="<name>"`) and
 * `entry.get(OutboxService)` reach them. On application shutdown every tenant is detached first.
 *
 * @example
 * const dataSource = await new DataSource({ type: 'postgres', url: tenantUrl }).initialize();
 * const acme = await tenants.attach('acme', { dataSource, outbox: { publisher } });
 * await dataSource.transaction((manager) => acme.get(OutboxService).enqueue(manager, message));
 * // later
 * await tenants.detach('acme'); // drains its work (shutdownTimeoutMs), then stops
 * await dataSource.destroy();
 */
@Injectable()
export class QueueBoxTenants implements BeforeApplicationShutdown {
  private readonly logger = new Logger('QueueBox:Tenants');
  private readonly attached = new Map<string, { context: INestApplicationContext; entry: QueueBoxEntry }>();
  /** Names being attached or detached: a second call for one of them waits for nothing and is refused. */
  private readonly busy = new Set<string>();

  constructor(
    private readonly registry: QueueBoxRegistry,
    private readonly discovery: DiscoveryService,
  ) {}

  /**
   * Starts a QueueBox named `name` on `options.dataSource` (its schema migrated, as for any
   * QueueBox) and registers it. Resolves once its workers run; a name already taken, a DataSource
   * not initialized (or destroyed), or options the module refuses, reject with `QueueBoxConfigError`
   * and leave nothing running.
   */
  async attach(name: string, options: QueueBoxTenantOptions): Promise<QueueBoxEntry> {
    if (this.busy.has(name) || this.registry.find(name)) {
      throw new QueueBoxConfigError('name', messages.tenantNameTaken(name));
    }
    const { dataSource, ...queueBoxOptions } = options;
    // attach resolves once the tenant's workers run: that needs the DataSource now, not some time later.
    if (!dataSource?.isInitialized) throw new QueueBoxConfigError('dataSource', messages.tenantDataSourceNotInitialized(name));
    this.busy.add(name);
    try {
      const context = await NestFactory.createApplicationContext(this.tenantModule(name, dataSource, queueBoxOptions), {
        abortOnError: false,
      });
      const entry = context.get(QueueBoxRegistration, { strict: false }).entry;
      try {
        this.registry.add(entry);
      } catch (error) {
        await context.close();
        throw error;
      }
      this.attached.set(name, { context, entry });
      this.logger.log(messages.tenantAttached(name));
      return entry;
    } finally {
      this.busy.delete(name);
    }
  }

  /**
   * Stops the tenant's QueueBox as an application shutdown would (it stops claiming, waits up to
   * `shutdownTimeoutMs` for work in flight, deregisters its instance) and forgets it. Its
   * DataSource stays open: destroy it after. An unknown name is a `QueueBoxConfigError`.
   */
  async detach(name: string): Promise<void> {
    const tenant = this.attached.get(name);
    if (!tenant || this.busy.has(name)) throw new QueueBoxConfigError('name', messages.tenantUnknown(name, this.names()));
    this.busy.add(name);
    try {
      this.registry.remove(tenant.entry);
      await tenant.context.close();
      this.attached.delete(name);
      this.logger.log(messages.tenantDetached(name));
    } finally {
      this.busy.delete(name);
    }
  }

  /** The attached tenants' names. */
  names(): string[] {
    return [...this.attached.keys()];
  }

  async beforeApplicationShutdown(): Promise<void> {
    await Promise.all(this.names().map((name) => this.detach(name)));
  }

  /**
   * The tenant's own application: its QueueBox, told to find pull handlers among the application's
   * providers and to share the application's registry (so its services refuse a transaction of any
   * other QueueBox's DataSource, and the others refuse one of its own).
   */
  private tenantModule(name: string, dataSource: DataSource, options: QueueBoxModuleOptions): DynamicModule {
    const handlers = { getProviders: () => this.discovery.getProviders() };
    return {
      module: TenantLinkModule,
      global: true,
      providers: [
        { provide: QUEUEBOX_TENANT_HANDLERS, useValue: handlers },
        { provide: QUEUEBOX_APPLICATION_REGISTRY, useValue: this.registry },
      ],
      exports: [QUEUEBOX_TENANT_HANDLERS, QUEUEBOX_APPLICATION_REGISTRY],
      imports: [QueueBoxModule.forRoot({ ...options, name, dataSource })],
    };
  }
}

/** The root module of a tenant's application context. */
@Global()
@Module({})
class TenantLinkModule {}

/**
 * Provides `QueueBoxTenants`. Import it in the module that attaches tenants (a sign-up service);
 * it needs no `QueueBoxModule.forRoot()` of its own.
 *
 * @example
 * @Module({ imports: [QueueBoxTenantsModule], providers: [TenantOnboarding] })
 * export class TenantsModule {}
 */
@Module({
  imports: [DiscoveryModule, QueueBoxCoreModule],
  providers: [QueueBoxTenants],
  exports: [QueueBoxTenants],
})
export class QueueBoxTenantsModule {}
