import { get, post } from './api.js';
import { minuteChart } from './chart.js';
import { type Child, duration, h, mount, plural, time } from './dom.js';
import { attemptsSection } from './failures.js';
import { historyChart } from './history.js';
import { type Pause, pauseCell, pausedBadge } from './pauses.js';
import { sortable } from './sort.js';
import {
  api,
  BROWSER_ZONE,
  type Component,
  changeDeadLetters,
  componentTabs,
  errorText,
  heading,
  table,
  toIso,
  toLocal,
  type ViewContext,
} from './view-parts.js';

interface OverviewRow {
  component: Component;
  name: string;
  pending: number;
  processing: number;
  dead: number;
  oldestPendingAgeSeconds: number | null;
  finishedPerMinute: number[];
  deadPerMinute: number[];
  /** Paused (issue 40). */
  paused?: boolean;
}

interface DeadLetter {
  component: Component;
  id: string;
  messageId: string | null;
  idempotencyKey: string | null;
  name: string;
  key: string | null;
  attempts: number;
  lastError: string | null;
  fingerprint?: string | null;
  createdAt: string;
  lastAttemptAt: string | null;
  headers: Record<string, string>;
  payload?: unknown;
  traceId?: string | null;
}

interface BlockedKey extends Owned {
  component: Component;
  name: string;
  key: string;
  headId: string;
  messageId: string | null;
  state: string;
  attempts: number;
  lastError: string | null;
  reason: 'failing' | 'held';
  nextAttemptAt: string;
  waiting: number;
  heldSeconds: number | null;
}

type InstanceState = 'alive' | 'silent' | 'dead';

/** Who holds a row (RowOwner): an owner only while the row is held, its last claimer either way. */
interface Owned {
  owner: string | null;
  ownerState: InstanceState | null;
  lastClaimedBy: string | null;
}

interface Instance {
  id: string;
  host: string;
  pid: number;
  dataSource: string;
  version: string;
  deadAfterMs: number;
  startedAt: string;
  heartbeatAt: string;
  heartbeatAgeSeconds: number;
  state: InstanceState;
  claims: { outbox: number; inbox: number };
}

/** Marks an instance that missed heartbeats: `silent` (two or more), `expired` (dead). */
const STATE_CLASS: Record<InstanceState, string | null> = { alive: null, silent: 'silent', dead: 'expired' };

/**
 * Who holds a row: the owner, shortened, with its state, while the row is held. A row nobody holds
 * (pending, or its lease expired) has no owner: only its last claimer, said as such, in grey.
 */
function ownerCell(r: Owned) {
  if (r.owner !== null) {
    const state = r.ownerState ?? 'dead';
    return h('td', { class: STATE_CLASS[state] }, h('code', { title: r.owner }, r.owner.slice(0, 8)), ` ${state}`);
  }
  if (r.lastClaimedBy === null) return h('td', null, '—');
  return h('td', { class: 'hint' }, 'none; last claimed by ', h('code', { title: r.lastClaimedBy }, r.lastClaimedBy.slice(0, 8)));
}

interface Claim extends Owned {
  component: Component;
  id: string;
  messageId: string | null;
  idempotencyKey: string | null;
  name: string;
  key: string | null;
  token: string;
  attempts: number;
  claimedAt: string;
  leaseExpiresAt: string;
  ageSeconds: number;
  leaseRemainingSeconds: number;
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
const LABEL: Record<Component, { name: string; key: string; finished: string }> = {
  outbox: { name: 'Destination', key: 'Key', finished: 'sent' },
  inbox: { name: 'Source', key: 'Aggregate', finished: 'processed' },
};

function componentOf(params: URLSearchParams): Component {
  return params.get('component') === 'inbox' ? 'inbox' : 'outbox';
}

// ---- Overview -------------------------------------------------------------------------------

export async function overview(ctx: ViewContext): Promise<void> {
  const body = h('div', { class: 'overview' }, h('p', { class: 'loading' }, 'Loading…'));
  const board = h('section', { class: 'board', 'aria-label': 'Status' });
  const history = h('section', { class: 'history', 'aria-labelledby': 'history-title' });
  mount(
    ctx.main,
    heading('Overview', h('p', { class: 'hint' }, 'Backlog, lag and the last hour per minute (times in UTC); refreshed every 5 s.')),
    board,
    body,
    history,
  );
  const draw = async () => {
    const data = await get<{
      since: string;
      minutes: number;
      rows: OverviewRow[];
      flags: Flag[];
      lagThresholdSeconds: number;
      pauses?: Pause[] | null;
      sentRowsKept?: boolean;
    }>(api(ctx, 'overview'));
    mount(
      board,
      data.flags.length === 0
        ? h(
            'p',
            { class: 'flag ok', id: 'flags' },
            `All clear: no lag over ${duration(data.lagThresholdSeconds)}, no silent or dead instance, nothing paused, no database warning.`,
          )
        : h(
            'ul',
            { class: 'flags', id: 'flags' },
            data.flags.map((f) =>
              h(
                'li',
                { class: `flag ${f.level}`, 'data-flag': f.id },
                h('strong', null, f.level === 'critical' ? 'Critical: ' : 'Warning: '),
                f.text,
                f.view ? [' ', h('a', { href: `#/${encodeURIComponent(ctx.instance)}/${f.view}` }, 'Show')] : null,
              ),
            ),
          ),
    );
    const pauseOf = (r: OverviewRow) => data.pauses?.find((p) => p.component === r.component && p.name === r.name);
    const canPause = !ctx.session.readOnly && Array.isArray(data.pauses);
    mount(
      body,
      (['outbox', 'inbox'] as const).map((c) => {
        const rows = data.rows.filter((r) => r.component === c);
        const label = LABEL[c];
        // outbox.sentRows: 'delete': no sent rows to count by, so the totals say so instead of a zero.
        const sentNotKept = c === 'outbox' && data.sentRowsKept === false;
        return h(
          'section',
          { 'aria-labelledby': `overview-${c}` },
          h('h2', { id: `overview-${c}` }, c === 'outbox' ? 'Outbox destinations' : 'Inbox sources'),
          table(
            [
              label.name,
              'Pending',
              'Processing',
              'Dead',
              'Lag (oldest due)',
              `Last ${data.minutes} min: ${label.finished} / dead`,
              ...(canPause ? [''] : []),
            ],
            rows.map((r) =>
              h(
                'tr',
                r.paused ? { class: 'paused' } : null,
                h('th', { scope: 'row' }, r.name, pausedBadge(pauseOf(r))),
                h('td', { class: 'num' }, r.pending.toLocaleString('en')),
                h(
                  'td',
                  { class: 'num' },
                  r.processing > 0
                    ? h('a', { href: `#/${encodeURIComponent(ctx.instance)}/claims?component=${c}` }, r.processing.toLocaleString('en'))
                    : '0',
                ),
                h(
                  'td',
                  { class: 'num' },
                  r.dead > 0
                    ? h(
                        'a',
                        {
                          class: 'dead-link',
                          href: `#/${encodeURIComponent(ctx.instance)}/dead?${new URLSearchParams({ component: c, name: r.name })}`,
                        },
                        r.dead.toLocaleString('en'),
                      )
                    : '0',
                ),
                h(
                  'td',
                  {
                    class: `num${r.oldestPendingAgeSeconds !== null && r.oldestPendingAgeSeconds > data.lagThresholdSeconds ? ' lagging' : ''}`,
                    'data-sort': r.oldestPendingAgeSeconds ?? -1,
                  },
                  duration(r.oldestPendingAgeSeconds),
                ),
                h(
                  'td',
                  { class: 'chart-cell', 'data-sort': sum(r.finishedPerMinute) },
                  minuteChart(
                    r.finishedPerMinute,
                    r.deadPerMinute,
                    `${r.name}: ${plural(sum(r.finishedPerMinute), label.finished === 'sent' ? 'message sent' : 'message processed', label.finished === 'sent' ? 'messages sent' : 'messages processed')} and ${sum(r.deadPerMinute)} dead in the last ${data.minutes} minutes`,
                  ),
                  h(
                    'span',
                    sentNotKept
                      ? { class: 'totals', title: "Sent rows are deleted when sent (outbox.sentRows: 'delete'): not counted here" }
                      : { class: 'totals' },
                    `${sentNotKept ? 'sent not kept' : sum(r.finishedPerMinute).toLocaleString('en')} / ${sum(r.deadPerMinute).toLocaleString('en')}`,
                  ),
                ),
                canPause ? pauseCell(ctx, r, pauseOf(r), draw) : null,
              ),
            ),
            c === 'outbox'
              ? 'No outbox messages are waiting, in flight, dead or sent in the last hour.'
              : 'No inbox messages are waiting, in flight, dead or processed in the last hour.',
          ),
        );
      }),
    );
  };
  await draw();
  ctx.every(5000, draw);
  await drawHistory(ctx, history);
}

interface Flag {
  id: string;
  level: 'warning' | 'critical';
  text: string;
  view?: string;
}

interface History {
  since: string;
  bucket: 'minute' | 'hour';
  buckets: number;
  rows: { component: Component; name: string; finished: number[]; dead: number[] }[];
  /** False with `outbox.sentRows: 'delete'`: there are no sent rows to count. */
  sentRowsKept: boolean;
}

const RANGES = [
  ['24h', 'Last 24 hours, per hour', 'hour', 24],
  ['7d', 'Last 7 days, per hour', 'hour', 168],
  ['6h', 'Last 6 hours, per minute', 'minute', 360],
] as const;

/** The history beyond the hour: totals per component, per hour or minute, from what the tables hold (retention deletes the rest). */
async function drawHistory(ctx: ViewContext, section: HTMLElement): Promise<void> {
  const chosen = RANGES.find(([id]) => id === ctx.params.get('range')) ?? RANGES[0];
  const select = h(
    'select',
    { id: 'history-range', 'aria-label': 'History range' },
    RANGES.map(([id, label]) => h('option', { value: id, selected: id === chosen[0] }, label)),
  );
  select.addEventListener('change', () => ctx.go(`overview?range=${select.value}`));
  const data = await get<History>(api(ctx, 'history'), { bucket: chosen[2], buckets: chosen[3], by: 'component' });
  const charts = (['outbox', 'inbox'] as const).map((c) => {
    const rows = data.rows.filter((r) => r.component === c);
    const total = (pick: 'finished' | 'dead') =>
      Array.from({ length: data.buckets }, (_, i) => rows.reduce((n, r) => n + (r[pick][i] ?? 0), 0));
    const finished = total('finished');
    const dead = total('dead');
    const verb = c === 'outbox' ? 'sent' : 'processed';
    const title = c === 'outbox' ? 'Outbox' : 'Inbox';
    const deadCount = sum(dead).toLocaleString('en');
    const range = chosen[1].toLowerCase();
    // Without sent rows (outbox.sentRows: 'delete') there is nothing to count sends by: say so instead of a zero.
    const notKept = c === 'outbox' && data.sentRowsKept === false;
    const label = notKept
      ? `${title}: ${deadCount} dead, ${range}; sent rows are not kept`
      : `${title}: ${sum(finished).toLocaleString('en')} ${verb} and ${deadCount} dead, ${range}`;
    const caption = notKept
      ? `${title}: ${deadCount} dead. Sent rows are deleted when sent (outbox.sentRows: 'delete'): count sends with queuebox_outbox_messages_sent_total.`
      : `${title}: ${sum(finished).toLocaleString('en')} ${verb} / ${deadCount} dead`;
    return h(
      'figure',
      { class: 'history-chart' },
      historyChart(finished, dead, { since: data.since, bucket: data.bucket }, label),
      h('figcaption', notKept ? { id: 'history-sent-not-kept' } : null, caption),
    );
  });
  mount(
    section,
    h(
      'div',
      { class: 'heading' },
      h('h2', { id: 'history-title' }, 'History'),
      h('label', { class: 'inline' }, h('span', null, 'Range'), select),
    ),
    h(
      'p',
      { class: 'hint' },
      data.sentRowsKept === false
        ? `By processed_at and the dead rows' last attempt, from ${time(data.since)} (UTC) on, one bar per ${data.bucket}; sent outbox rows are deleted when sent, and rows retention deleted are not counted.`
        : `By sent_at / processed_at and the dead rows' last attempt, from ${time(data.since)} (UTC) on, one bar per ${data.bucket}; rows retention deleted are not counted.`,
    ),
    h('div', { class: 'history-charts' }, charts),
  );
}

// ---- Dead letters ---------------------------------------------------------------------------

const FILTERS = ['name', 'key', 'error', 'from', 'to', 'fingerprint'] as const;

export async function deadLetters(ctx: ViewContext): Promise<void> {
  const component = componentOf(ctx.params);
  const label = LABEL[component];
  const filter: Record<string, string> = {};
  for (const f of FILTERS) {
    const value = ctx.params.get(f);
    if (value) filter[f] = value;
  }
  const after = ctx.params.get('after') ?? '';
  const field = (name: (typeof FILTERS)[number], text: string, type = 'search') =>
    h(
      'label',
      null,
      h('span', null, text),
      h('input', {
        name,
        type,
        value: type === 'datetime-local' ? toLocal(filter[name] ?? null) : (filter[name] ?? ''),
        autocomplete: 'off',
      }),
    );
  const form = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Find dead letters' },
    field('error', 'Error contains'),
    field('name', label.name),
    field('key', label.key),
    field('from', `Died from (${BROWSER_ZONE})`, 'datetime-local'),
    field('to', `Died before (${BROWSER_ZONE})`, 'datetime-local'),
    filter.fingerprint ? h('input', { type: 'hidden', name: 'fingerprint', value: filter.fingerprint }) : null,
    h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Search'), h('button', { type: 'reset' }, 'Clear')),
  );
  const onSearch = (event: Event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = new URLSearchParams({ component });
    for (const f of FILTERS) {
      const raw = String(data.get(f) ?? '').trim();
      const value = f === 'from' || f === 'to' ? toIso(raw) : raw;
      if (value) next.set(f, value);
    }
    ctx.go(`dead?${next}`);
  };
  form.addEventListener('submit', onSearch);
  form.addEventListener('reset', (event) => {
    event.preventDefault();
    ctx.go(`dead?component=${component}`);
  });

  const results = h('div', { class: 'results' }, h('p', { class: 'loading' }, 'Loading…'));
  mount(
    ctx.main,
    heading(
      'Dead letters',
      componentTabs(ctx, 'dead', component, filter),
      h('a', { href: `#/${encodeURIComponent(ctx.instance)}/groups?component=${component}`, class: 'back' }, 'By cause →'),
    ),
    form,
    results,
  );

  const query = { component, ...filter };
  const [page, total] = await Promise.all([
    get<{ rows: DeadLetter[]; nextAfterId: string | null }>(api(ctx, 'dead-letters'), { ...query, after, limit: 50 }),
    get<{ count: number }>(api(ctx, 'dead-letters/count'), query),
  ]);
  const selected = new Set<string>();
  const boxes: HTMLInputElement[] = [];
  const actions = h('div', { class: 'actions', role: 'group', 'aria-label': 'Bulk actions' });
  const filtered = Object.keys(filter).length > 0;

  const act = async (action: 'replay' | 'discard', scope: 'selected' | 'matching') => {
    const count = scope === 'selected' ? selected.size : (await get<{ count: number }>(api(ctx, 'dead-letters/count'), query)).count;
    if (count === 0) return;
    const what = `${plural(count, `dead ${component} message`)}${scope === 'matching' ? (filtered ? ' matching this search' : ', every dead one') : ''}`;
    const body =
      scope === 'selected'
        ? { component, ids: [...selected] }
        : {
            component,
            filter: {
              name: filter.name,
              key: filter.key,
              error: filter.error,
              from: filter.from,
              to: filter.to,
              fingerprint: filter.fingerprint,
            },
            all: !filtered,
          };
    await changeDeadLetters(ctx, action, count, what, body, () => deadLetters(ctx));
  };
  const drawActions = () => {
    if (ctx.session.readOnly) {
      mount(actions, h('p', { class: 'hint' }, 'Read-only: replay and discard are off.'));
      return;
    }
    const n = selected.size;
    mount(
      actions,
      h(
        'button',
        { type: 'button', class: 'primary', disabled: n === 0, onClick: () => act('replay', 'selected') },
        `Replay selected (${n})`,
      ),
      h(
        'button',
        { type: 'button', class: 'danger', disabled: n === 0, onClick: () => act('discard', 'selected') },
        `Discard selected (${n})`,
      ),
      h('span', { class: 'sep' }),
      h(
        'button',
        { type: 'button', disabled: total.count === 0, onClick: () => act('replay', 'matching') },
        `Replay all ${filtered ? 'matching' : 'dead'} (${total.count.toLocaleString('en')})`,
      ),
      h(
        'button',
        { type: 'button', class: 'danger', disabled: total.count === 0, onClick: () => act('discard', 'matching') },
        `Discard all ${filtered ? 'matching' : 'dead'} (${total.count.toLocaleString('en')})`,
      ),
    );
  };
  const selectAll = h('input', { type: 'checkbox', 'aria-label': 'Select every row of this page' });
  selectAll.addEventListener('change', () => {
    for (const box of boxes) {
      box.checked = selectAll.checked;
      if (box.checked) selected.add(box.value);
      else selected.delete(box.value);
    }
    drawActions();
  });
  const rows = page.rows.map((r) => {
    const box = h('input', { type: 'checkbox', value: r.id, 'aria-label': `Select message ${r.id}` });
    boxes.push(box);
    box.addEventListener('change', () => {
      if (box.checked) selected.add(r.id);
      else selected.delete(r.id);
      selectAll.checked = selected.size === boxes.length;
      drawActions();
    });
    return h(
      'tr',
      null,
      ctx.session.readOnly ? null : h('td', { class: 'check' }, box),
      h('td', null, h('a', { href: `#/${encodeURIComponent(ctx.instance)}/dead/${component}/${r.id}` }, r.id)),
      h('td', null, r.name),
      h('td', null, r.key ?? '—'),
      h('td', { class: 'num' }, r.attempts),
      h('td', { class: 'time' }, time(r.lastAttemptAt ?? r.createdAt)),
      h('td', null, errorText(r.lastError)),
    );
  });
  const headers = ['Id', label.name, label.key, 'Attempts', 'Died (UTC)', 'Last error'];
  const list =
    rows.length === 0
      ? h('p', { class: 'empty' }, filtered ? 'No dead letters match this search.' : `No dead ${component} messages.`)
      : h(
          'div',
          { class: 'table-wrap' },
          sortable(
            h(
              'table',
              null,
              h(
                'caption',
                null,
                `${plural(total.count, 'dead letter')}${filtered ? (total.count === 1 ? ' matches' : ' match') : ''}; newest first`,
              ),
              h(
                'thead',
                null,
                h(
                  'tr',
                  null,
                  ctx.session.readOnly ? null : h('th', { scope: 'col', class: 'check' }, selectAll),
                  headers.map((t) => h('th', { scope: 'col' }, t)),
                ),
              ),
              h('tbody', null, rows),
            ),
          ),
        );
  const paging = h(
    'nav',
    { class: 'paging', 'aria-label': 'Pages' },
    after ? h('a', { href: `#/${encodeURIComponent(ctx.instance)}/dead?${new URLSearchParams(query)}` }, 'First page') : null,
    page.nextAfterId
      ? h(
          'a',
          { href: `#/${encodeURIComponent(ctx.instance)}/dead?${new URLSearchParams({ ...query, after: page.nextAfterId })}` },
          'Next page',
        )
      : null,
  );
  drawActions();
  mount(results, actions, list, paging);
}

export async function deadLetter(ctx: ViewContext, component: Component, id: string): Promise<void> {
  const r = await get<DeadLetter>(api(ctx, `dead-letters/${component}/${encodeURIComponent(id)}`));
  const label = LABEL[component];
  const act = async (action: 'replay' | 'discard') => {
    const confirmed = await ctx.confirm({
      title: action === 'replay' ? 'Replay 1 message?' : 'Discard 1 message?',
      text: action === 'replay' ? `Message ${id} will be sent again (same message id).` : `Message ${id} will be deleted for good.`,
      action: action === 'replay' ? 'Replay 1' : 'Discard 1',
      danger: action === 'discard',
    });
    if (confirmed === null) return;
    try {
      const { changed } = await post<{ changed: number }>(ctx.session, api(ctx, `dead-letters/${action}`), { component, ids: [id] });
      ctx.say(`${action === 'replay' ? 'Replayed' : 'Discarded'} ${plural(changed, 'message')}.`);
      ctx.go(`dead?component=${component}`);
    } catch (error) {
      ctx.say((error as Error).message, 'error');
    }
  };
  const fields: [string, Child][] = [
    ['Component', component],
    [label.name, r.name],
    [label.key, r.key ?? '—'],
    component === 'outbox'
      ? ['Message id', h('code', null, r.messageId ?? '—')]
      : ['Idempotency key', h('code', null, r.idempotencyKey ?? '—')],
    ['Attempts', r.attempts],
    [component === 'outbox' ? 'Enqueued (UTC)' : 'Received (UTC)', time(r.createdAt)],
    ['Last attempt (UTC)', time(r.lastAttemptAt)],
    ['Trace id', r.traceId ? h('code', null, r.traceId) : '—'],
    [
      'Fingerprint',
      r.fingerprint
        ? h(
            'a',
            {
              href: `#/${encodeURIComponent(ctx.instance)}/dead?${new URLSearchParams({ component, name: r.name, fingerprint: r.fingerprint })}`,
            },
            r.fingerprint,
          )
        : '—',
    ],
  ];
  const attempts = await attemptsSection(ctx, component, id);
  mount(
    ctx.main,
    heading(
      `Dead letter ${id}`,
      h('a', { href: `#/${encodeURIComponent(ctx.instance)}/dead?component=${component}`, class: 'back' }, '← Dead letters'),
    ),
    ctx.session.readOnly
      ? null
      : h(
          'div',
          { class: 'actions' },
          h('button', { type: 'button', class: 'primary', onClick: () => act('replay') }, 'Replay'),
          h('button', { type: 'button', class: 'danger', onClick: () => act('discard') }, 'Discard'),
        ),
    h(
      'dl',
      { class: 'fields' },
      fields.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]),
    ),
    h('h2', null, 'Last error'),
    h('pre', { class: 'error-block' }, r.lastError ?? '—'),
    attempts,
    h('h2', null, 'Payload'),
    h('pre', { class: 'code', tabindex: '0' }, JSON.stringify(r.payload, null, 2)),
    h('h2', null, 'Headers'),
    table(
      ['Header', 'Value'],
      Object.entries(r.headers).map(([k, v]) =>
        h('tr', null, h('th', { scope: 'row' }, h('code', null, k)), h('td', null, h('code', null, v))),
      ),
      'No headers.',
    ),
  );
}

// ---- Blocked keys ---------------------------------------------------------------------------

export async function blocked(ctx: ViewContext): Promise<void> {
  const component = componentOf(ctx.params);
  const label = LABEL[component];
  const { rows } = await get<{ rows: BlockedKey[] }>(api(ctx, 'blocked'), { component, limit: 200 });
  const skip = async (r: BlockedKey) => {
    const reason = await ctx.confirm({
      title: `Skip the head of ${label.key.toLowerCase()} ${r.key}?`,
      text: `Row ${r.headId} (${r.attempts} failed attempts) becomes dead, so the ${plural(r.waiting, 'row')} behind it flow again. A row a worker holds is never skipped.`,
      action: 'Skip head',
      danger: true,
      reason: true,
    });
    if (reason === null) return;
    const target =
      component === 'outbox'
        ? { component, key: r.key, headId: r.headId }
        : { component, source: r.name, aggregateId: r.key, headId: r.headId };
    try {
      const { skippedId } = await post<{ skippedId: string | null }>(ctx.session, api(ctx, 'blocked/skip-head'), {
        ...target,
        reason: reason || undefined,
      });
      ctx.say(
        skippedId ? `Skipped row ${skippedId}; it is a dead letter now.` : 'Nothing skipped: the head changed or a worker holds it.',
        skippedId ? 'ok' : 'error',
      );
      await blocked(ctx);
    } catch (error) {
      ctx.say((error as Error).message, 'error');
    }
  };
  mount(
    ctx.main,
    heading(`Blocked ${component === 'outbox' ? 'keys' : 'aggregates'}`, componentTabs(ctx, 'blocked', component)),
    h(
      'p',
      { class: 'hint' },
      `A ${label.key.toLowerCase()} whose first unfinished row keeps failing (or is held by a claim) holds back every later row of it. A head has an owner only while a worker holds it (its lease live): silent, the owner missed two heartbeats; dead, it moves again once a live replica ends its leases. A head waiting for its retry is held by nobody: its last claimer is shown as such.`,
    ),
    table(
      [
        label.name,
        label.key,
        'Head row',
        'Why',
        'State',
        'Attempts',
        'Next attempt (UTC)',
        'Held for',
        'Owner',
        'Waiting',
        'Last error',
        ...(ctx.session.readOnly ? [] : ['']),
      ],
      rows.map((r) =>
        h(
          'tr',
          null,
          h('td', null, r.name),
          h('th', { scope: 'row' }, r.key),
          h('td', null, r.headId),
          h('td', null, r.reason),
          h('td', null, r.state),
          h('td', { class: 'num' }, r.attempts),
          h('td', { class: 'time' }, time(r.nextAttemptAt)),
          h('td', { class: 'num', 'data-sort': r.heldSeconds ?? -1 }, r.heldSeconds === null ? '—' : duration(r.heldSeconds)),
          ownerCell(r),
          h('td', { class: 'num' }, r.waiting.toLocaleString('en')),
          h('td', { class: 'error-cell' }, errorText(r.lastError, 100)),
          ctx.session.readOnly
            ? null
            : h('td', { class: 'action' }, h('button', { type: 'button', class: 'danger small', onClick: () => skip(r) }, 'Skip head')),
        ),
      ),
      `No blocked ${component === 'outbox' ? 'keys' : 'aggregates'}.`,
      undefined,
      'blocked-table',
    ),
  );
}

// ---- Claims in flight -----------------------------------------------------------------------

export async function claims(ctx: ViewContext): Promise<void> {
  const component = componentOf(ctx.params);
  const label = LABEL[component];
  const body = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  mount(
    ctx.main,
    heading('Claims in flight', componentTabs(ctx, 'claims', component)),
    h(
      'p',
      { class: 'hint' },
      'Rows a worker holds now, oldest claim first: the instance that holds each (see Instances) and the claim token its fenced writes carry. Times by the database clock; refreshed every 5 s.',
    ),
    body,
  );
  const draw = async () => {
    const { rows } = await get<{ rows: Claim[] }>(api(ctx, 'claims'), { component, limit: 200 });
    mount(
      body,
      table(
        ['Id', label.name, label.key, 'Owner', 'Claim token', 'Attempt', 'Claimed (UTC)', 'Age', 'Lease left'],
        rows.map((r) =>
          h(
            'tr',
            { class: r.leaseRemainingSeconds < 0 ? 'expired' : null },
            h('td', null, r.id),
            h('td', null, r.name),
            h('td', null, r.key ?? '—'),
            ownerCell(r),
            h('td', null, h('code', { title: r.token }, r.token.slice(0, 8))),
            h('td', { class: 'num' }, r.attempts),
            h('td', { class: 'time' }, time(r.claimedAt)),
            h('td', { class: 'num', 'data-sort': r.ageSeconds }, duration(r.ageSeconds)),
            h(
              'td',
              { class: 'num', 'data-sort': r.leaseRemainingSeconds },
              r.leaseRemainingSeconds < 0 ? `expired ${duration(-r.leaseRemainingSeconds)} ago` : duration(r.leaseRemainingSeconds),
            ),
          ),
        ),
        `No ${component} rows are in flight.`,
      ),
    );
  };
  await draw();
  ctx.every(5000, draw);
}

// ---- Instances and heartbeats ---------------------------------------------------------------

export async function heartbeats(ctx: ViewContext): Promise<void> {
  const data = await get<{ available: boolean; reason?: string; rows: Instance[] }>(api(ctx, 'heartbeats'));
  mount(
    ctx.main,
    heading('Instances'),
    h(
      'p',
      { class: 'hint' },
      'Every QueueBox process and DataSource, with its last heartbeat by the database clock. Silent: it missed at least two heartbeats (no heartbeat for two thirds of its dead-after time) and still holds its rows. Dead: silent past its dead-after time; a live replica ends its leases at its next heartbeat.',
    ),
    data.available
      ? table(
          ['Id', 'Host', 'Pid', 'DataSource', 'Version', 'Started (UTC)', 'Last heartbeat', 'State', 'Outbox claims', 'Inbox claims'],
          data.rows.map((r) =>
            h(
              'tr',
              { class: STATE_CLASS[r.state] },
              h('td', null, h('code', { title: r.id }, r.id.slice(0, 8))),
              h('td', null, r.host),
              h('td', { class: 'num' }, r.pid),
              h('td', null, r.dataSource),
              h('td', null, r.version),
              h('td', { class: 'time' }, time(r.startedAt)),
              h('td', { class: 'num', 'data-sort': r.heartbeatAgeSeconds }, `${duration(r.heartbeatAgeSeconds)} ago`),
              h(
                'td',
                null,
                r.state === 'alive'
                  ? 'alive'
                  : r.state === 'silent'
                    ? `silent (dead after ${duration(r.deadAfterMs / 1000)})`
                    : `dead (silent over ${duration(r.deadAfterMs / 1000)})`,
              ),
              h('td', { class: 'num' }, r.claims.outbox),
              h('td', { class: 'num' }, r.claims.inbox),
            ),
          ),
          'No instance is registered.',
        )
      : h('p', { class: 'notice', role: 'note' }, data.reason ?? 'Not available.'),
  );
}
