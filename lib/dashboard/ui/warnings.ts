// The database warnings (docs/doctor.md): the Database view, from `GET api/:instance/warnings`. The
// overview's flag of them is one of the server's flag sources (dashboard.flags.ts).
import { get } from './api.js';
import { h, mount, time } from './dom.js';
import type { ViewContext } from './view-parts.js';

interface DatabaseWarning {
  code: string;
  severity: 'error' | 'warning' | 'info';
  fatal: boolean;
  subject: string | null;
  message: string;
  repair: string | null;
}

interface Warnings {
  available: boolean;
  reason?: string;
  checkedAt?: string;
  warnings: DatabaseWarning[];
  notChecked: string[];
}

const path = (ctx: ViewContext) => `${encodeURIComponent(ctx.instance)}/warnings`;

/** The Database view: every warning with its severity, code, subject, message and repair. */
export async function warnings(ctx: ViewContext): Promise<void> {
  const body = h('div', { class: 'warnings' }, h('p', { class: 'loading' }, 'Loading…'));
  const recheck = h('button', { type: 'button' }, 'Check now');
  mount(
    ctx.main,
    h(
      'div',
      { class: 'heading' },
      h('h1', { tabindex: '-1', id: 'view-title' }, 'Database warnings'),
      h(
        'p',
        { class: 'hint' },
        'What slows or stops QueueBox in the database, with the statement that repairs it (read it before running it). Examined every doctor.intervalMs; refreshed every 15 s.',
      ),
      recheck,
    ),
    body,
  );
  const draw = async (refresh = false) => {
    const data = await get<Warnings>(path(ctx), refresh ? { refresh: 1 } : undefined);
    if (!data.available) {
      mount(body, h('p', { class: 'empty' }, data.reason ?? 'Not available for this instance.'));
      return;
    }
    mount(
      body,
      h(
        'p',
        { class: 'hint' },
        `Examined ${time(data.checkedAt)}.`,
        data.notChecked.length > 0 ? ` Not checked on this database: ${data.notChecked.join(', ')}.` : '',
      ),
      data.warnings.length === 0
        ? h('p', { class: 'empty' }, 'No database warnings.')
        : h(
            'ul',
            { class: 'db-warnings' },
            data.warnings.map((w) =>
              h(
                'li',
                { class: `db-warning ${w.severity}` },
                h(
                  'p',
                  { class: 'warning-head' },
                  h('span', { class: `severity sev-${w.severity}` }, w.fatal ? `${w.severity} (fatal)` : w.severity),
                  ' ',
                  h('code', null, w.code),
                  w.subject ? h('span', { class: 'subject' }, ` ${w.subject}`) : null,
                ),
                h('p', null, w.message),
                w.repair ? h('p', { class: 'repair' }, h('span', null, 'Repair: '), h('code', null, w.repair)) : null,
              ),
            ),
          ),
    );
  };
  recheck.addEventListener('click', () => {
    recheck.disabled = true;
    draw(true)
      .then(() => ctx.say('Examined the database now.'))
      .catch((error) => ctx.say((error as Error).message, 'error'))
      .finally(() => {
        recheck.disabled = false;
      });
  });
  await draw();
  ctx.every(15_000, () => draw());
}
