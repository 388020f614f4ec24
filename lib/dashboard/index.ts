export type { DashboardActionEvent } from '../events/queuebox.events';
export type { FlagContext, FlagSource, OverviewFlag } from './dashboard.flags';
export { QueueBoxDashboardModule } from './dashboard.module';
export type { DashboardAdmin, DashboardGuard, DashboardInstance, DashboardRequest, QueueBoxDashboardOptions } from './dashboard.options';
export { DASHBOARD_TOKEN_HEADER, type DashboardErrorCode, DashboardHttpError } from './dashboard.security';
export { DashboardService, type DeadLetterQuery, type OverviewRow } from './dashboard.service';
