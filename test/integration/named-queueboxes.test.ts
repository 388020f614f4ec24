import 'reflect-metadata';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { after, before, describe, it } from 'node:test';
import { Injectable, Module } from '@nestjs/common';
import { ModuleRef, NestFactory } from '@nestjs/core';
import { TerminusModule } from '@nestjs/terminus';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { register } from 'prom-client';
import { DataSource, type EntityManager } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QueueBoxRegistry } from '../../lib/core/queuebox.registry';
import { QueueBoxDashboardModule } from '../../lib/dashboard/dashboard.module';
import { type QueueBoxDashboardOptions, resolveDashboardOptions } from '../../lib/dashboard/dashboard.options';
import { DashboardService } from '../../lib/dashboard/dashboard.service';
import { SCHEMA_MIGRATIONS } from '../../lib/dialects/schema-migrations';
import { QueueBoxConfigError, QueueBoxValidationError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { LeaseService } from '../../lib/lease/lease.service';
import { createQueueBoxMigrations } from '../../lib/migrations/queuebox.migration';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { QueueBoxTenants, QueueBoxTenantsModule } from '../../lib/module/queuebox.tenants';
import {
  getInboxServiceToken,
  getOutboxServiceToken,
  getQueueBoxAdminToken,
  InjectInbox,
  InjectOutbox,
} from '../../lib/module/queuebox.tokens';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { QueueBoxPrometheusModule } from '../../lib/prometheus/queuebox-prometheus.module';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import { QueueBoxHealthIndicator, QueueBoxHealthModule } from '../../lib/terminus/queuebox.health-indicator';
import type { InboxMessage } from '../../lib/types/messages';
import { RecordingLogger } from '../support/app';
import { createTestDatabase, eventually, type TestDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// Issue 27, part 2: one application, several databases, one QueueBox each. The default QueueBox
// keeps class injection; another is injected by its name; a transaction of one QueueBox's
// DataSource given to another is a typed error; handlers, health, metrics and events name their
// QueueBox; tenants are attached and detached while the application runs. Every database here is
// a real PostgreSQL database of its own.

const HANDLED = 'CREATE TABLE handled (idempotency_key text PRIMARY KEY, handler text NOT NULL)';

/** Who handled what: each handler writes a row in its own transaction's database. */
@Injectable()
class PaymentsConsumers {
  @PullHandler('payments')
  async onDefault(message: InboxMessage, { manager, attempt }: PullContext) {
    if (message.payload === 'fail-once' && attempt === 1) throw new Error('first attempt of the default QueueBox fails');
    await manager.query('INSERT INTO handled VALUES ($1, $2)', [message.idempotencyKey, 'default']);
  }

  @PullHandler('payments', { queuebox: 'ledger' })
  async onLedger(message: InboxMessage, { manager, attempt }: PullContext) {
    if (message.payload === 'fail-once' && attempt === 1) throw new Error('first attempt of the ledger QueueBox fails');
    await manager.query('INSERT INTO handled VALUES ($1, $2)', [message.idempotencyKey, 'ledger']);
  }

  @PullHandler('payments', { tenants: true })
  async onTenant(message: InboxMessage, { manager }: PullContext) {
    await manager.query('INSERT INTO handled VALUES ($1, $2)', [message.idempotencyKey, 'tenant']);
  }
}

/** A service of the application that writes to both databases, each through its own QueueBox. */
@Injectable()
class Checkout {
  constructor(
    readonly orders: OutboxService,
    @InjectOutbox('ledger') readonly ledger: OutboxService,
    @InjectInbox('ledger') readonly ledgerInbox: InboxService,
  ) {}
}

const fast = { pollIntervalMs: 20 };

describe('several QueueBoxes in one application', () => {
  const databases: TestDatabase[] = [];
  let orders: TestDatabase;
  let ledger: TestDatabase;
  const ordersPublisher = new RecordingPublisher();
  const ledgerPublisher = new RecordingPublisher();
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>>;
  const logger = new RecordingLogger();

  const newDatabase = async () => {
    const db = await createTestDatabase();
    databases.push(db);
    await db.query(HANDLED);
    return db;
  };

  before(async () => {
    orders = await newDatabase();
    ledger = await newDatabase();
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: orders.url, logging: false }),
        TypeOrmModule.forRoot({ name: 'ledger', type: 'postgres', url: ledger.url, logging: false }),
        QueueBoxModule.forRoot({ outbox: { publisher: ordersPublisher, ...fast }, pull: fast, inbox: { relay: fast } }),
        QueueBoxModule.forRoot({
          name: 'ledger',
          dataSource: 'ledger',
          outbox: { publisher: ledgerPublisher, ...fast },
          pull: fast,
        }),
        QueueBoxTenantsModule,
        TerminusModule,
        QueueBoxHealthModule,
        PrometheusModule.register(),
        QueueBoxPrometheusModule,
        QueueBoxDashboardModule.forRoot({ public: true }),
      ],
      providers: [PaymentsConsumers, Checkout],
    })
    class AppModule {}
    register.clear();
    app = await NestFactory.createApplicationContext(AppModule, { logger, abortOnError: false });
  });

  after(async () => {
    await app?.close();
    register.clear();
    for (const db of databases) await db.drop();
  });

  const ordersDataSource = () => app.get<DataSource>(getDataSourceToken());
  const ledgerDataSource = () => app.get<DataSource>(getDataSourceToken('ledger'));

  it('the default QueueBox is injected by class, another by its name; each writes to its own database and publishes with its own publisher', async () => {
    const checkout = app.get(Checkout);
    assert.notEqual(checkout.orders, checkout.ledger);
    assert.equal(app.get(getOutboxServiceToken('ledger')), checkout.ledger);
    assert.equal(app.get(getOutboxServiceToken()), checkout.orders);
    await ordersDataSource().transaction((manager) => checkout.orders.enqueue(manager, { destination: 'shipping', payload: 'o1' }));
    await ledgerDataSource().transaction((manager) => checkout.ledger.enqueue(manager, { destination: 'accounting', payload: 'l1' }));
    const sent = async (db: TestDatabase) => (await db.query(`SELECT 1 FROM queuebox_outbox WHERE state = 'sent'`)).length === 1;
    await eventually(async () => (await sent(orders)) && (await sent(ledger)), 'both published and marked sent');
    assert.deepEqual(
      ordersPublisher.calls.map((c) => [c.message.destination, c.message.payload]),
      [['shipping', 'o1']],
    );
    assert.deepEqual(
      ledgerPublisher.calls.map((c) => [c.message.destination, c.message.payload]),
      [['accounting', 'l1']],
    );
    assert.deepEqual(await orders.query('SELECT destination, state FROM queuebox_outbox'), [{ destination: 'shipping', state: 'sent' }]);
    assert.deepEqual(await ledger.query('SELECT destination, state FROM queuebox_outbox'), [{ destination: 'accounting', state: 'sent' }]);
    assert.deepEqual(
      app
        .get(QueueBoxRegistry)
        .list()
        .map((entry) => [entry.name, entry.dataSourceName]),
      [
        ['default', 'default'],
        ['ledger', 'ledger'],
      ],
    );
  });

  it("refuses a transaction of another QueueBox's DataSource with a typed error naming both, and stores nothing", async () => {
    const checkout = app.get(Checkout);
    await assert.rejects(
      ledgerDataSource().transaction((manager) => checkout.orders.enqueue(manager, { destination: 'shipping', payload: 'wrong' })),
      (error: unknown) => {
        assert.ok(error instanceof QueueBoxValidationError, String(error));
        assert.equal(error.field, 'manager');
        assert.match(error.message, /DataSource "ledger", which belongs to QueueBox "ledger"/);
        assert.match(error.message, /belongs to QueueBox "default" \(DataSource "default"\)/);
        assert.match(error.message, /@InjectOutbox\("ledger"\)/);
        return true;
      },
    );
    await assert.rejects(
      ordersDataSource().transaction((manager) =>
        checkout.ledgerInbox.receive({ source: 'payments', idempotencyKey: 'wrong', payload: 1 }, manager),
      ),
      (error: unknown) => error instanceof QueueBoxValidationError && /InboxService.receive/.test(error.message),
    );
    assert.equal((await ledger.query(`SELECT count(*)::int AS n FROM queuebox_outbox WHERE payload = '"wrong"'`))[0].n, 0);
    assert.equal((await orders.query(`SELECT count(*)::int AS n FROM queuebox_outbox WHERE payload = '"wrong"'`))[0].n, 0);
  });

  it("runs each @PullHandler in the QueueBox it names, with that QueueBox's transaction", async () => {
    // Outside injection, by token: app.get(InboxService) would be either QueueBox's.
    await app.get<InboxService>(getInboxServiceToken()).receive({ source: 'payments', idempotencyKey: 'p-orders', payload: 1 });
    await app.get<InboxService>(getInboxServiceToken('ledger')).receive({ source: 'payments', idempotencyKey: 'p-ledger', payload: 1 });
    const handled = async (db: TestDatabase) => db.query<{ idempotency_key: string; handler: string }>('SELECT * FROM handled');
    await eventually(async () => (await handled(orders)).length === 1 && (await handled(ledger)).length === 1, 'both handled');
    assert.deepEqual(await handled(orders), [{ idempotency_key: 'p-orders', handler: 'default' }]);
    assert.deepEqual(await handled(ledger), [{ idempotency_key: 'p-ledger', handler: 'ledger' }]);
  });

  it('log lines name their QueueBox: QueueBox:PullWorker:ledger for the named one, QueueBox:PullWorker for the default', async () => {
    await app.get<InboxService>(getInboxServiceToken()).receive({ source: 'payments', idempotencyKey: 'p-log', payload: 'fail-once' });
    await app
      .get<InboxService>(getInboxServiceToken('ledger'))
      .receive({ source: 'payments', idempotencyKey: 'p-log', payload: 'fail-once' });
    const handled = async (db: TestDatabase) => db.query(`SELECT 1 FROM handled WHERE idempotency_key = 'p-log'`);
    await eventually(async () => (await handled(orders)).length === 1 && (await handled(ledger)).length === 1, 'both retried and handled');
    const contextOf = (fragment: string) => logger.lines.filter((line) => line.message.includes(fragment)).map((line) => line.context);
    assert.deepEqual(contextOf('first attempt of the ledger QueueBox fails'), ['QueueBox:PullWorker:ledger']);
    assert.deepEqual(contextOf('first attempt of the default QueueBox fails'), ['QueueBox:PullWorker']);
  });

  it('health, metrics and events name the QueueBox', async () => {
    const indicator = app.get(QueueBoxHealthIndicator);
    const ledgerHealth = await indicator.readiness('ledger', { queuebox: 'ledger' });
    assert.equal(ledgerHealth.ledger.status, 'up');
    await assert.rejects(
      indicator.readiness('x', { queuebox: 'nope' }),
      /No QueueBox is named "nope"; the application has "default", "ledger"/,
    );

    const published: { queuebox?: string; destination?: string }[] = [];
    const onPublished = (event: unknown) => published.push(event as { queuebox?: string });
    subscribe('queuebox:published', onPublished);
    try {
      await ledgerDataSource().transaction((manager) =>
        app.get(Checkout).ledger.enqueue(manager, { destination: 'accounting', payload: 'l2' }),
      );
      await eventually(async () => published.length === 1, 'the publish event');
    } finally {
      unsubscribe('queuebox:published', onPublished);
    }
    assert.equal(published[0].queuebox, 'ledger');
    const text = await register.metrics();
    assert.match(text, /queuebox_outbox_messages_published_total\{destination="accounting",queuebox="ledger"\} 2/);
    assert.match(text, /queuebox_outbox_messages_published_total\{destination="shipping",queuebox="default"\} 1/);
    assert.match(text, /queuebox_inbox_pending_messages\{source="payments",queuebox="ledger"\} 0/);
    assert.match(text, /queuebox_inbox_pending_messages\{source="payments",queuebox="default"\} 0/);
    // The dashboard switches between them by name, each instance reading its own database.
    const dashboard = app.get(DashboardService);
    assert.deepEqual(dashboard.instanceNames(), ['default', 'ledger']);
    assert.equal(dashboard.admin('ledger'), app.get(getQueueBoxAdminToken('ledger')));
    assert.equal(dashboard.admin('default'), app.get(getQueueBoxAdminToken()));
  });

  it('attaches tenants while it runs, each with its own database, workers, handlers, health and metrics, and detaches them', async () => {
    const tenants = app.get(QueueBoxTenants);
    const registry = app.get(QueueBoxRegistry);
    const publisher = new RecordingPublisher();
    const attached: { name: string; db: TestDatabase; dataSource: DataSource }[] = [];
    for (const name of ['acme', 'globex', 'initech']) {
      const db = await newDatabase();
      const dataSource = await new DataSource({ type: 'postgres', url: db.url, logging: false }).initialize();
      await tenants.attach(name, { dataSource, outbox: { publisher, ...fast }, pull: fast });
      attached.push({ name, db, dataSource });
    }
    assert.deepEqual(tenants.names(), ['acme', 'globex', 'initech']);
    assert.deepEqual(app.get(DashboardService).instanceNames(), ['default', 'acme', 'globex', 'initech', 'ledger']);
    await assert.rejects(
      tenants.attach('acme', { dataSource: attached[0].dataSource }),
      (error: unknown) => error instanceof QueueBoxConfigError && /named "acme" exists already/.test(error.message),
    );
    await assert.rejects(
      tenants.attach('ledger', { dataSource: attached[0].dataSource }),
      (error: unknown) => error instanceof QueueBoxConfigError && /named "ledger" exists already/.test(error.message),
    );

    for (const { name, dataSource } of attached) {
      const tenant = registry.get(name);
      await dataSource.transaction((manager) => tenant.get(OutboxService).enqueue(manager, { destination: 'invoices', payload: name }));
      await tenant.get(InboxService).receive({ source: 'payments', idempotencyKey: `p-${name}`, payload: 1 });
    }
    await eventually(async () => publisher.calls.length === 3, 'each tenant to publish its message');
    assert.deepEqual(publisher.calls.map((c) => c.message.payload).sort(), ['acme', 'globex', 'initech']);
    for (const { name, db } of attached) {
      await eventually(async () => (await db.query('SELECT 1 FROM handled')).length === 1, `${name}'s handler to run`);
      assert.deepEqual(await db.query('SELECT * FROM handled'), [{ idempotency_key: `p-${name}`, handler: 'tenant' }]);
      assert.deepEqual(await db.query('SELECT payload, state FROM queuebox_outbox'), [{ payload: name, state: 'sent' }]);
      assert.equal((await db.query('SELECT 1 FROM queuebox_instances')).length, 1, `${name}'s instance is registered`);
    }
    assert.equal((await app.get(QueueBoxHealthIndicator).isHealthy('acme', { queuebox: 'acme', maxLagMs: false })).acme.status, 'up');
    assert.match(await register.metrics(), /queuebox_outbox_messages_published_total\{destination="invoices",queuebox="globex"\} 1/);

    // Detach one: it drains and deregisters; the others and the application's QueueBoxes go on.
    await tenants.detach('globex');
    assert.deepEqual(tenants.names(), ['acme', 'initech']);
    assert.equal(registry.find('globex'), undefined);
    assert.deepEqual(await attached[1].db.query('SELECT 1 FROM queuebox_instances'), [], 'its instance left the table');
    await attached[1].dataSource.transaction((manager) =>
      manager.query(`INSERT INTO queuebox_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'invoices', '"after"')`),
    );
    await attached[0].dataSource.transaction((manager) =>
      registry.get('acme').get(OutboxService).enqueue(manager, { destination: 'invoices', payload: 'acme-2' }),
    );
    await eventually(async () => publisher.calls.some((c) => c.message.payload === 'acme-2'), 'acme to go on');
    assert.ok(!publisher.calls.some((c) => c.message.payload === 'after'), 'nothing publishes for a detached tenant');
    await assert.rejects(tenants.detach('globex'), /No tenant named "globex" is attached/);

    // Attached again under the same name: a new instance on the same database.
    await tenants.attach('globex', { dataSource: attached[1].dataSource, outbox: { publisher, ...fast } });
    await eventually(async () => publisher.calls.some((c) => c.message.payload === 'after'), 'globex to publish again');
    for (const { name } of attached) await tenants.detach(name);
    for (const { dataSource } of attached) await dataSource.destroy();
    assert.deepEqual(
      registry.list().map((entry) => entry.name),
      ['default', 'ledger'],
    );
  });

  it('the dashboard option appQueueBoxes adds its instances to the app QueueBoxes, tenants attached later included', async () => {
    const registry = app.get(QueueBoxRegistry);
    const defaultAdmin = app.get(getQueueBoxAdminToken());
    const archive = app.get(getQueueBoxAdminToken('ledger'));
    const dashboardOf = (options: QueueBoxDashboardOptions) => {
      const service = new DashboardService(resolveDashboardOptions(options), app.get(ModuleRef), registry);
      service.onModuleInit();
      return service;
    };
    // The given instances add to the app's; one named as an app QueueBox takes its place.
    const adding = dashboardOf({
      public: true,
      appQueueBoxes: true,
      instances: [
        { name: 'archive', admin: archive },
        { name: 'ledger', admin: defaultAdmin },
      ],
    });
    // Without the option, instances replace them, as before.
    const replacing = dashboardOf({ public: true, instances: [{ name: 'archive', admin: archive }] });
    assert.deepEqual(adding.instanceNames(), ['default', 'archive', 'ledger']);
    assert.equal(adding.admin('ledger'), defaultAdmin);
    assert.deepEqual(replacing.instanceNames(), ['archive']);

    const db = await newDatabase();
    const dataSource = await new DataSource({ type: 'postgres', url: db.url, logging: false }).initialize();
    const tenants = app.get(QueueBoxTenants);
    await tenants.attach('umbrella', { dataSource, workers: false });
    assert.deepEqual(adding.instanceNames(), ['default', 'umbrella', 'archive', 'ledger']);
    assert.equal(adding.admin('umbrella'), registry.get('umbrella').get(QueueBoxAdmin));
    assert.deepEqual(replacing.instanceNames(), ['archive']);
    await tenants.detach('umbrella');
    await dataSource.destroy();
    assert.deepEqual(adding.instanceNames(), ['default', 'archive', 'ledger']);
    assert.throws(() => resolveDashboardOptions({ public: true, appQueueBoxes: false }), /leaves nothing to show/);
  });

  it('every QueueBox, named or attached, refuses a transaction of every other one, in every direction, and stores nothing (I12)', async () => {
    const tenants = app.get(QueueBoxTenants);
    const registry = app.get(QueueBoxRegistry);
    const publisher = new RecordingPublisher();
    const tenantDataSources: DataSource[] = [];
    const boxes: { name: string; dataSource: DataSource; db: TestDatabase; tenant: boolean }[] = [
      { name: 'default', dataSource: ordersDataSource(), db: orders, tenant: false },
      { name: 'ledger', dataSource: ledgerDataSource(), db: ledger, tenant: false },
    ];
    try {
      for (const name of ['north', 'south']) {
        const db = await newDatabase();
        const dataSource = await new DataSource({ type: 'postgres', url: db.url, logging: false }).initialize();
        tenantDataSources.push(dataSource);
        await tenants.attach(name, { dataSource, outbox: { publisher, ...fast }, pull: fast });
        boxes.push({ name, dataSource, db, tenant: true });
      }
      const stored = async () => {
        let rows = 0;
        for (const { db } of boxes) {
          rows += (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM queuebox_outbox WHERE payload::text LIKE '%crossed%'`))[0]
            .n;
          rows += (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM queuebox_inbox WHERE idempotency_key LIKE 'crossed%'`))[0]
            .n;
        }
        return rows;
      };
      let refused = 0;
      const accepted: string[] = [];
      for (const own of boxes) {
        const entry = registry.get(own.name);
        const outbox = entry.get(OutboxService);
        const inbox = entry.get(InboxService);
        const lease = entry.get(LeaseService);
        // No row of any database has this token: the fenced writes could change nothing, only be refused or report a lost claim.
        const claim = {
          component: 'pull',
          table: 'inbox',
          id: '1',
          token: randomUUID(),
          leaseMs: 1000,
          leaseExpiresAt: new Date(),
          attempt: 1,
        } as const;
        for (const other of boxes) {
          if (other === own) continue;
          const direction = `${own.name} given ${other.name}'s transaction`;
          const calls: [string, (manager: EntityManager) => Promise<unknown>][] = [
            ['OutboxService.enqueue', (m) => outbox.enqueue(m, { destination: 'x', payload: `crossed ${direction}` })],
            ['OutboxService.enqueueMany', (m) => outbox.enqueueMany(m, [{ destination: 'x', payload: `crossed ${direction}` }])],
            ['InboxService.receive', (m) => inbox.receive({ source: 'payments', idempotencyKey: `crossed ${direction}`, payload: 1 }, m)],
            ['LeaseService.complete', (m) => lease.complete({ ...claim }, m)],
            ['LeaseService.completeBatch', (m) => lease.completeBatch([{ ...claim }], m)],
            ['LeaseService.renew', (m) => lease.renew({ ...claim }, m)],
          ];
          for (const [call, run] of calls) {
            // The caller's transaction commits whatever the call did: a row it stored would stay.
            const outcome = await other.dataSource.transaction((manager) =>
              run(manager).then(
                () => undefined,
                (error: unknown) => error,
              ),
            );
            if (!(outcome instanceof QueueBoxValidationError)) {
              accepted.push(`${call}, ${direction}: ${outcome === undefined ? 'accepted' : String(outcome)}`);
              continue;
            }
            assert.equal(outcome.field, 'manager');
            assert.match(outcome.message, new RegExp(`which belongs to QueueBox "${other.name}"`), `${call}, ${direction}`);
            assert.match(outcome.message, new RegExp(`this \\w+ belongs to QueueBox "${own.name}"`), `${call}, ${direction}`);
            const hint = other.tenant ? /queueBoxRegistry\.get\(/ : /@Inject(Outbox|Inbox|LeaseService)\(/;
            assert.match(outcome.message, hint, `${call}, ${direction}: how to reach the right one`);
            refused++;
          }
        }
      }
      const rows = await stored();
      assert.deepEqual(accepted, [], `${rows} rows stored across the databases`);
      assert.equal(refused, 4 * 3 * 6);
      assert.equal(rows, 0, 'nothing stored in any database');
    } finally {
      for (const name of tenants.names()) await tenants.detach(name);
      for (const dataSource of tenantDataSources) await dataSource.destroy();
    }
  });
});

describe('several QueueBoxes: what start-up refuses', () => {
  let first: TestDatabase;
  let second: TestDatabase;
  before(async () => {
    first = await createTestDatabase();
    second = await createTestDatabase();
  });
  after(async () => {
    await first?.drop();
    await second?.drop();
  });

  const start = async (imports: unknown[], providers: unknown[] = []) => {
    @Module({ imports: imports as never[], providers: providers as never[] })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: new RecordingLogger(), abortOnError: false });
    return app;
  };
  const twoDataSources = () => [
    TypeOrmModule.forRoot({ type: 'postgres', url: first.url, logging: false }),
    TypeOrmModule.forRoot({ name: 'second', type: 'postgres', url: second.url, logging: false }),
  ];

  it('two QueueBoxes without a name (an ambiguous class injection)', async () => {
    await assert.rejects(
      start([
        ...twoDataSources(),
        QueueBoxModule.forRoot({ workers: false }),
        QueueBoxModule.forRoot({ dataSource: 'second', workers: false }),
      ]),
      (error: unknown) => {
        assert.ok(error instanceof QueueBoxConfigError, String(error));
        assert.equal(error.option, 'name');
        assert.match(error.message, /Two QueueBox modules are named "default" \(on DataSources "default" and "second"\)/);
        assert.match(error.message, /QueueBoxModule.forRoot\(\{ name: "second", dataSource: "second"/);
        return true;
      },
    );
  });

  it('two QueueBoxes on one DataSource with the same tables; with other tables they work side by side', async () => {
    await assert.rejects(
      start([...twoDataSources(), QueueBoxModule.forRoot({ workers: false }), QueueBoxModule.forRoot({ name: 'again', workers: false })]),
      (error: unknown) =>
        error instanceof QueueBoxConfigError &&
        error.option === 'tables.outbox' &&
        /QueueBoxes "default" and "again" both use table "queuebox_outbox" of DataSource "default"/.test(error.message),
    );
    // The second schema's migrations need names of their own: TypeORM records migrations by name.
    const billing = { outbox: 'billing.outbox', inbox: 'billing.inbox' };
    const migrations = new DataSource({
      type: 'postgres',
      url: first.url,
      logging: false,
      migrations: createQueueBoxMigrations({
        tables: billing,
        names: Object.fromEntries(SCHEMA_MIGRATIONS.map((m, n) => [m, `Billing${m[0].toUpperCase()}${m.slice(1)}${1800000000000 + n}`])),
      }),
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    const publisher = new RecordingPublisher();
    const app = await start([
      ...twoDataSources(),
      QueueBoxModule.forRoot({ workers: false }),
      QueueBoxModule.forRoot({
        name: 'billing',
        tables: billing,
        outbox: { publisher, ...fast },
        workers: { outbox: true, relay: false, pull: false },
      }),
    ]);
    try {
      const dataSource = app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) =>
        app.get<OutboxService>(getOutboxServiceToken('billing')).enqueue(manager, { destination: 'd', payload: 'b' }),
      );
      await eventually(async () => publisher.calls.length === 1, 'the billing QueueBox to publish');
      assert.equal((await first.query('SELECT count(*)::int AS n FROM queuebox_outbox'))[0].n, 0);
    } finally {
      await app.close();
    }
  });

  it('a @PullHandler naming a QueueBox the application does not have, and a name that is not one', async () => {
    @Injectable()
    class Lost {
      @PullHandler('payments', { queuebox: 'ledgr' })
      async handle() {}
    }
    await assert.rejects(
      start([...twoDataSources(), QueueBoxModule.forRoot({ outbox: { publisher: new RecordingPublisher() } })], [Lost]),
      (error: unknown) =>
        error instanceof QueueBoxConfigError &&
        /@PullHandler\("payments"\) on Lost.handle/.test(error.option) &&
        /names QueueBox "ledgr", which the application does not have \(it has "default"\)/.test(error.message),
    );
    // Refused where the module is declared, before Nest starts.
    assert.throws(
      () => QueueBoxModule.forRoot({ name: 'a b', workers: false }),
      (error: unknown) => error instanceof QueueBoxConfigError && error.option === 'name' && /1 to 63 letters/.test(error.message),
    );
  });
});
