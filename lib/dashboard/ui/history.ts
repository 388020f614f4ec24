import { s } from './dom.js';

/**
 * The history chart: one bar per bucket (hour or minute), finished above the axis, dead below, the
 * current bucket at the right, with the first and last bucket's start labelled in UTC. Its label
 * says the totals, for screen readers.
 */
export function historyChart(
  finished: number[],
  dead: number[],
  at: { since: string; bucket: 'minute' | 'hour' },
  label: string,
): SVGElement {
  const width = 440;
  const height = 110;
  const middle = 72;
  const bottomAxis = height - 14;
  const bar = width / Math.max(finished.length, 1);
  const top = Math.max(1, ...finished);
  const low = Math.max(1, ...dead);
  const step = at.bucket === 'hour' ? 3_600_000 : 60_000;
  const start = Date.parse(at.since);
  const stamp = (i: number) => {
    const iso = new Date(start + i * step).toISOString();
    return `${at.bucket === 'hour' && finished.length > 24 ? iso.slice(5, 10) : ''} ${iso.slice(11, 16)}`.trim();
  };
  const bars = finished.flatMap((n, i) => {
    const x = (i * bar).toFixed(1);
    const w = Math.max(bar - 0.5, 0.5).toFixed(1);
    const shapes = [];
    const tip = `${stamp(i)} UTC: ${n} finished, ${dead[i] ?? 0} dead`;
    if (n > 0) {
      const up = Math.max(1, (n / top) * (middle - 14));
      shapes.push(s('rect', { class: 'bar-ok', x, y: (middle - up).toFixed(1), width: w, height: up.toFixed(1) }, s('title', null, tip)));
    }
    const d = dead[i] ?? 0;
    if (d > 0) {
      const down = Math.max(1, (d / low) * (bottomAxis - middle - 4));
      shapes.push(s('rect', { class: 'bar-dead', x, y: middle + 0.5, width: w, height: down.toFixed(1) }, s('title', null, tip)));
    }
    return shapes;
  });
  return s(
    'svg',
    { class: 'chart history', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': label },
    s('title', null, label),
    s('text', { class: 'scale', x: 0, y: 10 }, `max ${top.toLocaleString('en')}/${at.bucket}`),
    s('line', { class: 'axis', x1: 0, x2: width, y1: middle + 0.25, y2: middle + 0.25 }),
    bars,
    s('text', { class: 'scale', x: 0, y: height - 2 }, `${stamp(0)} UTC`),
    s('text', { class: 'scale', x: width, y: height - 2, 'text-anchor': 'end' }, `${stamp(finished.length - 1)} UTC`),
  );
}
