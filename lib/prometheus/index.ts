// `queuebox/prometheus`: metrics for @willsoto/nestjs-prometheus. A separate entry point, so apps
// without prom-client never load it.
export { COUNTERS, HISTOGRAMS } from '../metrics/metric-definitions';
export { GAUGES, QueueBoxPrometheusExporter, QueueBoxPrometheusModule } from './queuebox-prometheus.module';
