// The Usage page: what the person spent per day over the last 30 days,
// as bar charts of cost (with the day's budget as a line) and of tokens,
// and the same numbers as a table. The charts are SVG built with DOM
// calls (no style attributes: the page's policy allows none).

import { h } from './chat.js';

const SVG = 'http://www.w3.org/2000/svg';
export const USAGE_DAYS = 30;

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
  return el;
}

const usd = (n) => '$' + (n || 0).toFixed(2);
const tokens = (n) => (n >= 1e6 ? (n / 1e6).toFixed(1) + 'M' : n >= 1e3 ? (n / 1e3).toFixed(1) + 'k' : String(n || 0));
const dayTokens = (d) => (d.input_tokens || 0) + (d.output_tokens || 0) + (d.cache_read_input_tokens || 0) + (d.cache_creation_input_tokens || 0);
const shortDate = (iso) => {
  const [, m, d] = iso.split('-');
  return `${Number(d)}/${Number(m)}`;
};

// chart draws one bar per day of value(day), on a scale that also holds
// limit (a dashed line, when set); label says what the chart shows.
export function chart(days, value, format, label, limit = 0) {
  const W = 600;
  const H = 180;
  const top = 12;
  const bottom = 22;
  const left = 48;
  const values = days.map(value);
  const max = Math.max(limit, ...values, 0) || 1;
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const step = (W - left) / Math.max(days.length, 1);
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img', 'aria-label': label });
  svg.append(s('line', { x1: left, x2: W, y1: y(0), y2: y(0), class: 'axis' }));
  svg.append(s('text', { x: left - 6, y: y(max) + 4, class: 'tick', 'text-anchor': 'end' }, format(max)));
  svg.append(s('text', { x: left - 6, y: y(0), class: 'tick', 'text-anchor': 'end' }, format(0)));
  days.forEach((d, i) => {
    const v = values[i];
    const x = left + i * step + step * 0.15;
    const bar = s('rect', { x, y: y(v), width: step * 0.7, height: Math.max(0, y(0) - y(v)), class: 'bar', 'data-date': d.date });
    bar.append(s('title', {}, `${d.date}: ${format(v)}`));
    svg.append(bar);
    if (i % 5 === days.length % 5 || i === days.length - 1) {
      // The last day's label ends at its bar, so it is not cut at the edge.
      const last = i === days.length - 1;
      svg.append(s('text', { x: last ? x + step * 0.7 : x + step * 0.35, y: H - 6, class: 'tick', 'text-anchor': last ? 'end' : 'middle' }, shortDate(d.date)));
    }
  });
  if (limit > 0) {
    svg.append(s('line', { x1: left, x2: W, y1: y(limit), y2: y(limit), class: 'budget' }));
    svg.append(s('text', { x: W - 4, y: y(limit) - 4, class: 'tick budget-label', 'text-anchor': 'end' }, 'budget ' + format(limit) + ' a day'));
  }
  return svg;
}

// UsageView fills the page's elements from GET /usage.
export class UsageView {
  constructor(el, api) {
    this.el = el;
    this.api = api;
  }

  async show() {
    const { view, summary, cost, tokens: tok, table } = this.el;
    view.hidden = false;
    summary.textContent = 'Loading…';
    cost.replaceChildren();
    tok.replaceChildren();
    let u;
    try {
      u = await this.api().usage(USAGE_DAYS);
    } catch (err) {
      summary.textContent = 'The usage could not be loaded: ' + err.message;
      return;
    }
    // The server lists the newest day first; the charts read left to right.
    const days = [...(u.days || [])].reverse();
    const limit = (u.limits && u.limits.person_day_usd) || 0;
    const total = u.total || {};
    summary.textContent = `The last ${days.length} days: ${usd(total.cost_usd)} for ${total.messages || 0} messages, ${tokens(dayTokens(total))} tokens. Today ${usd(u.today_usd)}` +
      (limit ? ` of ${usd(limit)} a day.` : '; there is no daily budget.');
    cost.replaceChildren(chart(days, (d) => d.cost_usd || 0, usd, `Cost per day over the last ${days.length} days` + (limit ? `, budget ${usd(limit)} a day` : ''), limit));
    tok.replaceChildren(chart(days, dayTokens, tokens, `Tokens per day over the last ${days.length} days`));
    table.replaceChildren(
      h('caption', { class: 'visually-hidden', text: 'Usage per day' }),
      h('thead', {}, h('tr', {}, ['Day', 'Messages', 'Cost', 'Input tokens', 'Output tokens', 'Cache tokens'].map((t) => h('th', { scope: 'col', text: t })))),
      h('tbody', {}, (u.days || []).map((d) => h('tr', {},
        h('th', { scope: 'row', text: d.date }), h('td', { text: String(d.messages || 0) }), h('td', { text: usd(d.cost_usd) }),
        h('td', { text: String(d.input_tokens || 0) }), h('td', { text: String(d.output_tokens || 0) }),
        h('td', { text: String((d.cache_read_input_tokens || 0) + (d.cache_creation_input_tokens || 0)) })))));
  }

  hide() {
    this.el.view.hidden = true;
  }
}
