// Pause and resume (issue 40) on the overview: a badge on each paused row and the Pause / Resume
// action (confirmed; the reason is stored with the pause). The status board's flag of what is
// paused is a flag source of the server (dashboard.flags.ts).

import { post } from './api.js';
import { type Child, h, time } from './dom.js';
import type { ViewContext } from './view-parts.js';

type Component = 'outbox' | 'inbox';

/** A pause as the API lists it (`PauseRow`). */
export interface Pause {
  component: Component;
  name: string;
  reason: string | null;
  pausedBy: string | null;
  pausedAt: string;
}

const KIND: Record<Component, string> = { outbox: 'destination', inbox: 'source' };

const describe = (p: Pause) => `Paused by ${p.pausedBy ?? 'unknown'} at ${time(p.pausedAt)}${p.reason ? `: ${p.reason}` : ''}`;

/** The badge beside a paused row's name. */
export function pausedBadge(pause: Pause | undefined): Child {
  return pause ? [' ', h('span', { class: 'badge paused', title: describe(pause) }, 'paused')] : null;
}

/** The row's action: Pause, or Resume when paused; none in read-only mode. */
export function pauseCell(
  ctx: ViewContext,
  row: { component: Component; name: string },
  pause: Pause | undefined,
  redraw: () => Promise<void>,
): Child {
  if (ctx.session.readOnly) return null;
  const kind = KIND[row.component];
  const act = async () => {
    const reason = await ctx.confirm(
      pause
        ? {
            title: `Resume ${kind} ${row.name}?`,
            text: `Every replica claims its rows again within one poll interval, oldest first and in order per key. ${describe(pause)}.`,
            action: 'Resume',
          }
        : {
            title: `Pause ${kind} ${row.name}?`,
            text: `Every replica stops claiming its rows within one poll interval (claims in flight finish). Its rows wait, in order, and keep holding back the later rows of their keys until you resume it.`,
            action: 'Pause',
            danger: true,
            reason: true,
          },
    );
    if (reason === null) return;
    try {
      if (pause) {
        const { resumed } = await post<{ resumed: boolean }>(ctx.session, `${encodeURIComponent(ctx.instance)}/pauses/resume`, row);
        ctx.say(resumed ? `Resumed ${kind} ${row.name}.` : `${kind} ${row.name} was not paused.`, resumed ? 'ok' : 'error');
      } else {
        const { paused } = await post<{ paused: boolean }>(ctx.session, `${encodeURIComponent(ctx.instance)}/pauses/pause`, {
          ...row,
          reason: reason || undefined,
        });
        ctx.say(paused ? `Paused ${kind} ${row.name}.` : `${kind} ${row.name} was paused already.`, paused ? 'ok' : 'error');
      }
      await redraw();
    } catch (error) {
      ctx.say((error as Error).message, 'error');
    }
  };
  return h(
    'td',
    null,
    h(
      'button',
      {
        type: 'button',
        class: pause ? 'small' : 'danger small',
        onClick: act,
        'aria-label': `${pause ? 'Resume' : 'Pause'} ${kind} ${row.name}`,
      },
      pause ? 'Resume' : 'Pause',
    ),
  );
}
