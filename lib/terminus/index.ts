// `queuebox/terminus`: health checks for @nestjs/terminus. A separate entry point, so apps without
// Terminus never load it.
export type { QueueBoxHealthCheckOptions, QueueBoxHealthReport } from '../health/queuebox-health';
export { QueueBoxHealthIndicator, QueueBoxHealthModule, type QueueBoxIndicatorTarget } from './queuebox.health-indicator';
