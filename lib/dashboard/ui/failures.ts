// Failures by cause and attempt by attempt: the dead-letter groups view (one row per destination or
// source and fingerprint, with replay and discard per group behind the count confirmation) and
// the attempts section of a message's detail view. Everything comes from the API.
import { get } from './api.js';
import { h, mount, plural, time } from './dom.js';
import { changeDeadLetters, componentTabs, heading, table, type ViewContext } from './view-parts.js';

type Component = 'outbox' | 'inbox';

interface Group {
  component: Component;
  name: string;
  fingerprint: string | null;
  count: number;
  firstDeadAt: string;
  lastDeadAt: string;
}

interface Attempt {
  attempt: number;
  failedAt: string;
  durationMs: number | null;
  instanceId: string | null;
  errorClass: string;
  error: string;
  outcome: 'retry' | 'dead';
}

const api = (ctx: ViewContext, path: string) => `${encodeURIComponent(ctx.instance)}/${path}`;

/** `1.234 s`, or `—`. */
const seconds = (ms: number | null) => (ms === null ? '—' : `${(ms / 1000).toFixed(3)} s`);

/** The `<class>: <pattern>` of a fingerprint, the class in bold. */
function fingerprintText(fingerprint: string | null) {
  if (fingerprint === null) return h('span', { class: 'hint' }, 'none (died before the attempts migration)');
  const cut = fingerprint.indexOf(': ');
  if (cut < 0) return h('code', null, fingerprint);
  return h(
    'span',
    { class: 'fingerprint' },
    h('strong', null, `${fingerprint.slice(0, cut)}:`),
    h('code', null, fingerprint.slice(cut + 2)),
  );
}

export async function deadLetterGroups(ctx: ViewContext): Promise<void> {
  const component: Component = ctx.params.get('component') === 'inbox' ? 'inbox' : 'outbox';
  const nameLabel = component === 'outbox' ? 'Destination' : 'Source';
  const results = h('div', { class: 'results' }, h('p', { class: 'loading' }, 'Loading…'));
  mount(
    ctx.main,
    heading('Dead-letter groups', componentTabs(ctx, 'groups', component)),
    h(
      'p',
      { class: 'hint' },
      'Dead letters by cause: their destination or source and their fingerprint, the error class and the message with ids and numbers taken out. A replay or discard changes only the rows whose fingerprint still matches when it runs.',
    ),
    results,
  );
  const answer = await get<{ available: boolean; reason?: string; rows: Group[] }>(api(ctx, 'dead-letters/groups'), {
    component,
    limit: 100,
  });
  if (!answer.available) {
    mount(results, h('p', { class: 'empty' }, answer.reason ?? 'Not available.'));
    return;
  }
  const act = async (group: Group, action: 'replay' | 'discard') => {
    const filter = { name: group.name, fingerprint: group.fingerprint ?? undefined };
    const { count } = await get<{ count: number }>(api(ctx, 'dead-letters/count'), { component, ...filter });
    if (count === 0) {
      ctx.say('No dead letters left in this group.');
      await deadLetterGroups(ctx);
      return;
    }
    const what = `${plural(count, `dead ${component} message`)} of ${group.name} with this fingerprint`;
    await changeDeadLetters(ctx, action, count, what, { component, filter }, () => deadLetterGroups(ctx));
  };
  const rows = answer.rows.map((g) => {
    const search = new URLSearchParams({ component, name: g.name, ...(g.fingerprint === null ? {} : { fingerprint: g.fingerprint }) });
    return h(
      'tr',
      null,
      h(
        'td',
        { class: 'num' },
        h('a', { href: `#/${encodeURIComponent(ctx.instance)}/dead?${search}`, title: 'List them' }, g.count.toLocaleString('en')),
      ),
      h('td', null, g.name),
      h('td', { class: 'wrap' }, fingerprintText(g.fingerprint)),
      h('td', { class: 'time' }, time(g.firstDeadAt)),
      h('td', { class: 'time' }, time(g.lastDeadAt)),
      ctx.session.readOnly || g.fingerprint === null
        ? h('td', null, '')
        : h(
            'td',
            { class: 'row-actions' },
            h('button', { type: 'button', class: 'primary', onClick: () => act(g, 'replay') }, 'Replay group'),
            h('button', { type: 'button', class: 'danger', onClick: () => act(g, 'discard') }, 'Discard group'),
          ),
    );
  });
  mount(
    results,
    ctx.session.readOnly ? h('p', { class: 'hint' }, 'Read-only: replay and discard are off.') : null,
    table(
      ['Count', nameLabel, 'Fingerprint', 'First died', 'Last died', ''],
      rows,
      `No dead ${component} messages.`,
      `${plural(answer.rows.length, 'group')}, the biggest first`,
    ),
  );
}

/** The attempts section of a message's detail view: its failed attempts, newest first. */
export async function attemptsSection(ctx: ViewContext, component: Component, id: string): Promise<HTMLElement> {
  const section = h('section', { class: 'attempts', 'aria-labelledby': 'attempts-title' }, h('h2', { id: 'attempts-title' }, 'Attempts'));
  const answer = await get<{ available: boolean; reason?: string; rows: Attempt[] }>(
    api(ctx, `attempts/${component}/${encodeURIComponent(id)}`),
  );
  if (!answer.available) {
    section.append(h('p', { class: 'empty' }, answer.reason ?? 'Not available.'));
    return section;
  }
  section.append(
    table(
      ['Attempt', 'Failed', 'Ran for', 'Instance', 'Outcome', 'Error class', 'Error'],
      answer.rows.map((a) =>
        h(
          'tr',
          null,
          h('td', { class: 'num' }, a.attempt),
          h('td', { class: 'time' }, time(a.failedAt)),
          h('td', { class: 'num' }, seconds(a.durationMs)),
          h('td', null, a.instanceId === null ? '—' : h('code', { title: a.instanceId }, a.instanceId.slice(0, 8))),
          h('td', { class: a.outcome === 'dead' ? 'expired' : null }, a.outcome),
          h('td', null, h('code', null, a.errorClass)),
          h('td', { class: 'wrap' }, h('span', { class: 'error-text' }, a.error)),
        ),
      ),
      'No failed attempts recorded (QueueBox keeps the last attemptHistory of each message, written when an attempt fails).',
      'Failed attempts, newest first',
    ),
  );
  return section;
}
