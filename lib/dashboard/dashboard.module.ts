import { type DynamicModule, Module } from '@nestjs/common';
import { loadDashboardAssets } from './dashboard.assets';
import { QUEUEBOX_DASHBOARD_ACTION_CHECK, QUEUEBOX_DASHBOARD_ASSETS, QUEUEBOX_DASHBOARD_OPTIONS } from './dashboard.constants';
import { createDashboardController } from './dashboard.controller';
import { type QueueBoxDashboardOptions, resolveDashboardOptions } from './dashboard.options';
import { DashboardActionCheck } from './dashboard.security';
import { DashboardService } from './dashboard.service';

/**
 * The QueueBox dashboard: a page and a JSON API, mounted in the app at `path`, to see and fix the
 * outbox and inbox from a browser (backlog and lag, throughput, dead letters with replay and
 * discard, blocked keys with skip-head, claims in flight). Every change goes through
 * `QueueBoxAdmin`. It refuses to start without a `guard` (or an explicit `public: true`); actions
 * need a same-origin request with the token of `GET <path>/api/session`; `readOnly: true` hides
 * and refuses them. From `queuebox/dashboard`, so apps that do not import it load none of it.
 *
 * @example
 * @Module({
 *   imports: [
 *     TypeOrmModule.forRoot({ ... }),
 *     QueueBoxModule.forRoot({ ... }),
 *     QueueBoxDashboardModule.forRoot({ path: 'ops/queuebox', guard: OperatorsGuard }),
 *   ],
 * })
 * export class AppModule {}
 */
@Module({})
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest dynamic module is a class with a static factory.
export class QueueBoxDashboardModule {
  /** Validates `options` at once: no guard and no `public: true` throws `QueueBoxConfigError` here, before the app starts. */
  static forRoot(options: QueueBoxDashboardOptions): DynamicModule {
    const resolved = resolveDashboardOptions(options);
    return {
      module: QueueBoxDashboardModule,
      imports: resolved.imports,
      controllers: [createDashboardController(resolved)],
      providers: [
        { provide: QUEUEBOX_DASHBOARD_OPTIONS, useValue: resolved },
        { provide: QUEUEBOX_DASHBOARD_ACTION_CHECK, useValue: new DashboardActionCheck(resolved) },
        { provide: QUEUEBOX_DASHBOARD_ASSETS, useFactory: () => loadDashboardAssets() },
        DashboardService,
      ],
      exports: [DashboardService],
    };
  }
}
