import { s } from './dom.js';

/**
 * A small bar chart of one hour: finished (sent or processed) above the axis, dead below, one bar
 * per minute, the current minute at the right. Its label says the totals, for screen readers.
 */
export function minuteChart(finished: number[], dead: number[], label: string): SVGElement {
  const width = 180;
  const height = 36;
  const middle = 24;
  const bar = width / Math.max(finished.length, 1);
  const top = Math.max(1, ...finished);
  const bottom = Math.max(1, ...dead);
  const bars = finished.flatMap((n, minute) => {
    const x = (minute * bar).toFixed(1);
    const w = Math.max(bar - 0.6, 0.6).toFixed(1);
    const shapes = [];
    if (n > 0) {
      const up = Math.max(1, (n / top) * (middle - 2));
      shapes.push(s('rect', { class: 'bar-ok', x, y: (middle - up).toFixed(1), width: w, height: up.toFixed(1) }));
    }
    const d = dead[minute] ?? 0;
    if (d > 0) {
      const down = Math.max(1, (d / bottom) * (height - middle - 1));
      shapes.push(s('rect', { class: 'bar-dead', x, y: middle + 0.5, width: w, height: down.toFixed(1) }));
    }
    return shapes;
  });
  return s(
    'svg',
    { class: 'chart', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': label },
    s('title', null, label),
    s('line', { class: 'axis', x1: 0, x2: width, y1: middle + 0.25, y2: middle + 0.25 }),
    bars,
  );
}
